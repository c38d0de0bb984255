#include "impl/cuda/elementwise_ops.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>

#include "impl/cuda/elementwise_kernels.h"

namespace gemma4::impl::cuda {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

DType kernel_dtype(const Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return DType::kFloat32;
    case torch::kBFloat16: return DType::kBFloat16;
    case torch::kFloat16: return DType::kFloat16;
    default: TORCH_CHECK(false, "no fused kernel for dtype ", t.scalar_type());
  }
}

// An activation of `op`: a CUDA tensor in fp32, bf16 or fp16, on the device and in the dtype of
// `like` (the op's first input).
void check_activation(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  TORCH_CHECK(t.defined(), op, ": '", name, "' is undefined");
  TORCH_CHECK(t.is_cuda(), op, ": '", name, "' must be a CUDA tensor, got device ", t.device());
  const auto dtype = t.scalar_type();
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kFloat16, op, ": '", name,
              "' must be float32, bfloat16 or float16, got ", dtype);
  TORCH_CHECK(t.device() == like.device(), op, ": '", name, "' is on ", t.device(), ", the other inputs on ",
              like.device());
  TORCH_CHECK(dtype == like.scalar_type(), op, ": '", name, "' has dtype ", dtype, ", the other inputs ",
              like.scalar_type());
}

void check_shape(const char* name, const Tensor& t, at::IntArrayRef expected) {
  TORCH_CHECK(t.sizes() == expected, "fused_qk_norm_rope: '", name, "' has shape ", t.sizes(), ", expected ",
              expected);
}

// A norm weight [D] of any floating dtype; the kernels read it in x's dtype or in fp32 (kernel_weight).
void check_norm_weight(const char* name, const Tensor& w, const Tensor& q) {
  TORCH_CHECK(w.defined(), "fused_qk_norm_rope: '", name, "' is undefined");
  TORCH_CHECK(w.device() == q.device(), "fused_qk_norm_rope: '", name, "' is on ", w.device(), ", q on ", q.device());
  TORCH_CHECK(at::isFloatingType(w.scalar_type()), "fused_qk_norm_rope: '", name, "' must be floating, got ",
              w.scalar_type());
  check_shape(name, w, {q.size(3)});
}

RowShape row_shape(const Tensor& x) {
  const RowShape shape{x.size(0), x.size(1), x.size(2), x.size(3)};
  TORCH_CHECK(shape.batch * shape.seq * shape.heads < (int64_t{1} << 32),
              "fused_qk_norm_rope: the kernels index at most 2^32 (token, head) rows, got shape ", x.sizes());
  return shape;
}

const void* data_ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* mutable_ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// The norm weight as the kernels read it: in x's dtype, or else in fp32 (exact for any floating
// weight), so that a bf16 model's weight needs no conversion kernel per call.
Tensor kernel_weight(const Tensor& weight, const Tensor& x) {
  if (!weight.defined()) return weight;
  return weight.scalar_type() == x.scalar_type() ? weight.contiguous() : weight.to(torch::kFloat32).contiguous();
}

// The fields the forward's and the backward's arguments share.
template <typename Args>
Args norm_rope_args(const Tensor& x, const Tensor& weight, const Tensor& cos, const Tensor& sin, double eps,
                    bool transposed) {
  Args args{};
  args.x = x.data_ptr();
  args.weight = data_ptr(weight);
  args.weight_fp32 = weight.defined() && weight.scalar_type() == torch::kFloat32;
  args.cos = data_ptr(cos);
  args.sin = data_ptr(sin);
  args.transposed = transposed;
  args.eps = static_cast<float>(eps);
  args.per_token_rope = cos.defined() && cos.dim() == 3;
  return args;
}

// rope(rms(x) * weight) of contiguous x [B, S, H, D] (weight from kernel_weight, or undefined; cos/sin
// undefined: no RoPE), in [B, H, S, D] when `transposed`; with `with_unscaled` also rms(x).
variable_list launch_forward(const Tensor& x, const Tensor& weight, const Tensor& cos, const Tensor& sin, double eps,
                             bool transposed, bool with_unscaled) {
  const c10::cuda::CUDAGuard guard(x.device());
  const RowShape shape = row_shape(x);
  const auto out_shape = transposed ? std::vector<int64_t>{shape.batch, shape.heads, shape.seq, shape.head_dim}
                                    : x.sizes().vec();
  const Tensor y = at::empty(out_shape, x.options());
  const Tensor y_unscaled = with_unscaled ? at::empty(out_shape, x.options()) : Tensor();
  auto args = norm_rope_args<NormRopeForwardArgs>(x, weight, cos, sin, eps, transposed);
  args.y = y.data_ptr();
  args.y_unscaled = mutable_ptr(y_unscaled);
  C10_CUDA_CHECK(norm_rope_forward(kernel_dtype(x), shape, args, at::cuda::getCurrentCUDAStream(x.get_device())));
  return with_unscaled ? variable_list{y, y_unscaled} : variable_list{y};
}

// {dx, dweight in fp32} for launch_forward's output gradients; dweight only when weight_grad.
std::pair<Tensor, Tensor> launch_backward(const Tensor& x, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                                          const Tensor& dy, const Tensor& dy_unscaled, double eps, bool transposed,
                                          bool weight_grad) {
  const c10::cuda::CUDAGuard guard(x.device());
  const RowShape shape = row_shape(x);
  // Incoming gradients may be expanded or strided views (the gradient of a sum, of a transpose).
  const Tensor dy_c = dy.contiguous();
  const Tensor dy_unscaled_c = dy_unscaled.defined() ? dy_unscaled.contiguous() : Tensor();
  const Tensor dx = at::empty(x.sizes(), x.options());
  const Tensor partial = weight_grad ? at::empty({norm_rope_backward_blocks(shape), shape.head_dim},
                                                 x.options().dtype(torch::kFloat32))
                                     : Tensor();
  auto args = norm_rope_args<NormRopeBackwardArgs>(x, weight, cos, sin, eps, transposed);
  args.dy = data_ptr(dy_c);
  args.dy_unscaled = data_ptr(dy_unscaled_c);
  args.dx = mutable_ptr(dx);
  args.dweight_partial = weight_grad ? partial.data_ptr<float>() : nullptr;
  C10_CUDA_CHECK(norm_rope_backward(kernel_dtype(x), shape, args, at::cuda::getCurrentCUDAStream(x.get_device())));
  // The per-block partial sums reduced in a fixed order: the weight gradient is deterministic.
  return {dx, weight_grad ? partial.sum(0) : Tensor()};
}

// rope(rms(x, weight)) of x [B, S, H, D] ([B, H, S, D] when `transposed`). With `with_unscaled`
// (K=V layers) also rms(x) without weight or RoPE, the value, so that the raw key is read once
// for both and its gradient sums both paths.
struct NormRope : torch::autograd::Function<NormRope> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& cos,
                               const Tensor& sin, double eps, bool transposed, bool with_unscaled) {
    const Tensor x_c = x.contiguous();
    ctx->save_for_backward({x_c, weight, cos, sin});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["with_unscaled"] = with_unscaled;
    return launch_forward(x_c, kernel_weight(weight, x_c), cos, sin, eps, transposed, with_unscaled);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &cos = saved[2], &sin = saved[3];
    const bool with_unscaled = ctx->saved_data["with_unscaled"].toBool();
    auto [dx, dweight] = launch_backward(x, kernel_weight(weight, x), cos, sin, grads[0],
                                         with_unscaled ? grads[1] : Tensor(), ctx->saved_data["eps"].toDouble(),
                                         ctx->saved_data["transposed"].toBool(), ctx->needs_input_grad(1));
    if (dweight.defined()) dweight = dweight.to(weight.scalar_type());
    return {dx, dweight, Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// rms(x) without weight of x [B, S, H, D], as [B, H, S, D]: the v norm.
struct UnscaledNorm : torch::autograd::Function<UnscaledNorm> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double eps) {
    const Tensor x_c = x.contiguous();
    ctx->save_for_backward({x_c});
    ctx->saved_data["eps"] = eps;
    return launch_forward(x_c, Tensor(), Tensor(), Tensor(), eps, /*transposed=*/true, /*with_unscaled=*/false)[0];
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor x = ctx->get_saved_variables()[0];
    const Tensor dx = launch_backward(x, Tensor(), Tensor(), Tensor(), grads[0], Tensor(),
                                      ctx->saved_data["eps"].toDouble(), /*transposed=*/true, /*weight_grad=*/false)
                          .first;
    return {dx, Tensor()};
  }
};

struct Geglu : torch::autograd::Function<Geglu> {
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const Tensor gate_c = gate.contiguous(), up_c = up.contiguous();
    ctx->save_for_backward({gate_c, up_c});
    const Tensor out = at::empty(gate.sizes(), gate.options());
    C10_CUDA_CHECK(geglu_forward(kernel_dtype(gate), gate_c.data_ptr(), up_c.data_ptr(), out.data_ptr(), out.numel(),
                                 at::cuda::getCurrentCUDAStream(gate.get_device())));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &gate = saved[0], &up = saved[1];
    const c10::cuda::CUDAGuard guard(gate.device());
    const Tensor dout = grads[0].contiguous();
    const Tensor dgate = at::empty(gate.sizes(), gate.options()), dup = at::empty(up.sizes(), up.options());
    C10_CUDA_CHECK(geglu_backward(kernel_dtype(gate), gate.data_ptr(), up.data_ptr(), dout.data_ptr(), dgate.data_ptr(),
                                  dup.data_ptr(), gate.numel(), at::cuda::getCurrentCUDAStream(gate.get_device())));
    return {dgate, dup};
  }
};

}  // namespace

QkvOutputs fused_qk_norm_rope(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                              const Tensor& k_norm, const RopeTable& rope, double eps) {
  constexpr const char* kOp = "fused_qk_norm_rope";
  check_activation(kOp, "q", q, q);
  TORCH_CHECK(q.dim() == 4, kOp, ": 'q' must be [B, S, Hq, D], got shape ", q.sizes());
  const int64_t B = q.size(0), S = q.size(1), D = q.size(3);
  // RoPE pairs d with d + D/2; one warp holds a row of at most 512 (the global head dim).
  TORCH_CHECK(D > 0 && D % 2 == 0 && D <= 512, kOp, ": head dim ", D, " of 'q' must be even and at most 512");
  check_norm_weight("q_norm", q_norm, q);
  // The tokens' table rows: [S, D], or [B, S, D] when each batch row has its own positions
  // (decoding a padded batch); the kernel reads the latter per token.
  const RopeTable rows = rope_rows(rope);
  check_activation(kOp, "rope.cos", rows.cos, q);
  check_activation(kOp, "rope.sin", rows.sin, q);
  const std::vector<int64_t> table = rope.positions.defined() ? std::vector<int64_t>{B, S, D} : std::vector<int64_t>{S, D};
  check_shape("rope.cos", rows.cos, table);
  check_shape("rope.sin", rows.sin, table);
  if (k.defined()) {
    check_activation(kOp, "k", k, q);
    TORCH_CHECK(k.dim() == 4 && k.size(0) == B && k.size(1) == S && k.size(3) == D, kOp, ": 'k' has shape ",
                k.sizes(), ", expected [", B, ", ", S, ", Hkv, ", D, "]");
    check_norm_weight("k_norm", k_norm, q);
  } else {
    TORCH_CHECK(!v.defined(), kOp, ": 'v' given without 'k'");
  }
  if (v.defined()) {
    check_activation(kOp, "v", v, q);
    check_shape("v", v, k.sizes());
  }

  const Tensor cos = rows.cos.contiguous(), sin = rows.sin.contiguous();
  QkvOutputs out;
  out.q = NormRope::apply(q, q_norm, cos, sin, eps, /*transposed=*/false, /*with_unscaled=*/false)[0];
  if (!k.defined()) return out;  // a KV-shared layer: q only
  if (v.defined()) {
    out.k = NormRope::apply(k, k_norm, cos, sin, eps, /*transposed=*/true, /*with_unscaled=*/false)[0];
    out.v = UnscaledNorm::apply(v, eps);
  } else {  // K=V: the value is the raw key, normalised without scale
    const variable_list kv = NormRope::apply(k, k_norm, cos, sin, eps, /*transposed=*/true, /*with_unscaled=*/true);
    out.k = kv[0];
    out.v = kv[1];
  }
  return out;
}

Tensor fused_geglu(const Tensor& gate, const Tensor& up) {
  check_activation("fused_geglu", "gate", gate, gate);
  check_activation("fused_geglu", "up", up, gate);
  TORCH_CHECK(gate.sizes() == up.sizes(), "fused_geglu: 'up' has shape ", up.sizes(), ", 'gate' ", gate.sizes());
  return Geglu::apply(gate, up);
}

}  // namespace gemma4::impl::cuda

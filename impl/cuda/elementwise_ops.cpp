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

// The layer's q, k and v norms (GEMMA4.md, Forward 3 and 5): q [B, S, Hq, D] -> rope(rms(q) * q_norm)
// as laid out; k [B, S, Hkv, D] -> rope(rms(k) * k_norm) in [B, Hkv, S, D]; v -> rms(v) in
// [B, Hkv, S, D], or on K=V layers (v undefined) rms(k), so that the raw key is read once for both
// and its gradient sums both paths. k undefined: q alone (a KV-shared layer). The forward is one
// launch for all three where the staged kernel takes them; the backward one launch for all three
// where their vector widths agree, the norm weights' gradients finished in it (after a memset of
// its counters).
// Autograd's custom functions take defined tensors only, so an absent k, v or k_norm comes as an
// empty stand-in and `layout` says which are real.
enum class QkvLayout : int64_t { kQueryOnly, kKeyIsValue, kKeyAndValue };

struct QkvNormRope : torch::autograd::Function<QkvNormRope> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& q_norm, const Tensor& k_norm, const Tensor& cos, const Tensor& sin,
                               double eps, QkvLayout layout) {
    const c10::cuda::CUDAGuard guard(q.device());
    const Tensor q_c = q.contiguous();
    const Tensor k_c = layout != QkvLayout::kQueryOnly ? k.contiguous() : Tensor();
    const Tensor v_c = layout == QkvLayout::kKeyAndValue ? v.contiguous() : Tensor();
    ctx->save_for_backward({q_c, k_c, v_c, q_norm, k_c.defined() ? k_norm : Tensor(), cos, sin});
    ctx->saved_data["eps"] = eps;

    variable_list outputs;  // q; then k and v
    NormRopeForwardJob jobs[kMaxNormRopeJobs];
    Tensor weights[kMaxNormRopeJobs];  // as the kernel reads them, alive until the launch
    int count = 0;
    auto add = [&](const Tensor& x, const Tensor& weight, bool rope, bool transposed, bool with_unscaled) {
      const RowShape shape = row_shape(x);
      const auto out_shape = transposed ? std::vector<int64_t>{shape.batch, shape.heads, shape.seq, shape.head_dim}
                                        : x.sizes().vec();
      const int j = count++;
      weights[j] = kernel_weight(weight, x);
      NormRopeForwardJob& job = jobs[j];
      job.shape = shape;
      job.args = norm_rope_args<NormRopeForwardArgs>(x, weights[j], rope ? cos : Tensor(), rope ? sin : Tensor(), eps,
                                                     transposed);
      outputs.push_back(at::empty(out_shape, x.options()));
      job.args.y = outputs.back().data_ptr();
      if (with_unscaled) {
        outputs.push_back(at::empty(out_shape, x.options()));
        job.args.y_unscaled = outputs.back().data_ptr();
      }
    };
    add(q_c, q_norm, /*rope=*/true, /*transposed=*/false, /*with_unscaled=*/false);
    if (k_c.defined()) add(k_c, k_norm, /*rope=*/true, /*transposed=*/true, /*with_unscaled=*/!v_c.defined());
    if (v_c.defined()) add(v_c, Tensor(), /*rope=*/false, /*transposed=*/true, /*with_unscaled=*/false);
    C10_CUDA_CHECK(norm_rope_forward(kernel_dtype(q_c), jobs, count, at::cuda::getCurrentCUDAStream(q.get_device())));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &q_norm = saved[3], &k_norm = saved[4];
    const Tensor &cos = saved[5], &sin = saved[6];
    const double eps = ctx->saved_data["eps"].toDouble();
    const c10::cuda::CUDAGuard guard(q.device());

    NormRopeBackwardJob jobs[kMaxNormRopeJobs];
    Tensor inputs[kMaxNormRopeJobs][3];  // the weight as read, dy and dy_unscaled, alive until the launch
    Tensor dx[kMaxNormRopeJobs], dweight[kMaxNormRopeJobs];  // q, k, v: undefined where absent
    int count = 0;
    auto add = [&](const Tensor& x, const Tensor& weight, bool rope, bool transposed, const Tensor& dy,
                   const Tensor& dy_unscaled, bool weight_grad) {
      const int j = count++;
      Tensor &kernel_w = inputs[j][0], &dy_c = inputs[j][1], &dy_unscaled_c = inputs[j][2];
      kernel_w = kernel_weight(weight, x);
      // Incoming gradients may be expanded or strided views (the gradient of a sum, of a transpose).
      dy_c = dy.contiguous();
      if (dy_unscaled.defined()) dy_unscaled_c = dy_unscaled.contiguous();
      dx[j] = at::empty(x.sizes(), x.options());
      // In the dtype the kernel reads the weight in; backward() converts it to the weight's own.
      if (weight_grad) dweight[j] = at::empty({x.size(3)}, kernel_w.options());
      NormRopeBackwardJob& job = jobs[j];
      job.shape = row_shape(x);
      job.args = norm_rope_args<NormRopeBackwardArgs>(x, kernel_w, rope ? cos : Tensor(), rope ? sin : Tensor(), eps,
                                                      transposed);
      job.args.dy = data_ptr(dy_c);
      job.args.dy_unscaled = data_ptr(dy_unscaled_c);
      job.args.dx = mutable_ptr(dx[j]);
      job.args.dweight = mutable_ptr(dweight[j]);
    };
    add(q, q_norm, /*rope=*/true, /*transposed=*/false, grads[0], Tensor(), ctx->needs_input_grad(3));
    if (k.defined()) {
      const bool k_is_v = !v.defined();  // grads[2]: the gradient of rms(k), summed into dk
      add(k, k_norm, /*rope=*/true, /*transposed=*/true, grads[1], k_is_v ? grads[2] : Tensor(),
          ctx->needs_input_grad(4));
      if (!k_is_v) add(v, Tensor(), /*rope=*/false, /*transposed=*/true, grads[2], Tensor(), /*weight_grad=*/false);
    }
    const size_t bytes = norm_rope_backward_workspace(jobs, count);
    const Tensor workspace =
        bytes > 0 ? at::empty({static_cast<int64_t>(bytes)}, q.options().dtype(torch::kUInt8)) : Tensor();
    C10_CUDA_CHECK(norm_rope_backward(kernel_dtype(q), jobs, count, mutable_ptr(workspace),
                                      at::cuda::getCurrentCUDAStream(q.get_device())));

    // A weight in neither x's dtype nor fp32 (read as fp32) gets its gradient converted.
    auto weight_grad = [](const Tensor& grad, const Tensor& weight) {
      return grad.defined() ? grad.to(weight.scalar_type()) : grad;
    };
    return {dx[0], dx[1], dx[2], weight_grad(dweight[0], q_norm), weight_grad(dweight[1], k_norm),
            Tensor(), Tensor(), Tensor(), Tensor()};
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
  Tensor none;  // made only where a tensor is absent (KV-shared and K=V layers)
  auto real = [&](const Tensor& t) {
    if (!t.defined() && !none.defined()) none = at::empty({0}, q.options());
    return t.defined() ? t : none;
  };
  const QkvLayout layout =
      !k.defined() ? QkvLayout::kQueryOnly : v.defined() ? QkvLayout::kKeyAndValue : QkvLayout::kKeyIsValue;
  const variable_list y = QkvNormRope::apply(q, real(k), real(v), q_norm, real(k_norm), cos, sin, eps, layout);
  QkvOutputs out;
  out.q = y[0];
  if (k.defined()) {  // else a KV-shared layer: q only
    out.k = y[1];
    out.v = y[2];
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

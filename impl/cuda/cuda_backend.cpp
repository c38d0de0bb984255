#include "impl/cuda/cuda_backend.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "impl/cuda/attention_op.h"
#include "impl/cuda/elementwise_ops.h"
#include "impl/cuda/kv_cache_op.h"
#include "reference/error.h"
#include "reference/ops.h"

namespace gemma4::impl {

namespace {

Backend cuda_backend(cuda::DqOrder dq_order) {
  Backend b;
  const bool fixed = dq_order == cuda::DqOrder::kFixed;
  b.name = fixed ? "cuda-deterministic" : "cuda";
  b.kind = BackendKind::kFused;
  b.description =
      "fused CUDA kernels for Hopper (sm_90): attention with tiles outside the window skipped (head dims up to 512), "
      "q/k norm + RoPE, GeGLU; packed rows (several sequences in one row) go to the reference's eager attention" +
      std::string(fixed ? "; attention's dQ summed in key-block order (bitwise-reproducible, slower)"
                        : "; attention's dQ summed with atomics in arrival order (not bitwise-reproducible)");
  b.capabilities.devices = {torch::kCUDA};
  b.capabilities.dtypes = {torch::kBFloat16, torch::kFloat16};
  // The kernels are built for head dims 64, 256 and 512; smaller ones are zero-padded up. These are
  // the head dims the suite exercises; others are reported not supported rather than guessed at.
  b.capabilities.head_dims = {8, 16, 32, 64, 128, 256, 512};
  // Every kernel writes each output element once, except the attention backward's dQ: a sum over
  // key blocks, whose order decides its last bits.
  b.capabilities.deterministic = fixed;
  b.ops = reference_layer_ops();
  // GEMMA4_CUDA_OPS=attention,qk_norm_rope,geglu (the default: all three) picks which fused ops
  // replace the reference's, to bisect a failure down to one kernel.
  const char* env = std::getenv("GEMMA4_CUDA_OPS");
  std::istringstream chosen(env ? env : "attention,qk_norm_rope,geglu");
  for (std::string op; std::getline(chosen, op, ',');) {
    if (op == "attention") {
      b.ops.attention = [dq_order](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const AttentionSpec& spec) {
        // The kernels mask by window band and padding only: a packed row's sequences need a
        // mask of their own, which the reference's eager attention takes.
        if (spec.segments.defined()) {
          return eager_attention(q, k, v, attention_mask(spec, q.size(0), q.size(1), q.scalar_type(), q.device()));
        }
        return cuda::fused_attention(q, k, v, spec, dq_order);
      };
    } else if (op == "qk_norm_rope") {
      b.ops.qk_norm_rope = cuda::fused_qk_norm_rope;
    } else if (op == "geglu") {
      b.ops.geglu = cuda::fused_geglu;
    } else if (!op.empty()) {
      throw Error("GEMMA4_CUDA_OPS: unknown op '" + op + "' (known: attention, qk_norm_rope, geglu)");
    }
  }
  // Decoding: preallocated caches (a ring on sliding layers) and the split-K decode kernel.
  b.kv_cache = cuda::kv_cache_ops();
  return b;
}

}  // namespace

std::vector<Backend> cuda_backends() {
  return {cuda_backend(cuda::DqOrder::kArrival), cuda_backend(cuda::DqOrder::kFixed)};
}

}  // namespace gemma4::impl

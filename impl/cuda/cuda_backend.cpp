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

// `name`: cuda, or cuda-deterministic, the same kernels under the name that baselines and
// scoreboard rows from before the two-pass backward (when cuda added dQ with atomics) are keyed by.
Backend cuda_backend(const char* name) {
  Backend b;
  b.name = name;
  b.kind = BackendKind::kFused;
  b.description =
      "fused CUDA kernels for Hopper (sm_90): attention with tiles outside the window skipped (head dims up to 512; "
      "the backward in two passes, dK/dV key-major and dQ query-major, so no atomics: bitwise-reproducible), "
      "q/k norm + RoPE, GeGLU; packed rows (several sequences in one row) go to the reference's eager attention; "
      "decoding by a split-K kernel on preallocated caches (a ring on sliding layers), never dispatched to cuDNN: "
      "on the H100 cuDNN SDPA is faster at steps of one CTA an SM (31B sliding B 8 by under 1%, E4B sliding "
      "B 64 by 3%; bench/README.md, Decode attention)";
  b.capabilities.devices = {torch::kCUDA};
  b.capabilities.dtypes = {torch::kBFloat16, torch::kFloat16};
  // The kernels are built for head dims 64, 256 and 512; smaller ones are zero-padded up. These are
  // the head dims the suite exercises; others are reported not supported rather than guessed at.
  b.capabilities.head_dims = {8, 16, 32, 64, 128, 256, 512};
  // Every kernel writes each output element once (the weight gradients' partial sums are reduced
  // in a fixed order), so results are bitwise-reproducible run to run.
  b.capabilities.deterministic = true;
  b.ops = reference_layer_ops();
  // GEMMA4_CUDA_OPS=attention,qk_norm_rope,geglu (the default: all three) picks which fused ops
  // replace the reference's, to bisect a failure down to one kernel.
  const char* env = std::getenv("GEMMA4_CUDA_OPS");
  std::istringstream chosen(env ? env : "attention,qk_norm_rope,geglu");
  for (std::string op; std::getline(chosen, op, ',');) {
    if (op == "attention") {
      b.ops.attention = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const AttentionSpec& spec) {
        // The kernels mask by window band and padding only: a packed row's sequences need a
        // mask of their own, which the reference's eager attention takes.
        if (spec.segments.defined()) {
          return eager_attention(q, k, v, attention_mask(spec, q.size(0), q.size(1), q.scalar_type(), q.device()));
        }
        return cuda::fused_attention(q, k, v, spec);
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
  return {cuda_backend("cuda"), cuda_backend("cuda-deterministic")};
}

}  // namespace gemma4::impl

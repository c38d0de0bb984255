#include "impl/cuda/cuda_backend.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "impl/cuda/attention_op.h"
#include "impl/cuda/elementwise_ops.h"
#include "reference/error.h"

namespace gemma4::impl {

Backend cuda_backend() {
  Backend b;
  b.name = "cuda";
  b.kind = BackendKind::kFused;
  b.description =
      "fused CUDA kernels for Hopper (sm_90): attention with tiles outside the window skipped (head dims up to 512), "
      "q/k norm + RoPE, GeGLU";
  b.capabilities.devices = {torch::kCUDA};
  b.capabilities.dtypes = {torch::kBFloat16, torch::kFloat16};
  // The kernels are built for head dims 64, 256 and 512; smaller ones are zero-padded up. These are
  // the head dims the suite exercises; others are reported not supported rather than guessed at.
  b.capabilities.head_dims = {8, 16, 32, 64, 128, 256, 512};
  b.capabilities.deterministic = true;  // no atomics: every output element is written by one warp
  b.ops = reference_layer_ops();
  // GEMMA4_CUDA_OPS=attention,qk_norm_rope,geglu (the default: all three) picks which fused ops
  // replace the reference's, to bisect a failure down to one kernel.
  const char* env = std::getenv("GEMMA4_CUDA_OPS");
  std::istringstream chosen(env ? env : "attention,qk_norm_rope,geglu");
  for (std::string op; std::getline(chosen, op, ',');) {
    if (op == "attention") {
      b.ops.attention = cuda::fused_attention;
    } else if (op == "qk_norm_rope") {
      b.ops.qk_norm_rope = cuda::fused_qk_norm_rope;
    } else if (op == "geglu") {
      b.ops.geglu = cuda::fused_geglu;
    } else if (!op.empty()) {
      throw Error("GEMMA4_CUDA_OPS: unknown op '" + op + "' (known: attention, qk_norm_rope, geglu)");
    }
  }
  return b;
}

}  // namespace gemma4::impl

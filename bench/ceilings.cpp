// The device's ceilings, measured in the same run as the ops: the 100% lines for their GB/s and
// TFLOP/s counters.
//   ceiling/d2d_copy/cuda/1GiB   copy_ of a 1 GiB buffer into another; bytes = read + write = 2 GiB:
//                                the copy ceiling every GB/s is compared with.
//   ceiling/d2d_copy/cuda/32MiB, /128MiB   the same copy of fewer bytes (64 and 256 MiB moved): what a
//                                memory-bound launch of that size reaches at most, its launch, first
//                                DRAM latency and last wave included. A q/k norm + RoPE forward at the
//                                31B sliding shape moves 65 MiB at S = 1k and 260 MiB at 4k.
//   ceiling/gemm_bf16/cuda/8192  an 8192 x 8192 x 8192 bf16 matmul (at::mm_out); FLOP = 2 n^3.
// Registered even without a GPU (listed, then skipped at run time).
#include <ATen/ATen.h>

#include "bench/case_cache.h"
#include "bench/registration.h"
#include "bench/run.h"

namespace gemma4::bench {
namespace {

using torch::Tensor;

struct CopySize {
  int64_t bytes;  // of each buffer
  const char* label;
};
constexpr CopySize kCopies[] = {
    {int64_t{32} << 20, "32MiB"}, {int64_t{128} << 20, "128MiB"}, {int64_t{1} << 30, "1GiB"}};
constexpr int64_t kGemmN = 8192;

struct Copy {
  Tensor src, dst;
};

struct Gemm {
  Tensor a, b, out;
};

void register_copy(const torch::Device& device, const CopySize& size) {
  const std::string name = std::string("ceiling/d2d_copy/cuda/") + size.label;
  const int64_t bytes = size.bytes;
  register_benchmark(name, [device, name, bytes](benchmark::State& state) {
    run_benchmark(state, device, Work{0, 2.0 * double(bytes)}, kWarmup, [&] {
      const Copy& copy = cached_case<Copy>(name, device, 2.0 * double(bytes), [&] {
        const auto opts = torch::TensorOptions().dtype(torch::kByte).device(device);
        return Copy{at::ones({bytes}, opts), at::empty({bytes}, opts)};
      });
      return [dst = copy.dst, src = copy.src]() mutable { dst.copy_(src); };
    });
  });
}

void register_gemm(const torch::Device& device) {
  const std::string name = "ceiling/gemm_bf16/cuda/" + std::to_string(kGemmN);
  const double n = static_cast<double>(kGemmN);
  register_benchmark(name, [device, name, n](benchmark::State& state) {
    run_benchmark(state, device, Work{2 * n * n * n, 0}, kWarmup, [&] {
      const Gemm& gemm = cached_case<Gemm>(name, device, 3 * n * n * 2, [&] {
        const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
        return Gemm{at::randn({kGemmN, kGemmN}, opts), at::randn({kGemmN, kGemmN}, opts),
                    at::empty({kGemmN, kGemmN}, opts)};
      });
      return [a = gemm.a, b = gemm.b, out = gemm.out]() mutable { at::mm_out(out, a, b); };
    });
  });
}

}  // namespace

void register_ceilings() {
  const torch::Device cuda(torch::kCUDA);
  for (const CopySize& size : kCopies) register_copy(cuda, size);
  register_gemm(cuda);
}

}  // namespace gemma4::bench

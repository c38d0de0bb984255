// The fp8 KV-cache bugs of inference engines (issue "Quantized Gemma-4"): each is the legitimate
// fp8 cache of impl/variants/fp8_kv_cache.cpp with one of its hooks changed. They touch only
// decoding; the decode checks judge a quantized cache against the reference's cache quantized the
// same way, so what fails is the bug, not e4m3's rounding.
#include <ATen/ATen.h>

#include "impl/faulty/faulty_backends.h"
#include "impl/variants/fp8_kv_cache.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

// What the allocator left in memory nobody wrote, made deterministic: a hash of the element index
// as the dtype's bit pattern (the finite ones; a NaN would poison any amax kernel's fmax the same).
Tensor leftover_bits(at::IntArrayRef sizes, torch::ScalarType dtype, const torch::Device& device) {
  const int64_t bits = dtype == torch::kFloat32 ? 32 : 16;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t n = c10::multiply_integers(sizes);
  const Tensor hash = at::arange(n, i64).mul(2654435761LL).bitwise_and((int64_t{1} << bits) - 1) - (int64_t{1} << (bits - 1));
  const Tensor x = hash.to(bits == 32 ? torch::kInt32 : torch::kInt16).view(bits == 32 ? torch::kFloat32 : dtype);
  return at::where(at::isfinite(x), x, at::zeros_like(x)).view(sizes).to(device);
}

Backend scale_from_wide_buffer() {
  // kekzl/imp #91: the K/V workspaces are sized for the widest layer (head dim 512 on Gemma-4's
  // global layers); a sliding layer writes its 256 columns at the front of each row, and the fp8
  // calibration's absmax ran over the whole row, trailing columns never written: a per-layer scale
  // from uninitialised memory. Here the static per-tensor scale of a layer narrower than the
  // model's widest is calibrated on its values beside such columns.
  Backend b = faulty_backend("faulty-fp8-kv-scale-from-wide-buffer",
                             "fp8 KV cache: a sliding layer's static scale is calibrated over a workspace row sized for "
                             "the widest head dim (512), whose unwritten columns hold leftover bits (kekzl/imp #91)",
                             {Category::kDecode});
  Fp8KvCacheHooks hooks;
  hooks.calibration_values = [](const Tensor& x, const CacheSpec& spec) {
    if (spec.widest_head_dim <= spec.head_dim) return x;
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = spec.widest_head_dim - spec.head_dim;
    return at::cat({x, leftover_bits(sizes, x.scalar_type(), x.device())}, -1);
  };
  b.kv_cache = fp8_kv_cache_ops(KvQuantization::kFp8PerTensor, hooks);
  return b;
}

Backend ring_scales_do_not_wrap() {
  // ekryski/mlx-swift-lm #185: a quantized rotating sliding-window cache gave incoherent output on
  // Gemma-4. Here the ring's per-entry scales are addressed in the order the entries were written,
  // as if the ring had not wrapped, while their codes are where the ring put them: right until the
  // ring wraps, then every entry is decoded with another entry's scale.
  Backend b = faulty_backend("faulty-fp8-kv-ring-scales-do-not-wrap",
                             "fp8 KV cache with per-entry scales: a sliding layer's ring reads its scales in write "
                             "order while its codes wrap (ekryski/mlx-swift-lm #185)",
                             {Category::kDecode});
  Fp8KvCacheHooks hooks;
  hooks.scale_slots = [](const Tensor& code_slots) { return at::arange(code_slots.size(0), code_slots.options()); };
  b.kv_cache = fp8_kv_cache_ops(KvQuantization::kFp8PerToken, hooks);
  return b;
}

Backend k_as_v_on_global_layers() {
  // ikawrakow/ik_llama.cpp #1592: with a quantized KV cache on CUDA, global layers took another code
  // path that read K where V belongs.
  Backend b = faulty_backend("faulty-fp8-kv-k-as-v-global",
                             "fp8 KV cache: global layers' attention decodes V from the K codes and scales "
                             "(ikawrakow/ik_llama.cpp #1592)",
                             {Category::kDecode});
  Fp8KvCacheHooks hooks;
  hooks.full_layers_read_k_as_v = true;
  b.kv_cache = fp8_kv_cache_ops(KvQuantization::kFp8PerHead, hooks);
  return b;
}

}  // namespace

std::vector<Backend> faulty_fp8_kv_cache_backends() {
  return {scale_from_wide_buffer(), ring_scales_do_not_wrap(), k_as_v_on_global_layers()};
}

}  // namespace gemma4::impl

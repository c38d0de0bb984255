#pragma once
// KvCacheOps (reference/kv_cache.h) on the GPU: preallocated caches in the run's dtype, updated in
// place, and the decode attention kernel (decode_attention.cu) for steps of a few queries.
#include "reference/kv_cache.h"

namespace gemma4::impl::cuda {

// make / update / attention / contents for CUDA bf16 and fp16 caches. Layout, memory and the
// fallbacks: kv_cache_op.cpp. Bad input (an update at the wrong index, past the capacity, in
// another dtype or on another device) throws gemma4::Error naming the layer.
const KvCacheOps& kv_cache_ops();

}  // namespace gemma4::impl::cuda

// A legitimate decoding variant: a paged KV cache (vLLM's PagedAttention layout) with a split-K
// attention (flash-decoding's combine). It exists so that the decode category is shown to pass a
// cache that is laid out and reduced nothing like the reference's contiguous one:
//  - one pool of fixed-size pages per layer, shared by the batch; each row has a page table, and
//    rows take pages in turn from a free list, so a row's keys are never contiguous;
//  - sliding layers give a page back once every key on it has left the window, counting the
//    max_rollback indices a rejected draft may take back (its pages are reused, holding stale keys
//    the mask must hide); a rollback gives back the pages past the new end;
//  - attention scores each page apart in fp32, rounds its probabilities to the dtype before P.V
//    (as a kernel feeds its second GEMM), and combines the pages' (max, sum, P.V) partials once.
#include <ATen/ATen.h>

#include <limits>
#include <string>
#include <vector>

#include "impl/variants/variant_backends.h"
#include "reference/error.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

constexpr int64_t kPage = 4;  // tokens per page: small, so the tiny models' runs cross many pages

struct PagedCache : LayerKvCache {
  CacheSpec spec;
  Tensor k_pool, v_pool;                    // [pages * kPage, Hkv, D]: slot s of page p at row p * kPage + s
  std::vector<std::vector<int64_t>> pages;  // per batch row: logical page n -> physical page (-1: given back)
  std::vector<int64_t> free_pages;
  int64_t length = 0;      // token indices written
  int64_t first_page = 0;  // the oldest logical page still held
};

int64_t take_page(PagedCache& c) {
  if (c.free_pages.empty()) {  // grow the pool by one page per row
    const int64_t old = c.k_pool.size(0) / kPage, B = c.spec.batch;
    const Tensor more = at::zeros({B * kPage, c.spec.kv_heads, c.spec.head_dim}, c.k_pool.options());
    c.k_pool = at::cat({c.k_pool, more});
    c.v_pool = at::cat({c.v_pool, more});
    for (int64_t p = old + B - 1; p >= old; --p) c.free_pages.push_back(p);
  }
  const int64_t p = c.free_pages.back();
  c.free_pages.pop_back();
  return p;
}

// The pool rows [B, n] that hold token indices from .. from + n - 1 of every batch row.
Tensor pool_rows(const PagedCache& c, int64_t from, int64_t n) {
  std::vector<int64_t> rows;
  rows.reserve(c.spec.batch * n);
  for (int64_t b = 0; b < c.spec.batch; ++b) {
    for (int64_t t = from; t < from + n; ++t) rows.push_back(c.pages[b].at(t / kPage) * kPage + t % kPage);
  }
  return at::tensor(rows, at::kLong).view({c.spec.batch, n}).to(c.k_pool.device());
}

std::unique_ptr<LayerKvCache> make_paged(const CacheSpec& spec) {
  auto c = std::make_unique<PagedCache>();
  c->spec = spec;
  const auto options = torch::TensorOptions().dtype(spec.dtype).device(spec.device);
  c->k_pool = at::zeros({0, spec.kv_heads, spec.head_dim}, options);
  c->v_pool = c->k_pool.clone();
  c->pages.resize(spec.batch);
  return c;
}

void update_paged(LayerKvCache& base, const Tensor& k, const Tensor& v, int64_t start) {
  auto& c = dynamic_cast<PagedCache&>(base);
  const int64_t B = k.size(0), n = k.size(2);
  if (start != c.length) {
    throw Error("layer " + std::to_string(c.spec.layer) + " paged cache: update at index " + std::to_string(start) +
                " but " + std::to_string(c.length) + " indices were written");
  }
  if (B != c.spec.batch || k.scalar_type() != c.spec.dtype) {
    throw Error("layer " + std::to_string(c.spec.layer) + " paged cache: k of batch " + std::to_string(B) +
                " or dtype other than the cache's");
  }
  // A sliding layer's first query of this step (index start) sees from start - window + 1, and the
  // first after a rollback from start + n - max_rollback - window + 1: whole pages before both go
  // back to the free list, before this step takes any.
  const int64_t seen = std::min(start, start + n - c.spec.max_rollback) - c.spec.window + 1;
  while (c.spec.window > 0 && (c.first_page + 1) * kPage <= seen) {
    for (int64_t b = 0; b < B; ++b) {
      c.free_pages.push_back(c.pages[b][c.first_page]);
      c.pages[b][c.first_page] = -1;
    }
    ++c.first_page;
  }
  for (int64_t t = start; t < start + n; ++t) {
    if (t % kPage != 0) continue;
    for (int64_t b = 0; b < B; ++b) c.pages[b].push_back(take_page(c));  // rows take pages in turn
  }
  const Tensor rows = pool_rows(c, start, n).flatten();
  c.k_pool.index_copy_(0, rows, k.permute({0, 2, 1, 3}).reshape({B * n, c.spec.kv_heads, c.spec.head_dim}));
  c.v_pool.index_copy_(0, rows, v.permute({0, 2, 1, 3}).reshape({B * n, c.spec.kv_heads, c.spec.head_dim}));
  c.length = start + n;
}

void rollback_paged(LayerKvCache& base, int64_t n) {
  auto& c = dynamic_cast<PagedCache&>(base);
  check_rollback(c.spec, n, c.length - c.first_page * kPage);
  c.length -= n;
  for (auto& row : c.pages) {  // pages wholly past the new end go back; their slots are stale
    while (static_cast<int64_t>(row.size()) * kPage >= c.length + kPage) {
      c.free_pages.push_back(row.back());
      row.pop_back();
    }
  }
}

CacheContents paged_contents(const LayerKvCache& base) {
  const auto& c = dynamic_cast<const PagedCache&>(base);
  const int64_t first = c.first_page * kPage, n = c.length - first;
  const Tensor rows = pool_rows(c, first, n);  // [B, n]
  auto gather = [&](const Tensor& pool) {
    return pool.index_select(0, rows.flatten())
        .view({c.spec.batch, n, c.spec.kv_heads, c.spec.head_dim})
        .transpose(1, 2);
  };
  return {gather(c.k_pool), gather(c.v_pool), first};
}

Tensor split_k_attention(const Tensor& q, const LayerKvCache& base, const DecodeAttentionSpec& spec) {
  const CacheContents held = paged_contents(base);
  const int64_t B = q.size(0), c = q.size(1), Hq = q.size(2), D = q.size(3), T = held.k.size(2);
  const torch::ScalarType dtype = q.scalar_type();
  const Tensor allowed = decode_attention_mask(spec, c, held.first, T, torch::kFloat32, q.device()) == 0;  // [B,1,c,T]
  const Tensor qf = q.transpose(1, 2).to(torch::kFloat32);                                                 // [B,Hq,c,D]
  const Tensor k = held.k.repeat_interleave(Hq / held.k.size(1), 1).to(torch::kFloat32);
  const Tensor v = held.v.repeat_interleave(Hq / held.v.size(1), 1).to(torch::kFloat32);
  const float lowest = -std::numeric_limits<float>::infinity();
  std::vector<Tensor> maxima, sums, partials;
  for (int64_t from = 0; from < T; from += kPage) {  // one split per page
    const int64_t n = std::min(kPage, T - from);
    const Tensor seen = allowed.narrow(3, from, n);
    const Tensor scores = at::where(seen, at::matmul(qf, k.narrow(2, from, n).transpose(2, 3)), lowest);
    const Tensor m = scores.amax(-1, true);
    const Tensor p = at::where(seen, at::exp(scores - at::where(at::isinf(m), at::zeros_like(m), m)), 0.0);
    maxima.push_back(m);
    sums.push_back(p.sum(-1, true));
    partials.push_back(at::matmul(p.to(dtype).to(torch::kFloat32), v.narrow(2, from, n)));
  }
  // The combine: every split rescaled to the row's maximum; a split that saw no key weighs 0.
  const Tensor m = at::stack(maxima).amax(0);
  const Tensor safe_m = at::where(at::isinf(m), at::zeros_like(m), m);
  Tensor sum = at::zeros_like(m), acc = at::zeros({B, Hq, c, D}, qf.options());
  for (size_t s = 0; s < maxima.size(); ++s) {
    const Tensor w = at::where(at::isinf(maxima[s]), at::zeros_like(m), at::exp(maxima[s] - safe_m));
    sum = sum + w * sums[s];
    acc = acc + w * partials[s];
  }
  const Tensor out = at::where(sum > 0, acc / sum.clamp_min(std::numeric_limits<float>::min()), 0.0);
  return out.to(dtype).transpose(1, 2).reshape({B, c, Hq * D});
}

}  // namespace

KvCacheOps paged_kv_cache_ops() {
  return {make_paged, update_paged, split_k_attention, paged_contents, rollback_paged};
}

}  // namespace gemma4::impl

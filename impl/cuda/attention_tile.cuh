#pragma once
// Warp-level building blocks of the attention kernels (sm_80+ mma.sync, used on sm_90).
//
// Every GEMM in attention, forward or backward, is one of two shapes for a warp that owns 16 rows:
//   warp_scores:     C[16 x 8NT]  = A[16 x DS] . B[8NT x DS]^T   (S = Q K^T, dP = dO V^T, S^T = K Q^T, ...)
//   warp_accumulate: O[16 x DS] += P[16 x 8NT] . B[8NT x DS]      (O += P V, dQ += dS K, dV += P^T dO, ...)
// A, B and the tiles live in shared memory, row-major, rows padded by kPad elements. The fragment
// layouts are those of the PTX ISA for mma.m16n8k16 and ldmatrix: lane t holds rows t/4 and t/4+8,
// columns 2*(t%4) and 2*(t%4)+1 of each 8-column tile, which lets a C fragment of scores be used as
// the A fragment of the next GEMM without going through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gemma4::impl::cuda::tile {

// Shared-memory rows are padded by 16 bytes so that the 8 row addresses of one ldmatrix land in 8
// different bank groups (an unpadded 512- or 1024-byte row stride would put them all in one).
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;

__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: nothing is read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rows [0, R) of a row-major [*, D] matrix with `stride` elements between rows into shared memory;
// rows at or past `valid_rows` are zero-filled (so masked-out keys multiply as 0, never as garbage).
template <int R, int D, int THREADS, typename T>
__device__ inline void load_tile(T* smem, const T* gmem, int64_t stride, int valid_rows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < R * kChunks; c += THREADS) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < valid_rows;
    cp_async16(smem + r * (D + kPad) + col, gmem + (valid ? r * stride + col : 0), valid);
  }
}

// The streamed tiles of a loop of n steps: with two stages, step i + 1's tile is fetched into the
// other stage while step i computes; with one, only after step i is done with the stage. The caller
// has issued and committed step 0's loads; load(i, stage) issues step i's into `stage`.
template <int STAGES, typename Load>
__device__ inline int begin_step(int i, int n, Load&& load) {
  const int stage = STAGES == 2 ? i % 2 : 0;
  if (STAGES == 2 && i + 1 < n) {
    load(i + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
  return stage;
}
template <int STAGES, typename Load>
__device__ inline void end_step(int i, int n, Load&& load) {
  __syncthreads();  // every warp is done with this stage before it is refilled
  if (STAGES == 1 && i + 1 < n) {
    load(i + 1, 0);
    cp_async_commit();
  }
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// c += a . b for one m16n8k16 tile, fp32 accumulation.
template <typename T>
__device__ inline void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ inline void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to T and packed into one 32-bit register (low element first).
template <typename T>
__device__ inline uint32_t pack2(float lo, float hi);
template <>
__device__ inline uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ inline uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// acc = A[16 x DS] . B[8NT x DS]^T. `a` points at the warp's first row and first column of its
// slice, `b` at the first row of the column tile and the same column; both have PITCH elements per row.
template <int NT, int DS, int PITCH, typename T>
__device__ inline void warp_scores(float (&acc)[NT][4], const T* a, const T* b, int lane) {
  static_assert(NT % 2 == 0 && DS % 16 == 0, "tiles come in pairs of 8 columns and steps of 16");
  const int m = lane / 8, r = lane % 8;  // ldmatrix: lanes 8m..8m+7 address the rows of matrix m
#pragma unroll
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
  for (int kd = 0; kd < DS; kd += 16) {
    uint32_t af[4];  // matrices: rows 0-7 / 8-15 (m & 1) x k 0-7 / 8-15 (m >> 1)
    ldmatrix_x4(af, a + ((m & 1) * 8 + r) * PITCH + kd + (m >> 1) * 8);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];  // matrices: columns of tile n / n+1 (m >> 1) x k 0-7 / 8-15 (m & 1)
      ldmatrix_x4(bf, b + (n * 8 + (m >> 1) * 8 + r) * PITCH + kd + (m & 1) * 8);
      mma<T>(acc[n], af, bf[0], bf[1]);
      mma<T>(acc[n + 1], af, bf[2], bf[3]);
    }
  }
}

// out += P[16 x 8NT] . B[8NT x DS], with P given as warp_scores' fp32 C fragments (rounded to T
// here, as FlashAttention does) and B's rows at `b` (first column of the slice).
template <int NT, int DS, int PITCH, typename T>
__device__ inline void warp_accumulate(float (&out)[DS / 8][4], const float (&p)[NT][4], const T* b, int lane) {
  const int m = lane / 8, r = lane % 8;
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    // The C fragments of column tiles 2kk and 2kk+1 are exactly the A fragment of k-step kk.
    const uint32_t af[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                            pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                            pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < DS / 8; n += 2) {
      uint32_t bf[4];  // transposed: matrices are k 0-7 / 8-15 (m & 1) x columns of tile n / n+1 (m >> 1)
      ldmatrix_x4_trans(bf, b + (kk * 16 + (m & 1) * 8 + r) * PITCH + n * 8 + (m >> 1) * 8);
      mma<T>(out[n], af, bf[0], bf[1]);
      mma<T>(out[n + 1], af, bf[2], bf[3]);
    }
  }
}

__device__ inline void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads));
}

// When NS warps share 16 rows, each contracted its own slice of D: sum their partial scores through
// shared memory, in split order 0..NS-1 for every warp, so all NS copies are bitwise identical.
// `scratch` holds NS * NT * 128 floats for this row group; barrier `id` is private to it.
template <int NT, int NS>
__device__ inline void reduce_splits(float (&acc)[NT][4], float* scratch, int split, int lane, int id) {
  if constexpr (NS > 1) {
    float* mine = scratch + split * NT * 128;
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[(n * 4 + e) * 32 + lane] = acc[n][e];
    named_barrier(id, NS * 32);
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float sum = 0.f;
#pragma unroll
        for (int s = 0; s < NS; ++s) sum += scratch[s * NT * 128 + (n * 4 + e) * 32 + lane];
        acc[n][e] = sum;
      }
    named_barrier(id, NS * 32);  // the scratch may be rewritten only after every warp has read it
  }
}

// Writes a warp's 16 x DS fp32 fragment, rounded to T, to rows row0.. (those < rows) of a row-major
// matrix with `stride` elements per row, scaled per row by scale[0] (rows t/4) and scale[1] (t/4+8).
template <int DS, typename T>
__device__ inline void store_rows(T* out, int64_t stride, int row0, int rows, const float (&acc)[DS / 8][4],
                                  const float (&scale)[2], int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + lane / 4 + half * 8;
    if (row >= rows) continue;
#pragma unroll
    for (int n = 0; n < DS / 8; ++n) {
      const uint32_t v = pack2<T>(acc[n][2 * half] * scale[half], acc[n][2 * half + 1] * scale[half]);
      *reinterpret_cast<uint32_t*>(out + row * stride + n * 8 + 2 * (lane % 4)) = v;
    }
  }
}

}  // namespace gemma4::impl::cuda::tile

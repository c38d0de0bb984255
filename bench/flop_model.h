#pragma once
// The work one benchmark iteration does, from which the TFLOP/s and GB/s counters are computed
// (measured time / this model; bench/README.md states the same model).
//
// Attention (causal; B batch, Hq query heads, D head dim):
//   pairs(S, w)   = the query-key pairs inside the mask = sum over i < S of min(i + 1, w)
//                   (w = S for a full causal layer: S (S + 1) / 2)
//   forward FLOP  = 4 * B * Hq * D * pairs       (q k^T and p v: 2 FLOP per multiply-add each)
//   backward FLOP = 2.5 * forward                (dV, dP, dS -> dQ, dK: five matmuls to two)
//   fwdbwd FLOP   = 3.5 * forward
//   Head dim is the layer's (256 sliding, 512 global in the released models); the softmax and the
//   masked-out tiles are not counted, so a kernel that computes a dense S x S product and masks
//   it is not credited for the wasted work. causal_attention_sliding_shape (the sliding kernel's
//   peer) is a full causal layer (w = S) at the sliding layer's Hq and D.
//
// Memory-bound ops (qk_norm_rope, geglu, rms_norm): the bytes an ideal fused kernel moves, at the
// tensors' element size. With R = the differentiable inputs (raw q, k, v and the norm weights;
// gate and up; x and the weight), T = the non-differentiable inputs (the RoPE cos and sin tables
// [S, D]) and W = the outputs (q, k, v; out; y):
//   forward bytes = R + T + W                    (qk_norm_rope: read q, k, v, cos, sin; write q, k, v)
//   backward      = W (read upstream grads) + R + T (re-read inputs) + R (write input grads)
//   fwdbwd bytes  = 3 R + 2 T + 2 W
//   On K=V global layers v is not an input (v comes from k) but is an output.
//
// MoE experts (LayerOps::moe_experts; T tokens, each routed to its top K of E experts; H hidden,
// I the expert's intermediate size): only the routed tokens' expert matmuls are counted, the
// gate_up [2I, H] and down [H, I] products of each (token, expert) pair:
//   forward FLOP  = 2 * T * K * 3 * H * I        (gate and up: 2 H I each, down: H I; x 2 FLOP)
//   fwdbwd FLOP   = 3 * forward                  (each matmul's backward: two products of its size)
//   The routing, the GeGLU and the weighted sum are not counted, nor the experts no token chose.
//
// Decoder layers (layer_sliding, layer_global, layer_kv_shared, layer_moe: one layer; layer_group:
// several consecutive ones; tokens = B * S):
//   forward FLOP  = sum over layers of attention forward FLOP + 2 * matmul params * tokens
//                   + MoE experts forward FLOP (MoE layers)
//   fwdbwd FLOP   = 3.5 * attention forward FLOP + 3 * (2 * matmul params * tokens + MoE experts)
//   matmul params = every 2-D weight of the layer (q, k, v, o projections; gate, up, down; the
//   router and the PLE gate and projection where present); a KV-shared layer has no k and v.
//   Norms, RoPE, the softmax of the router and element-wise work are not counted.
//
// Ceilings: d2d copy bytes = 2 * buffer (read + write); GEMM FLOP = 2 * n^3.
#include <cstdint>
#include <vector>

#include "reference/config.h"

namespace gemma4::bench {

// Per-iteration work; a field left 0 gets no counter.
struct Work {
  double flop = 0;
  double bytes = 0;
};

// Query-key pairs of a causal mask over `seq_len` tokens; window 0: no window (full causal).
double causal_pairs(int64_t seq_len, int64_t window);

Work attention_work(int64_t batch, int64_t q_heads, int64_t head_dim, int64_t seq_len, int64_t window, bool backward);

// Bytes of a memory-bound op from R, T and W (in bytes) as defined above.
Work memory_bound_work(double differentiable_inputs, double tables, double outputs, bool backward);

// The routed experts of `tokens` tokens, top_k each, hidden `hidden`, expert intermediate size
// `intermediate`.
Work moe_experts_work(int64_t tokens, int64_t top_k, int64_t hidden, int64_t intermediate, bool backward);

// Elements of the 2-D weights of layer `layer` (the experts' 3-D tensors are not among them).
int64_t matmul_params(const Config& config, int layer);

// The decoder layers `layers` over batch 1 and `seq_len` tokens.
Work layers_work(const Config& config, const std::vector<int>& layers, int64_t seq_len, bool backward);

}  // namespace gemma4::bench

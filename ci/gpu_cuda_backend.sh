#!/usr/bin/env bash
# On the GPU host: the fused CUDA backend (issue "Fused CUDA backend for Hopper"). Builds against
# the host's CUDA LibTorch (ci/build.sh), then per STAGE (default: all):
#   conform  the whole conformance suite with --backend cuda and cuda-deterministic --device cuda,
#            in bf16 and fp16, and the negative controls of op_sweep and attention-op determinism
#            on CUDA (must fail);
#   bench    bench/gpu_bench.sh for the issue's figures (FIGURES, default all): sliding and global
#            attention against every SDPA backend, q/k norm + RoPE and GeGLU against the copy
#            ceiling, the six-layer group against the reference backend, each with the ceilings;
#   ops      (not in all) the golden and op_sweep checks with one fused op at a time, to bisect;
#   quick    (not in all) one kernel iteration: the suite for both backends in bf16 and fp16
#            ($CONFORM_FILTER, a --filter regex, narrows it), the attention kernels' resource use
#            (cuobjdump), and attention at S = 8192 beside its peers (median of 3).
# Tables, reports and JSON go to $OUT. shared/ must be copied into the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
STAGE=${STAGE:-all}
gpu_build || exit 1
status=0

# conform_both: the suite (ARGS narrow it) for both cuda backends, in bf16 and fp16.
conform_both() {
  for backend in cuda cuda-deterministic; do
    for dtype in bf16 f16; do conform_run "$backend-$dtype" 0 --backend $backend --dtype $dtype "$@"; done
  done
}

if [ "$STAGE" = all ] || [ "$STAGE" = conform ]; then
  conform_both
  conform_run faulty-window-off-by-one-sweep 1 --backend faulty-window-off-by-one --dtype bf16 --filter '^op_sweep/attention'
  conform_run faulty-nondeterministic-op 1 --backend faulty-nondeterministic-attention --dtype f32 --filter '^determinism/attention_op'
  grep -h "FAIL\|fail " "$OUT"/cuda-*.txt | head -20
fi

if [ "$STAGE" = ops ]; then  # one fused op at a time (GEMMA4_CUDA_OPS), on the golden and op_sweep checks
  for op in attention qk_norm_rope geglu; do
    for dtype in bf16 f16; do
      GEMMA4_CUDA_OPS=$op conform_run "only-$op-$dtype" 0 --backend cuda --dtype $dtype --filter '^(golden|op_sweep)/'
    done
  done
fi

if [ "$STAGE" = quick ]; then
  RUN_TIMEOUT=${RUN_TIMEOUT:-240}
  conform_both ${CONFORM_FILTER:+--filter "$CONFORM_FILTER"}
  grep -h "FAIL\|fail " "$OUT"/cuda-*.txt | head -20
  /usr/local/cuda/bin/cuobjdump -res-usage build/impl/cuda/libgemma4_cuda_kernels.a 2>/dev/null |
    grep -A1 "hopper_\(forward\|backward\)_kernel" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]*" | sort | uniq -c
  bench_run quick-attention \
    '^(ceiling/|(sliding_attention|global_attention|causal_attention_sliding_shape)/(cuda|cuda-deterministic|sdpa-cudnn|sdpa-efficient)/cuda/31b/8192/bf16/)' \
    --benchmark_min_time=0.2s --benchmark_repetitions=3
  python3 bench/summarize.py "$OUT/quick-attention.json"
fi

if [ "$STAGE" = all ] || [ "$STAGE" = bench ]; then
  # shellcheck disable=SC2086
  bench/gpu_bench.sh ${FIGURES:-sliding global memory_bound layer_group} || status=1
fi
exit $status

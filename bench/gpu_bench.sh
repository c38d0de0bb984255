#!/usr/bin/env bash
# On the GPU host: builds gemma4-bench against the host's CUDA LibTorch (ci/build.sh) and measures
# the issue's figures, one gemma4-bench run per figure (each well under the device tool's 10
# minutes a command), then prints their medians (bench/summarize.py). Reports (JSON) and console
# logs go to $OUT. shared/ must be copied into the checkout (ci/gpu_env.sh). The regression check
# against the baselines is ci/gpu.sh.
#
#   bench/gpu_bench.sh [FIGURE...]     FIGURE: build sliding global memory_bound layer_group
#                                      (default: all of them, in that order)
# Each run reports the median of 5 repetitions (--benchmark_repetitions=5: enough for a median, and
# half the time of gemma4-bench's default 10, which the sliding figure needs since it holds twice the
# benchmarks, the dense-causal peers too). Extra gemma4-bench flags can be passed in $BENCH_FLAGS;
# they come last and win, e.g. BENCH_FLAGS=--benchmark_repetitions=9.
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh

# The filter of each figure (google-benchmark regexes over op/backend/device/geometry/S/dtype/direction);
# each run measures the ceilings too, so every report holds its own 100% lines. The sliding figure
# holds its peer: dense causal attention at the sliding layer's shape (causal_attention_sliding_shape;
# sdpa-cudnn's rate there is what the cuda sliding kernel is held against, summarize.py's ratio).
# The backends: cuda, cuda-deterministic, reference and the SDPA kernels, not the conformance variants (variant-*: nine
# more backends, most running the reference's eager attention; they would more than double each run,
# and their speed is no figure's question); $BENCH_BACKENDS (a regex alternation) replaces the list,
# e.g. to add a plugin's name.
B="(${BENCH_BACKENDS:-cuda|cuda-deterministic|reference|sdpa-[a-z]+})"
declare -A FILTER=(
  [sliding]="(sliding_attention|causal_attention_sliding_shape)/$B/cuda/31b/(4096|8192|16384|32768)/bf16/"
  [global]="global_attention/$B/cuda/31b/(4096|8192|16384)/bf16/"
  [memory_bound]="(qk_norm_rope_[a-z]+|geglu)/$B/cuda/31b/[0-9]+/bf16/"
  [layer_group]="layer_group/$B/cuda/31b/[0-9]+/bf16/"
)
figures=("$@")
[ ${#figures[@]} -eq 0 ] && figures=(build sliding global memory_bound layer_group)

status=0
reports=()
for figure in "${figures[@]}"; do
  if [ "$figure" = build ]; then
    gpu_build || exit 1
    continue
  fi
  [ -n "${FILTER[$figure]:-}" ] || { echo "unknown figure '$figure'"; exit 2; }
  # shellcheck disable=SC2086
  bench_run "bench_$figure" "^(ceiling/|${FILTER[$figure]})" --benchmark_min_time=0.2s --benchmark_repetitions=5 \
    ${BENCH_FLAGS:-}
  [ $run_code -eq 0 ] || status=1
  [ -f "$OUT/bench_$figure.json" ] && reports+=("$OUT/bench_$figure.json")
done
[ ${#reports[@]} -gt 0 ] && python3 bench/summarize.py "${reports[@]}"
exit $status

#!/usr/bin/env bash
# On the GPU host: builds gemma4-bench against the host's CUDA LibTorch (ci/build.sh) and measures
# the issue's figures, one gemma4-bench run per figure (each well under the device tool's 10
# minutes a command), then prints their medians (bench/summarize.py). Reports (JSON) and console
# logs go to $OUT. shared/ must be copied into the checkout (ci/gpu_env.sh). The regression check
# against the baselines is ci/gpu.sh.
#
#   bench/gpu_bench.sh [FIGURE...]     FIGURE: build sliding global memory_bound layer_group
#                                      (default: all of them, in that order)
# Extra gemma4-bench flags can be passed in $BENCH_FLAGS (e.g. --benchmark_repetitions=5).
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh

# The filter of each figure (google-benchmark regexes over op/backend/device/geometry/S/dtype/direction);
# each run measures the ceilings too, so every report holds its own 100% lines.
declare -A FILTER=(
  [sliding]='sliding_attention/[^/]+/cuda/31b/(4096|8192|16384|32768)/bf16/'
  [global]='global_attention/[^/]+/cuda/31b/(4096|8192|16384)/bf16/'
  [memory_bound]='(qk_norm_rope_[a-z]+|geglu)/[^/]+/cuda/31b/[0-9]+/bf16/'
  [layer_group]='layer_group/[^/]+/cuda/31b/[0-9]+/bf16/'
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
  bench_run "bench_$figure" "^(ceiling/|${FILTER[$figure]})" --benchmark_min_time=0.2s ${BENCH_FLAGS:-}
  [ $run_code -eq 0 ] || status=1
  [ -f "$OUT/bench_$figure.json" ] && reports+=("$OUT/bench_$figure.json")
done
[ ${#reports[@]} -gt 0 ] && python3 bench/summarize.py "${reports[@]}"
exit $status

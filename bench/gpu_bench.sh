#!/usr/bin/env bash
# On the GPU host: builds gemma4-bench against the host's CUDA LibTorch (ci/build.sh) and measures
# the issue's figures, one gemma4-bench run per figure (each well under the device tool's 10
# minutes a command), then prints their medians (bench/summarize.py). Reports (JSON) and console
# logs go to $OUT. shared/ must be copied into the checkout (ci/gpu_env.sh).
#
#   bench/gpu_bench.sh [FIGURE...]     FIGURE: build sliding global memory_bound layer_group
#                                      (default: all of them, in that order)
# Extra gemma4-bench flags can be passed in $BENCH_FLAGS (e.g. --benchmark_repetitions=5).
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
BENCH=build/bin/gemma4-bench

# The filter of each figure (google-benchmark regexes over op/backend/device/geometry/S/dtype/direction);
# each run measures the ceilings too, so every report holds its own 100% lines.
declare -A FILTER=(
  [sliding]='sliding_attention/[^/]+/cuda/31b/(4096|8192|16384|32768)/'
  [global]='global_attention/[^/]+/cuda/31b/(4096|8192|16384)/'
  [memory_bound]='(qk_norm_rope_[a-z]+|geglu)/[^/]+/cuda/31b/'
  [layer_group]='layer_group/[^/]+/cuda/31b/'
)
figures=("$@")
[ ${#figures[@]} -eq 0 ] && figures=(build sliding global memory_bound layer_group)

status=0
reports=()
for figure in "${figures[@]}"; do
  if [ "$figure" = build ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    ci/build.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    continue
  fi
  [ -n "${FILTER[$figure]:-}" ] || { echo "unknown figure '$figure'"; exit 2; }
  start=$(date +%s)
  # shellcheck disable=SC2086
  $BENCH --benchmark_filter="^(ceiling/|${FILTER[$figure]})" --benchmark_min_time=0.2s ${BENCH_FLAGS:-} \
    --benchmark_out="$OUT/bench_$figure.json" --benchmark_out_format=json > "$OUT/bench_$figure.txt" 2>&1
  code=$?
  [ $code -eq 0 ] || status=1
  echo "$figure: exit $code, $(( $(date +%s) - start )) s"
  [ -f "$OUT/bench_$figure.json" ] && reports+=("$OUT/bench_$figure.json")
done
[ ${#reports[@]} -gt 0 ] && python3 bench/summarize.py "${reports[@]}"
exit $status

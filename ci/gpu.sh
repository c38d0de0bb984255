#!/usr/bin/env bash
# The GPU CI entry point (issue "Benchmarks and performance-regression tracking across GPUs"): on
# the GPU host, from the repository root, with shared/ copied into the checkout. Logs, reports and
# bench-compare.html go to $OUT. The run keeps to $GPU_SH_BUDGET_S seconds from its start (default
# 520, under the device tool's 10 minutes a command): the benchmarks get what the build leaves, the
# conformance runs what the benchmarks leave, and a run cut short is reported with exit 124.
#
#   ci/gpu.sh                     1. build against the host's CUDA LibTorch (ci/build.sh);
#                                 2. the baseline set (bench/baseline_filter.txt, 9 repetitions)
#                                    compared with bench/baselines/<gpu>.json by gemma4-conform
#                                    bench-compare ($OUT/bench-compare.{txt,html});
#                                 3. gemma4-conform conform --device cuda in bf16 for the reference
#                                    backend and, where it is built, the cuda backend;
#                                 then a summary, last, one line per step.
#   ci/gpu.sh --refresh-baseline  build and the same benchmarks, written to $OUT/<gpu>.json and, when
#                                 the checkout is writable, bench/baselines/<gpu>.json (commit it).
#   ci/gpu.sh --help
#
# <gpu>: nvidia-smi's GPU name lowercased, spaces as '-' (nvidia-h200, nvidia-h100-80gb-hbm3).
# $BENCH_THRESHOLD: bench-compare's --threshold in percent (default: its own, 5).
# Exit 0 when every step passed and no benchmark regressed; 1 otherwise; 2 on a bad argument.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
refresh=false
case "${1:-}" in
  -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
  --refresh-baseline) refresh=true ;;
  "") ;;
  *) echo "usage: ci/gpu.sh [--refresh-baseline | --help]" >&2; exit 2 ;;
esac
source ci/gpu_env.sh
deadline=$((SECONDS + ${GPU_SH_BUDGET_S:-520}))
BENCH_FLAGS=(--benchmark_repetitions=9 --benchmark_min_time=0.05s)  # bench-compare tests >= 9 repetitions
filter="^($(grep -v '^[[:space:]]*\(#\|$\)' bench/baseline_filter.txt | paste -sd'|'))"
CLI=build/bin/gemma4-conform
status=0
declare -A summary  # one line per step

t0=$SECONDS
gpu_build
code=$?
summary[build]="build: exit $code, $((SECONDS - t0)) s ($OUT/build.log)"
[ $code -eq 0 ] || { echo "${summary[build]}"; exit 1; }
key=$(gpu_key)
baseline=bench/baselines/$key.json

# The benchmarks first, on a GPU that has run nothing else: as when the baseline was recorded.
limit=$((deadline - SECONDS - 15))
RUN_TIMEOUT=$((limit > 1 ? limit : 1)) bench_run bench "$filter" "${BENCH_FLAGS[@]}"
bench_code=$run_code
[ $bench_code -eq 0 ] || status=1
[ $bench_code -eq 124 ] && bench_code="124 (ran past the time budget)"
counts=$(python3 bench/summarize.py --counts "$OUT/bench.json" 2>/dev/null) || counts="no readable report"
summary[bench]="bench: exit $bench_code, $counts ($OUT/bench.json; medians in $OUT/bench_summary.txt)"
python3 bench/summarize.py "$OUT/bench.json" > "$OUT/bench_summary.txt" 2>&1

if $refresh; then
  if [ $status -eq 0 ]; then
    cp "$OUT/bench.json" "$OUT/$key.json"
    summary[baseline]="baseline: wrote $OUT/$key.json"
    if [ -w bench/baselines ] && cp "$OUT/bench.json" "$baseline"; then summary[baseline]+=" and $baseline"; fi
    summary[baseline]+="; commit it as $baseline"
  else
    summary[baseline]="baseline: not written (the benchmark run failed)"
  fi
  echo "== summary ($key, $SECONDS s)"
  printf '%s\n' "${summary[build]}" "${summary[bench]}" "${summary[baseline]}"
  exit $status
fi

if [ ! -f "$baseline" ]; then
  summary[compare]="compare: skipped: no $baseline; create it with 'ci/gpu.sh --refresh-baseline' on this GPU, then"
  summary[compare]+=" commit the $OUT/$key.json it writes as $baseline (bench/baselines/README.md)"
else
  $CLI bench-compare "$baseline" "$OUT/bench.json" --html "$OUT/bench-compare.html" \
    ${BENCH_THRESHOLD:+--threshold "$BENCH_THRESHOLD"} > "$OUT/bench-compare.txt" 2>&1
  code=$?
  [ $code -eq 0 ] || status=1
  grep -E 'warning|regression$' "$OUT/bench-compare.txt"  # the warnings and the regressed benchmarks
  # Its last line but one: "bench-compare: 59 benchmarks: 2 regression, 1 faster, 56 same (threshold 5%, ...)".
  verdicts=$(grep '^bench-compare: ' "$OUT/bench-compare.txt" | tail -1)
  if [ -n "$verdicts" ]; then
    regressions=$(grep -oE '[0-9]+ regression' <<< "$verdicts" | grep -oE '^[0-9]+' || echo 0)
  else
    regressions="unknown"
    verdicts=$(tail -1 "$OUT/bench-compare.txt")
  fi
  summary[compare]="compare: exit $code, $regressions regressions against $baseline ($verdicts); $OUT/bench-compare.html"
fi

# The conformance suite, each run with an equal share of the time left.
runs=(reference-bf16)
if grep -q '^cuda ' <<< "$($CLI backends)"; then
  runs+=(cuda-bf16)
else
  summary[cuda-bf16]="conform cuda-bf16: not run (the cuda backend is not built)"
fi
for i in "${!runs[@]}"; do
  name=${runs[$i]}
  share=$(((deadline - SECONDS) / (${#runs[@]} - i)))
  if [ $((deadline - SECONDS)) -lt 30 ]; then
    summary[$name]="conform $name: not run (no time left in the budget)"
    status=1
    continue
  fi
  RUN_TIMEOUT=$share conform_run "$name" 0 --backend "${name%-bf16}" --dtype bf16
  code=$run_code
  [ $code -eq 124 ] && code="124 (cut short at its $share s share of the budget)"
  summary[$name]="conform $name: exit $code: $(tail -1 "$OUT/$name.txt")"
done

echo "== summary ($key, $SECONDS s)"
printf '%s\n' "${summary[build]}" "${summary[reference-bf16]}" "${summary[cuda-bf16]}" "${summary[bench]}" \
  "${summary[compare]}"
exit $status

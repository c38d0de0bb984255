#!/usr/bin/env bash
# The GPU bench stage: the benchmarks and the performance-regression gate against bench/baselines/.
# From any directory; results (each gemma4-bench run's JSON report with every repetition and its
# console, the tables, bench-compare's text and HTML, junit.xml and summary.txt) under --out.
#
#   ci/gpu/bench.sh [--only STEP,...] [--out DIR] [--time-limit S] [--max-files N] [--help]
#   ci/gpu/bench.sh --refresh-baseline [--out DIR]   build and the baseline set, written to
#                         --out/<gpu>.json and, when the checkout is writable, bench/baselines/<gpu>.json
#                         (commit it: bench/baselines/README.md); nothing else unless --only says so
#   (the options: bash ci/gpu/common.sh --help; ci/gpu.sh runs this as its stage "bench", first, on a GPU that has
#   run nothing else, as when the baselines were recorded)
#
# Steps, in this order:
#   build     ci/build.sh against the host's CUDA LibTorch;
#   baseline  the GPU checked idle first (gate.py idle: monitor-idle.txt), then the baseline set
#             (bench/baseline_filter.txt, 9 repetitions, --benchmark_min_time=0.05s) with nvidia-smi
#             watching beside it (monitor-bench/, monitor-bench.txt: clocks, power, throttling, any
#             other process): bench.json, its medians in bench_summary.txt; then its medians appended
#             to the history ($BENCH_HISTORY_FILE, default bench/history/history.jsonl, label
#             $BENCH_LABEL, default baseline; not when BENCH_HISTORY=off or the GPU was not idle and
#             alone) and the file copied to history.jsonl;
#   compare   the gate: gemma4-conform bench-compare bench/baselines/<gpu>.json bench.json (the first
#             pass: bench-compare.{txt,html,json}; $BENCH_THRESHOLD: its --threshold in percent, default
#             its own, 5), then every benchmark it flags re-measured on its own in a fresh process and
#             compared again (confirm-I*; with $BASE_BENCH, the baseline commit's gemma4-bench,
#             interleaved with it), then the verdict (gate.py verdict: gate.txt, gate.json): fails on
#             a regression confirmed, or when another process used the GPU; skipped when there is no
#             baseline for this GPU;
#   figures   the fused-backend issue's figures ($FIGURES, default sliding global memory_bound
#             layer_group), one gemma4-bench run each, each with the ceilings (^ceiling/) so every report
#             holds its own 100% lines, --benchmark_min_time=0.2s, 5 repetitions (bench_<figure>.json),
#             then the medians (figures_summary.txt, bench/summarize.py). The backends: cuda,
#             cuda-deterministic, reference and the SDPA kernels ($BENCH_BACKENDS, a regex alternation,
#             replaces them); $BENCH_FLAGS: more gemma4-bench flags, last, so they win;
#   decode    decode attention (bench/decode_benchmarks.cpp: 31B and E4B, sliding and global layers,
#             batch 1/8/64, cache 4k/32k) for $DECODE_BACKENDS (default cuda|reference|sdpa), with the
#             copy ceiling in the same run (decode.json; $MIN_TIME, default 0.02s, $REPS, default 5),
#             and its table (decode_table.txt: latency, tokens/s, GB/s, fraction of copy).
# Optional step (only with --only):
#   ncu       Nsight Compute on the kernels matching $NCU_KERNEL (a regex, default decode_attention_kernel;
#             e.g. norm_rope_forward_staged, or decode_ for the split and combine kernels) of the
#             benchmarks $NCU_CASES (names, space-separated; default the 31B global decode layer at 32k,
#             batch 1 and 64), $NCU_LAUNCHES (default 1) of them after the first 4: ncu.txt;
#             $NCU_FLAGS: more ncu flags (e.g. "--section SourceCounters" for where the warps stall).
# <gpu>: nvidia-smi's GPU name lowercased, spaces as '-' (nvidia-h200, nvidia-h100-80gb-hbm3).
# Exit 0 when every run passed (no regression) or was skipped, 1 otherwise, 2 on a bad option.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
STEPS_DEFAULT=(build baseline compare figures decode)
STEPS_OPTIONAL=(ncu)
refresh=false
for arg in "$@"; do
  if [ "$arg" = --refresh-baseline ]; then refresh=true; fi
  if [ "$arg" = --only ] || [[ "$arg" == --only=* ]]; then only_given=true; fi
done
# --refresh-baseline: build and the baseline set only, unless --only names steps.
$refresh && [ -z "${only_given:-}" ] && STEPS_DEFAULT=(build baseline)
stage_parse bench "$@"
for arg in "${EXTRA_ARGS[@]}"; do
  [ "$arg" = --refresh-baseline ] || usage_error "unknown option '$arg'"
done
if $refresh && in_list compare "${SELECTED[@]}"; then
  usage_error "--refresh-baseline writes the baseline; it does not compare (drop compare from --only)"
fi
stage_start
CLI=build/bin/gemma4-conform
key=$(gpu_key)
baseline=bench/baselines/$key.json
HISTORY=${BENCH_HISTORY_FILE:-bench/history/history.jsonl}

step build && gpu_build

if step baseline; then
  # Figures measured while another process shares the GPU measure the sharing (issue 55: four
  # benchmarks read 2x the baseline on a host whose GPUs distributed runs had just used): first the
  # GPU must be idle, then nvidia-smi watches it beside the run.
  detail_re=- run gpu-idle 0 "$OUT/monitor-idle.txt" python3 ci/gpu/gate.py idle
  cat "$OUT/monitor-idle.txt"
  filter="^($(grep -v '^[[:space:]]*\(#\|$\)' bench/baseline_filter.txt | paste -sd'|'))"
  gpu_monitor_start "$OUT/monitor-bench"
  bench_run bench "$filter" --benchmark_repetitions=9 --benchmark_min_time=0.05s  # bench-compare tests >= 9 repetitions
  bench_ok=$([ "$run_code" = 0 ] && echo true || echo false)
  gpu_monitor_stop
  detail_re=- run gpu-alone 0 "$OUT/monitor-bench.txt" python3 ci/gpu/gate.py monitor "$OUT/monitor-bench"
  cat "$OUT/monitor-bench.txt"
  counts=$(python3 bench/summarize.py --counts "$OUT/bench.json" 2> /dev/null) || counts="no readable report"
  python3 bench/summarize.py "$OUT/bench.json" > "$OUT/bench_summary.txt" 2>&1
  echo "baseline set: $counts (medians in $OUT/bench_summary.txt)"
  keep_file "$OUT/bench_summary.txt"
  # The history (bench/history/README.md): every baseline run's medians, commit and GPU, one line;
  # BENCH_HISTORY=off for runs of code that is not a commit's (gate_trials.sh's mutants).
  # Not a run that shared the GPU (gpu-idle or gpu-alone failed): its figures measure the sharing.
  alone=$(awk -F'\t' '$2 ~ /^gpu-(idle|alone)$/ && $3 != "pass" {n++} END {print n ? "false" : "true"}' "$OUT/results.tsv")
  if $bench_ok && $alone && [ "${BENCH_HISTORY:-on}" != off ]; then
    run history 0 "$OUT/history.txt" $CLI bench-history append "$OUT/bench.json" --history "$HISTORY" \
      --label "${BENCH_LABEL:-baseline}"
    cp "$HISTORY" "$OUT/history.jsonl" 2> /dev/null && keep_file "$OUT/history.jsonl"
  fi
  if $refresh; then
    if ! $alone; then
      fail_run refresh-baseline "not written: the GPU was not idle and alone during the run (monitor-*.txt)"
    elif $bench_ok; then
      cp "$OUT/bench.json" "$OUT/$key.json"
      message="wrote $OUT/$key.json"
      if [ -w bench/baselines ] && cp "$OUT/bench.json" "$baseline"; then message+=" and $baseline"; fi
      record baseline refresh-baseline pass 0 0 0 "$message; commit it as $baseline"
      echo "[pass] refresh-baseline: $message; commit it as $baseline"
      keep_file "$OUT/$key.json"
    else
      fail_run refresh-baseline "not written: the benchmark run failed"
    fi
  fi
fi

# confirm I FILTER BASE: benchmark FILTER (one, anchored: gate.py flagged) re-measured in a fresh
# process, on its own, 9 repetitions, and compared again with the baseline file BASE; with
# $BASE_BENCH (the baseline commit's gemma4-bench), interleaved with it instead: three rounds of
# three repetitions a side, base first, each side's rounds pooled (gate.py merge) and compared.
confirm() {
  local i=$1 filter=$2 base=$3 new r
  local -a flags=(--benchmark_min_time=0.05s)
  gpu_monitor_start "$OUT/monitor-confirm-$i"
  if [ -n "${BASE_BENCH:-}" ]; then
    interleave "confirm-$i-base" "confirm-$i" "$BASE_BENCH" "$filter" 3 3 "${flags[@]}"
    base=$OUT/confirm-$i-base.json
  else
    bench_run "confirm-$i" "$filter" --benchmark_repetitions=9 "${flags[@]}"
  fi
  new=$OUT/confirm-$i.json
  gpu_monitor_stop
  python3 ci/gpu/gate.py monitor "$OUT/monitor-confirm-$i" > "$OUT/monitor-confirm-$i.txt"
  detail_re='^bench-compare: ' run "confirm-$i-compare" '*' "$OUT/confirm-$i-compare.txt" $CLI bench-compare \
    "$base" "$new" --json "$OUT/confirm-$i-compare.json" ${BENCH_THRESHOLD:+--threshold "$BENCH_THRESHOLD"}
}

if step compare; then
  if [ ! -f "$OUT/bench.json" ]; then
    fail_run compare "no $OUT/bench.json to compare (the baseline step did not run)"
  elif [ ! -f "$baseline" ]; then
    skip_run compare "no $baseline; create it with 'ci/gpu/bench.sh --refresh-baseline' on this GPU, then commit the $key.json it writes as $baseline (bench/baselines/README.md)"
  else
    # The first pass: every benchmark against the baseline file (not judged here: gate is).
    detail_re='^bench-compare: ' run compare '*' "$OUT/bench-compare.txt" \
      $CLI bench-compare "$baseline" "$OUT/bench.json" --html "$OUT/bench-compare.html" \
      --json "$OUT/bench-compare.json" ${BENCH_THRESHOLD:+--threshold "$BENCH_THRESHOLD"}
    grep -E 'warning|regression$' "$OUT/bench-compare.txt"  # the warnings and the regressed benchmarks
    keep_file "$OUT/bench-compare.txt"
    keep_file "$OUT/bench-compare.html"
    # Then each flagged benchmark again, on its own; the gate reports only what is flagged twice.
    mapfile -t flagged < <(python3 ci/gpu/gate.py flagged "$OUT/bench-compare.json" 2> /dev/null)
    for i in "${!flagged[@]}"; do confirm $((i + 1)) "${flagged[$i]}" "$baseline"; done
    detail_re='^gate: ' run gate 0 "$OUT/gate.log" python3 ci/gpu/gate.py verdict "$OUT"
    cat "$OUT/gate.txt" 2> /dev/null
    keep_file "$OUT/gate.txt"
  fi
fi

# The filter of each figure (google-benchmark regexes over op/backend/device/geometry/S/dtype/direction);
# each run measures the ceilings too. The sliding figure holds its peer: dense causal attention at the
# sliding layer's shape (causal_attention_sliding_shape; sdpa-cudnn's rate there is what the cuda
# sliding kernel is held against, summarize.py's ratio). Not the conformance variants (variant-*: nine
# more backends, most running the reference's eager attention; they would more than double each run,
# and their speed is no figure's question).
if step figures; then
  B="(${BENCH_BACKENDS:-cuda|cuda-deterministic|reference|sdpa-[a-z]+})"
  declare -A FILTER=(
    [sliding]="(sliding_attention|causal_attention_sliding_shape)/$B/cuda/31b/(4096|8192|16384|32768)/bf16/"
    [global]="global_attention/$B/cuda/31b/(4096|8192|16384)/bf16/"
    [memory_bound]="(qk_norm_rope_[a-z]+|geglu)/$B/cuda/31b/[0-9]+/bf16/"
    [layer_group]="layer_group/$B/cuda/31b/[0-9]+/bf16/"
  )
  reports=()
  for figure in ${FIGURES:-sliding global memory_bound layer_group}; do
    if [ -z "${FILTER[$figure]:-}" ]; then
      fail_run "bench_$figure" "unknown figure '$figure' (FIGURES: sliding global memory_bound layer_group)"
      continue
    fi
    # The median of 5 repetitions: enough for a median, and half the time of gemma4-bench's default 10,
    # which the sliding figure needs since it holds twice the benchmarks, the dense-causal peers too.
    # shellcheck disable=SC2086
    bench_run "bench_$figure" "^(ceiling/|${FILTER[$figure]})" --benchmark_min_time=0.2s --benchmark_repetitions=5 \
      ${BENCH_FLAGS:-}
    [ -f "$OUT/bench_$figure.json" ] && reports+=("$OUT/bench_$figure.json")
  done
  if [ ${#reports[@]} -gt 0 ]; then
    python3 bench/summarize.py "${reports[@]}" 2>&1 | tee "$OUT/figures_summary.txt"
    keep_file "$OUT/figures_summary.txt"
  fi
fi

if step decode; then
  if ! grep -q register_decode_benchmarks bench/main.cpp; then
    fail_run decode "bench/main.cpp does not call register_decode_benchmarks: no decode benchmarks to run"
  else
    B="(${DECODE_BACKENDS:-cuda|reference|sdpa})"
    bench_run decode "^(ceiling/d2d_copy/|decode_attention_[a-z]+/$B/cuda/(31b|e4b)/[0-9]+/bf16/)" \
      --benchmark_min_time="${MIN_TIME:-0.02s}" --benchmark_repetitions="${REPS:-5}"
    # The decode table: one line per benchmark (median of the repetitions), or why it was skipped.
    [ -f "$OUT/decode.json" ] && python3 - "$OUT/decode.json" << 'EOF' | tee "$OUT/decode_table.txt"
import json, sys
report = json.load(open(sys.argv[1]))
medians, errors, order = {}, {}, []
for b in report["benchmarks"]:
    name = b["run_name"].removesuffix("/manual_time")
    if name not in order:
        order.append(name)
    if b.get("error_occurred"):
        errors.setdefault(name, b.get("error_message", ""))
    elif b.get("aggregate_name") == "median" or b.get("repetitions", 1) == 1:
        medians[name] = b
ctx = report["context"]
copy = medians.get("ceiling/d2d_copy/cuda/1GiB", {}).get("GB/s")
print(f"{ctx.get('gpu')} (driver {ctx.get('nvidia_driver')}), torch {ctx.get('torch')}, git {ctx.get('git_sha')}; "
      f"copy ceiling {copy:.0f} GB/s (read + write, same run)" if copy else "no copy ceiling in this run")
print(f"{'benchmark':62s} {'us/step':>9s} {'tokens/s':>11s} {'MB/step':>9s} {'GB/s':>7s} {'of copy':>7s}  label")
for name in order:
    if name.startswith("ceiling/"):
        continue
    if name in medians:
        b = medians[name]
        us = b["real_time"] * {"ms": 1e3, "us": 1, "ns": 1e-3, "s": 1e6}[b["time_unit"]]
        frac = f"{b['GB/s'] / copy:7.1%}" if copy else "      -"
        print(f"{name:62s} {us:9.1f} {b['tokens/s']:11.4g} {b['bytes_per_step'] / 1e6:9.1f} {b['GB/s']:7.0f} {frac}"
              f"  {b.get('label', '')}")
    else:
        print(f"{name:62s} skipped: {errors.get(name, '?')}")
EOF
    keep_file "$OUT/decode_table.txt"
  fi
fi

if step ncu; then
  : > "$OUT/ncu.txt"
  i=0
  for c in ${NCU_CASES:-decode_attention_global/cuda/cuda/31b/32768/bf16/b1 decode_attention_global/cuda/cuda/31b/32768/bf16/b64}; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # NCU_FLAGS: words
    run "ncu-$i" 0 "$OUT/ncu-$i.txt" /usr/local/cuda/bin/ncu -k "regex:${NCU_KERNEL:-decode_attention_kernel}" --launch-skip 4 \
      --launch-count "${NCU_LAUNCHES:-1}" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats ${NCU_FLAGS:-} \
      build/bin/gemma4-bench --benchmark_filter="^$c(/manual_time)?\$" --benchmark_min_time=5x --benchmark_repetitions=1
    { echo "== $c"; cat "$OUT/ncu-$i.txt"; } >> "$OUT/ncu.txt"
  done
  grep -E "^== |DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Stall|Issued Warp|No Eligible" \
    "$OUT/ncu.txt" | head -60
  keep_file "$OUT/ncu.txt"
fi

stage_finish

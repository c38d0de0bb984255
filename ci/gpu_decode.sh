#!/usr/bin/env bash
# On the GPU host (issue 16, items 3 and 5): the cuda backend's KV cache and decode kernel. From the
# repository root; per STAGE (comma-separated, default build,test,conform,bench):
#   build  ci/build.sh against the host's CUDA LibTorch (ci/gpu_env.sh gpu_build; the nvidia-cutlass
#          wheel carried in .whl/);
#   test   build/bin/test_cuda_kv_cache: the cuda KvCacheOps against the reference's in bf16 and
#          fp16, every step's errors printed (candidate and same-dtype reference against fp32),
#          the window-off-by-one negative control and the bad-input errors;
#   conform (in the default) the conformance suite's decode category on CUDA: cuda and
#          cuda-deterministic in bf16 and fp16 and variant-paged-kv-cache must pass, two faulty
#          decoding backends must fail;
#   bench  gemma4-bench's decode attention (bench/decode_benchmarks.cpp: 31B and E4B, sliding and
#          global layers, batch 1/8/64, cache 4k/32k, c = 1) for $BENCH_BACKENDS (default
#          cuda|reference|sdpa), with the copy ceiling in the same run; the medians as a table.
#   ncu    (not in the default) Nsight Compute on the decode kernel of the benchmarks $NCU_CASES
#          (names, space-separated; default the 31B global layer at 32k, batch 1 and 64): ncu.txt.
# $OUT gets at most 8 files: gpu.txt, build.log, test.txt, decode.json (every repetition),
# decode.txt (the console), decode_table.txt (latency, tokens/s, GB/s, fraction of copy), ncu.txt
# and logs.tar.gz (anything else). $MIN_TIME and $REPS tune the benchmark run (default 0.02s, 5).
# Exit 1 when a stage failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu_env.sh
STAGE=${STAGE:-build,test,conform,bench}
status=0

# A failure elsewhere in the tree need not stop this script: then only its two targets are built.
if stage build && ! gpu_build; then
  echo "the full build failed (build.log); building test_cuda_kv_cache and gemma4-bench only"
  cmake --build build -j "$(nproc)" --target test_cuda_kv_cache gemma4-bench > "$OUT/build_targets.log" 2>&1 ||
    { tail -30 "$OUT/build_targets.log"; exit 1; }
fi

if stage test; then
  t0=$SECONDS
  build/bin/test_cuda_kv_cache > "$OUT/test.txt" 2>&1
  code=$?
  [ $code -eq 0 ] || status=1
  echo "test_cuda_kv_cache: exit $code, $((SECONDS - t0)) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/test.txt" | tr '\n' ' ')"
  grep -E "^\[  FAILED|OUT$|Failure" "$OUT/test.txt" | head -20
fi

if stage conform; then  # the decode category on CUDA: both cuda backends pass, the paged variant passes, bugs fail
  for backend in cuda cuda-deterministic; do
    for dtype in bf16 f16; do conform_run "decode-$backend-$dtype" 0 --backend $backend --dtype $dtype --filter '^decode/'; done
  done
  conform_run decode-variant-paged-kv-cache-bf16 0 --backend variant-paged-kv-cache --dtype bf16 --filter '^decode/'
  for bug in sliding-window-plus-one kv-shared-own-step; do
    conform_run "decode-faulty-$bug-bf16" 1 --backend "faulty-decode-$bug" --dtype bf16 --filter '^decode/'
  done
  grep -h "FAIL" "$OUT"/decode-cuda*.txt | head -20
fi

if stage bench; then
  if ! grep -q register_decode_benchmarks bench/main.cpp; then
    echo "bench/main.cpp does not call register_decode_benchmarks: no decode benchmarks to run"
    exit 1
  fi
  B="(${BENCH_BACKENDS:-cuda|reference|sdpa})"
  bench_run decode "^(ceiling/d2d_copy/|decode_attention_[a-z]+/$B/cuda/(31b|e4b)/[0-9]+/bf16/)" \
    --benchmark_min_time="${MIN_TIME:-0.02s}" --benchmark_repetitions="${REPS:-5}"
  [ "$run_code" -eq 0 ] || status=1
  # The decode table: one line per benchmark (median of the repetitions), or why it was skipped.
  python3 - "$OUT/decode.json" <<'EOF' | tee "$OUT/decode_table.txt"
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
fi

if stage ncu; then
  cases=${NCU_CASES:-decode_attention_global/cuda/cuda/31b/32768/bf16/b1 decode_attention_global/cuda/cuda/31b/32768/bf16/b64}
  for c in $cases; do
    echo "== $c" >> "$OUT/ncu.txt"
    /usr/local/cuda/bin/ncu -k regex:decode_attention_kernel --launch-skip 4 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      build/bin/gemma4-bench --benchmark_filter="^$c(/manual_time)?\$" --benchmark_min_time=5x --benchmark_repetitions=1 \
      >> "$OUT/ncu.txt" 2>&1 || status=1
  done
  grep -E "^== |DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Stall|Issued Warp|No Eligible" \
    "$OUT/ncu.txt" | head -60
fi

# Whatever else is under $OUT (the device tool returns at most 8 files) goes into one tarball.
extras=()
for f in "$OUT"/*; do
  case ${f##*/} in
    gpu.txt | build.log | test.txt | decode.json | decode_table.txt | ncu.txt | logs.tar.gz | '*') ;;
    *) extras+=("${f##*/}") ;;
  esac
done
[ ${#extras[@]} -eq 0 ] || (cd "$OUT" && tar czf logs.tar.gz "${extras[@]}" && rm -rf "${extras[@]}")
exit $status

#!/usr/bin/env bash
# The GPU memory stage: activation memory of the released geometries (bench/memory/ACTIVATION_MEMORY.md).
# From any directory; results under --out.
#
#   ci/gpu/memory.sh [--only STEP,...] [--out DIR] [--time-limit S] [--max-files N] [--help]
#   (the options: bash ci/gpu/common.sh --help; ci/gpu.sh runs this as its stage "memory")
#
# Steps, in this order:
#   build    ci/build.sh against the host's CUDA LibTorch;
#   measure  gemma4-conform memory measure, one run per geometry in $MEMORY_GEOMETRIES (default
#            31b 26b-a4b e2b e4b), bf16, backends reference and cuda, every phase at the default tokens
#            and batches: memory-<geometry>.json and .log; extra measure options in $MEASURE_ARGS;
#   report   gemma4-conform memory report on the points measured (with --only report: the
#            memory-*.json already in --out): memory_report.txt; its exit code is reported, not judged
#            (exit 1: the file's safety factor no longer covers a point).
# Exit 0 when every run passed, 1 otherwise, 2 on a bad option.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
STEPS_DEFAULT=(build measure report)
STEPS_OPTIONAL=()
stage_init memory "$@"

step build && gpu_build

files=()  # the points measured by this run
if step measure; then
  for g in ${MEMORY_GEOMETRIES:-31b 26b-a4b e2b e4b}; do
    # shellcheck disable=SC2086
    if run "memory-$g" 0 "$OUT/memory-$g.log" \
      build/bin/gemma4-conform memory measure --geometries "$g" --out "$OUT/memory-$g.json" ${MEASURE_ARGS:-}; then
      files+=("$OUT/memory-$g.json")
    else
      tail -5 "$OUT/memory-$g.log"
    fi
  done
fi

if step report; then
  # Without the measure step (--only report): the points files already in --out.
  if ! in_list measure "${SELECTED[@]}"; then
    for f in "$OUT"/memory-*.json; do [ -f "$f" ] && files+=("$f"); done
  fi
  if [ ${#files[@]} -eq 0 ]; then
    fail_run memory-report "no memory-<geometry>.json in $OUT (the measure step did not run or failed)"
  else
    run memory-report '*' "$OUT/memory_report.txt" build/bin/gemma4-conform memory report "${files[@]}"
    keep_file "$OUT/memory_report.txt"
  fi
fi

stage_finish

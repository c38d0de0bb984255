#!/usr/bin/env bash
# On the GPU host (issue 17): activation memory of the released geometries. From the repository
# root; per STAGE (comma-separated, default build,measure):
#   build    ci/build.sh against the host's CUDA LibTorch (ci/gpu_env.sh gpu_build);
#   measure  gemma4-conform memory measure, one run per geometry in $GEOMETRIES (default
#            31b 26b-a4b e2b e4b), bf16, backends reference and cuda, every phase at the default
#            tokens and batches: $OUT/memory-<geometry>.json and .log; then the merged report
#            (memory report) in $OUT/memory_report.txt.
# Extra measure options go in $MEASURE_ARGS. Exit 1 when a stage failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu_env.sh
STAGE=${STAGE:-build,measure}
status=0

if stage build && ! gpu_build; then
  echo "the build failed (build.log)"
  exit 1
fi

if stage measure; then
  files=()
  for g in ${GEOMETRIES:-31b 26b-a4b e2b e4b}; do
    t0=$SECONDS
    # shellcheck disable=SC2086
    build/bin/gemma4-conform memory measure --geometries "$g" --out "$OUT/memory-$g.json" ${MEASURE_ARGS:-} \
      > "$OUT/memory-$g.log" 2>&1
    code=$?
    echo "memory measure $g: exit $code, $((SECONDS - t0)) s: $(tail -1 "$OUT/memory-$g.log")"
    [ $code -eq 0 ] && files+=("$OUT/memory-$g.json") || { status=1; tail -5 "$OUT/memory-$g.log"; }
  done
  if [ ${#files[@]} -gt 0 ]; then
    build/bin/gemma4-conform memory report "${files[@]}" > "$OUT/memory_report.txt" 2>&1
    echo "memory report: exit $?"
  fi
fi
exit $status

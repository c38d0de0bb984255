#!/usr/bin/env bash
# Setup + build (ci/build.sh), then the main job: the conformance suite on the default backend (the
# reference), every category, ending with its summary by category and where the JSON report and
# the JUnit XML are.
#   ci/demo.sh [conform's options...]     e.g. ci/demo.sh --dtype bf16, ci/demo.sh --backend variant-sdpa
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
ci/build.sh > "${TMPDIR:-/tmp}/gemma4-build.log" 2>&1 || { tail -30 "${TMPDIR:-/tmp}/gemma4-build.log"; exit 1; }
out=${TMPDIR:-/tmp}/gemma4-conform
mkdir -p "$out"
backend=(--backend reference)
for arg in "$@"; do
  case $arg in --backend|--backend=*|--backend-lib|--backend-lib=*) backend=() ;; esac
done
exec "${BUILD_DIR:-build}"/bin/gemma4-conform conform "${backend[@]}" --report "$out/report.json" \
  --junit "$out/report.xml" "$@"

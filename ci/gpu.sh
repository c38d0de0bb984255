#!/usr/bin/env bash
# The GPU CI entry point: what a self-hosted GPU runner calls, from any directory, on a host with
# NVIDIA GPUs, nvcc and python3 with a CUDA torch (the build uses its LibTorch: TORCH_PREFIX).
#
#   ci/gpu.sh [--stages STAGE,...|all] [--out DIR] [--time-limit SECONDS] [--max-files N] [--help]
#
# Stages (ci/gpu/<stage>.sh; each builds first, or reuses the build of an earlier stage of the call),
# run in this order whatever the order given:
#   bench        the benchmarks and the regression gate: the baseline set compared with
#                bench/baselines/<gpu>.json (bench-compare), the fused-backend figures, decode attention.
#                First, on a GPU that has run nothing else, as when the baselines were recorded.
#   test         correctness on CUDA: CTest, the reference against transformers, the goldens on CUDA,
#                the conformance suite (reference, faulty backends, example plugin), the cuda backend,
#                decoding, the Python package and the third-party kernels, conform-model with the
#                historic environments, calibration (CUDA and the host's CPU).
#   memory       activation memory of the released geometries (memory measure, memory report).
#   distributed  conform-model --distributed on 2 GPUs (NPROC); "skipped: needs 2 GPUs, found N" on fewer.
# all (the default) is every stage. Each stage's --help lists its steps and the variables that tune them.
#
#   --out DIR           results: DIR/<stage>/ (each run's log, JSON report and table; the stage's
#                       junit.xml, summary.json, summary.txt, console.log), DIR/junit.xml (every stage,
#                       one testsuite each), DIR/summary.json, DIR/summary.txt. Default $OUT, else /tmp/gpu-ci.
#   --time-limit S      the whole call keeps to S seconds: no run is launched when fewer than 50 s would
#                       be left (GPU_CI_MIN_RUN_S + GPU_CI_RESERVE_S), a running one is cut short 20 s
#                       before the end; what was not run is listed, and counts as a failure.
#   --max-files N       leave at most N files under --out: when there are more, all go into
#                       DIR/results.tar.gz, beside summary.txt, junit.xml and the stages' key results.
#   --help
#
# Prints each stage's runs as they finish, then one line per stage. Exit 0 when every stage passed
# (or was skipped), 1 when one failed, was incomplete or did not run (no GPU: at once), 2 on a bad option.
#
# On a lent machine of 10-minute calls that returns few files, e.g.:
#   ci/gpu.sh --stages bench --time-limit 560 --max-files 8
#   ci/gpu/test.sh --only build,conform,cuda-backend --time-limit 560 --max-files 8
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/gpu/common.sh" || exit 2
ORDER=(bench test memory distributed)

stages="all" out="" limit="" max_files=""
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) print_usage "$0"; exit 0 ;;
    --stages) [ $# -ge 2 ] || usage_error "--stages needs a list"; stages=$2; shift ;;
    --stages=*) stages=${1#--stages=} ;;
    --out) [ $# -ge 2 ] || usage_error "--out needs a directory"; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --time-limit) [ $# -ge 2 ] || usage_error "--time-limit needs seconds"; limit=$2; shift ;;
    --time-limit=*) limit=${1#--time-limit=} ;;
    --max-files) [ $# -ge 2 ] || usage_error "--max-files needs a number"; max_files=$2; shift ;;
    --max-files=*) max_files=${1#--max-files=} ;;
    *) usage_error "unknown option '$1'" ;;
  esac
  shift
done
[ -z "$limit" ] || [[ "$limit" =~ ^[1-9][0-9]*$ ]] || usage_error "--time-limit: '$limit' is not a number of seconds"
[ -z "$max_files" ] || [[ "$max_files" =~ ^[1-9][0-9]*$ ]] || usage_error "--max-files: '$max_files' is not a positive number"
[ "$stages" = all ] && stages=$(IFS=,; echo "${ORDER[*]}")
for s in ${stages//,/ }; do
  in_list "$s" "${ORDER[@]}" || usage_error "--stages: no stage '$s' (stages: ${ORDER[*]}, or all)"
done
selected=()
for s in "${ORDER[@]}"; do [[ ",$stages," == *",$s,"* ]] && selected+=("$s"); done
[ ${#selected[@]} -gt 0 ] || usage_error "--stages: none given"

OUT=$(absolute_path "${out:-${OUT:-/tmp/gpu-ci}}")
cd "$GPU_CI_REPO" || exit 2
t0=$(now)
[ -n "$limit" ] && export GPU_CI_DEADLINE=$((t0 + limit))
export GPU_CI_ROOT=$OUT
unset GPU_CI_FULL_BUILD
mkdir -p "$OUT" || exit 1
rm -f "$OUT/summary.txt" "$OUT/summary.json" "$OUT/junit.xml" "$OUT/results.tar.gz" "$OUT/.keep-files"

lines=()
finish() {  # the summary, the merged reports, the packing; exit
  local code=$1
  {
    echo "== GPU CI summary ($gpu, $(($(now) - t0)) s; results in $OUT)"
    printf '%s\n' "${lines[@]}"
  } | tee "$OUT/summary.txt"
  PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH} python3 ci/gpu/results.py merge "$OUT" "${ran[@]}" "${not_run[@]}"
  [ -n "$max_files" ] && pack_results "$OUT" "$max_files"
  rm -f "$OUT/.keep-files"
  exit "$code"
}

ran=() not_run=() gpu="no GPU"
if ! reason=$(require_gpu 2>&1) || ! reason=$(gpu_env_setup 2>&1); then
  for s in "${selected[@]}"; do
    lines+=("$s: not run: $reason")
    not_run+=(--not-run "$s=$reason")
  done
  echo "ci/gpu.sh: $reason" >&2
  finish 1
fi
gpu="$(gpu_count) x $(gpu_key)"

status=0
for s in "${selected[@]}"; do
  if [ -n "${GPU_CI_DEADLINE:-}" ] && [ $((GPU_CI_DEADLINE - $(now))) -lt $((GPU_CI_RESERVE_S + GPU_CI_MIN_RUN_S)) ]; then
    lines+=("$s: not run: the time limit ($((GPU_CI_DEADLINE - $(now))) s left)")
    not_run+=(--not-run "$s=the time limit")
    status=1
    continue
  fi
  mkdir -p "$OUT/$s"
  echo "==== stage $s"
  "ci/gpu/$s.sh" --out "$OUT/$s" 2>&1 | tee "$OUT/$s/console.log"
  code=${PIPESTATUS[0]}
  ran+=("$s")
  [ "$code" -eq 0 ] || status=1
  if [ -s "$OUT/$s/summary.txt" ]; then
    lines+=("$(head -1 "$OUT/$s/summary.txt")")
  else
    lines+=("$s: FAIL: exit $code without a summary ($OUT/$s/console.log)")
  fi
  # A later stage reuses a full build that passed (the distributed stage's is partial).
  if [ "$s" != distributed ] && grep -q $'^build\tbuild\tpass\t' "$OUT/$s/results.tsv" 2> /dev/null; then
    export GPU_CI_FULL_BUILD=1
  fi
done
finish $status

#!/usr/bin/env bash
# Trials of the performance gate on one GPU machine: the gate (ci/gpu/bench.sh --only baseline,compare)
# run N times back to back at one build, to count how often it cries wolf; with a slowdown mutant
# (ci/gpu/slowdown_mutants.txt: one kernel made to do 5-10% more work, its results unchanged), to
# count how often it misses a real slowdown; with --contend, another process busy on the GPU during
# the first run, to show what the gate says then.
#
#   ci/gpu/gate_trials.sh [--runs N] [--mutant NAME [--interleave]] [--contend DELAY:SECONDS] [--only STEP,...]
#                         [--out DIR] [--time-limit S] [--max-files N] [--help]
#   ci/gpu/gate_trials.sh --list-mutants     the mutants, one a line, NAME FILE EDIT BENCHMARK tab-separated
#   (the common options: bash ci/gpu/common.sh --help)
# Steps, in this order:
#   build    ci/build.sh against the host's CUDA LibTorch;
#   mutant   (with --mutant) the build's gemma4-bench kept as the base (DIR/base-gemma4-bench), the
#            mutant's edit made, gemma4-bench rebuilt;
#   trials   N (default 5) gate runs, DIR/run-I (each a bench stage's directory); a mutant's runs
#            append nothing to the history (BENCH_HISTORY=off) and, with --interleave, re-measure what
#            they flag interleaved with the base (BASE_BENCH; about 30 s more a flagged benchmark); --contend starts `gate.py load` DELAY seconds into run 1
#            for SECONDS; then DIR/trials.txt: per run, the first pass's flags, the confirmed ones
#            and the gate's verdict, and for a mutant whether its benchmark was caught.
# Exit 0 when every trial ended as expected: no regression at a commit's own code, the mutant's
# benchmark reported in every run, "not judged" for a run with --contend's load; 1 otherwise; 2 on a
# bad option. The mutated file is put back (and gemma4-bench rebuilt) whichever steps ran.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
MUTANT_FILE=$GPU_CI_REPO/ci/gpu/slowdown_mutants.txt

# list_mutants: slowdown_mutants.txt's mutants (NAME|FILE|SED EXPRESSION|BENCHMARK the gate must
# report), one a line, tab-separated; the one reader of that file.
list_mutants() {
  local name file edit bench
  while IFS='|' read -r name file edit bench; do
    case "$name" in '' | '#'*) continue ;; esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$file" "$edit" "$bench"
  done < "$MUTANT_FILE"
}
if [ "${1:-}" = --list-mutants ]; then
  list_mutants
  exit 0
fi

STEPS_DEFAULT=(build mutant trials)
STEPS_OPTIONAL=()
stage_parse gate-trials "$@"
runs=5 mutant="" contend="" interleave=false
set -- "${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}"
while [ $# -gt 0 ]; do
  case $1 in
    --runs) [ $# -ge 2 ] || usage_error "--runs needs a number"; runs=$2; shift ;;
    --mutant) [ $# -ge 2 ] || usage_error "--mutant needs a name"; mutant=$2; shift ;;
    --contend) [ $# -ge 2 ] || usage_error "--contend needs DELAY:SECONDS"; contend=$2; shift ;;
    --interleave) interleave=true ;;
    *) usage_error "unknown option '$1'" ;;
  esac
  shift
done
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || usage_error "--runs: '$runs' is not a positive number"
[ -z "$contend" ] || [[ "$contend" =~ ^[0-9]+:[1-9][0-9]*$ ]] || usage_error "--contend: '$contend' is not DELAY:SECONDS"
MUTANT=()
if [ -n "$mutant" ]; then
  IFS=$'\t' read -r -a MUTANT < <(list_mutants | awk -F'\t' -v n="$mutant" '$1 == n')
  [ ${#MUTANT[@]} -eq 4 ] || usage_error "--mutant: no mutant '$mutant' in ci/gpu/slowdown_mutants.txt ($(list_mutants | cut -f1 | paste -sd' '))"
fi
stage_start

step build && gpu_build

base_bench=""
if [ ${#MUTANT[@]} -gt 0 ] && step mutant; then
  base_bench=$OUT/base-gemma4-bench
  cp build/bin/gemma4-bench "$base_bench"
  if ! mutate_source "${MUTANT[1]}" "${MUTANT[2]}" "$OUT/original.src"; then
    fail_run "mutant-${MUTANT[0]}" "the edit '${MUTANT[2]}' changed nothing in ${MUTANT[1]}"
    BUILD_FAILED=1
  elif ! run "build-mutant" 0 "$OUT/build-mutant.log" cmake --build build -j "$(nproc)" --target gemma4-bench; then
    tail -20 "$OUT/build-mutant.log"
    BUILD_FAILED=1
  fi
fi

if step trials; then
  for i in $(seq 1 "$runs"); do
    load_pid=""
    if [ -n "$contend" ] && [ "$i" = 1 ]; then
      (sleep "${contend%%:*}" && exec python3 ci/gpu/gate.py load --seconds "${contend##*:}") > "$OUT/load.log" 2>&1 &
      load_pid=$!
    fi
    left=""
    [ -n "${GPU_CI_DEADLINE:-}" ] && left="--time-limit $((GPU_CI_DEADLINE - $(now) - GPU_CI_RESERVE_S))"
    # shellcheck disable=SC2086 # $left: none or two words
    BASE_BENCH=$($interleave && echo "$base_bench") BENCH_HISTORY=$([ -n "$base_bench" ] && echo off || echo on) \
      detail_re='^gate: |not run' run "run-$i" '*' "$OUT/run-$i.log" bash ci/gpu/bench.sh --only baseline,compare \
      --out "$OUT/run-$i" $left
    [ -n "$load_pid" ] && wait "$load_pid"
  done
  python3 ci/gpu/gate.py trials "$OUT" --runs "$runs" ${MUTANT[3]:+--mutant-benchmark "${MUTANT[3]}"} \
    ${contend:+--contended-first} | tee "$OUT/trials.txt"
  keep_file "$OUT/trials.txt"
  grep -q '^trials: as expected' "$OUT/trials.txt" || fail_run trials "not as expected: $OUT/trials.txt"
fi

if [ ${#MUTANT[@]} -gt 0 ] && [ -f "$OUT/original.src" ]; then
  CURRENT_STEP=mutant
  cp "$OUT/original.src" "${MUTANT[1]}"
  run build-restored 0 "$OUT/build-restored.log" cmake --build build -j "$(nproc)" --target gemma4-bench
fi
stage_finish

#!/usr/bin/env bash
# A/B of a change on one GPU machine: the working tree against the files the change touched as a
# base revision has them, built and benchmarked back to back in one call, then judged by
# bench-compare. Timings compare only within one machine, and the GPU machine's checkout carries
# no history (`git show REV:file` fails there), so the base's files travel in .ab-base/
# (git-ignored: name it in the device call's carry, beside .whl).
#
#   ci/gpu/ab.sh --prepare REV      here, before the call: the files that differ between REV and the
#                                   working tree, as REV has them, into .ab-base/ (their paths in
#                                   .ab-base/FILES). Only changed files: a file added or deleted since
#                                   REV is an error (the two builds would not have the same targets).
#   ci/gpu/ab.sh --prepare-tree REV here, when files were added or deleted since REV: REV's whole
#                                   tree (git archive, without the .h5 goldens the benchmarks do not
#                                   read) as .ab-base/tree.tar.gz; the base step then builds it apart
#                                   (gemma4-bench only, in /tmp/ab-base-tree, kept for later calls on a
#                                   warm machine) and runs its gemma4-bench: the baseline commit's build
#                                   for the gate's interleaved re-measurement too (BASE_BENCH=
#                                   /tmp/ab-base-tree/build/bin/gemma4-bench ci/gpu/bench.sh ...).
#   ci/gpu/ab.sh --bench FILTER [--only STEP,...] [--out DIR] [--time-limit S] [--max-files N] [--help]
#                                   on the GPU machine (the options: bash ci/gpu/common.sh --help).
# Steps, in this order:
#   build    ci/build.sh against the host's CUDA LibTorch (the working tree);
#   base     the base's gemma4-bench: .ab-base's files put in place, gemma4-bench built and copied
#            to /tmp/ab-base-gemma4-bench, the working tree's files put back and rebuilt (also when
#            the build fails, so later commands of the call see the working tree's build); with
#            .ab-base/tree.tar.gz, that tree built apart in /tmp/ab-base-tree instead;
#   measure  FILTER and the ceilings (^ceiling/), $ROUNDS (3) rounds of $REPS (3) repetitions a side,
#            base first, each run a fresh process (base-R.json, new-R.json), each side pooled
#            (base.json, new.json);
#   compare  gemma4-conform bench-compare base.json new.json: compare.txt and compare.html (its exit
#            code is reported, not judged: a slower new side is a finding here, not a failure).
# $BENCH_FLAGS: more gemma4-bench flags for every run (default --benchmark_min_time=0.05s;
# bench-compare judges from 9 repetitions a side, ROUNDS x REPS). FILTER is matched from the start of
# a benchmark's name, as the figures of ci/gpu/bench.sh are.
# Exit 0 when every run passed, 1 otherwise, 2 on a bad option.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
BASE_DIR=.ab-base

# --prepare-tree REV: no GPU, no stage; runs in the repository root.
if [ "${1:-}" = --prepare-tree ]; then
  [ $# -eq 2 ] || usage_error "--prepare-tree takes one revision"
  cd "$GPU_CI_REPO" || exit 2
  rev=$2
  git rev-parse --verify -q "$rev^{commit}" > /dev/null || usage_error "--prepare-tree: '$rev' is not a revision here"
  rm -rf "$BASE_DIR" && mkdir -p "$BASE_DIR" || exit 1
  git archive --format=tar "$rev" -- . ':(exclude)*.h5' | gzip -6 > "$BASE_DIR/tree.tar.gz" || exit 1
  git rev-parse "$rev" > "$BASE_DIR/REV"
  echo "$BASE_DIR/tree.tar.gz: $(cut -c1-12 "$BASE_DIR/REV")'s tree, $(du -k "$BASE_DIR/tree.tar.gz" | cut -f1) KiB"
  echo "carry $BASE_DIR in the device call (carry: [\".whl\", \"$BASE_DIR\"])"
  exit 0
fi

# --prepare REV: no GPU, no stage; runs in the repository root.
if [ "${1:-}" = --prepare ]; then
  [ $# -eq 2 ] || usage_error "--prepare takes one revision"
  cd "$GPU_CI_REPO" || exit 2
  rev=$2
  git rev-parse --verify -q "$rev^{commit}" > /dev/null || usage_error "--prepare: '$rev' is not a revision here"
  other=$(git diff --name-only --diff-filter=ADRCT "$rev" -- . ":(exclude)$BASE_DIR")
  if [ -n "$other" ]; then
    echo "ci/gpu/ab.sh --prepare: added, deleted or renamed since $rev (an A/B needs both versions of every file):" >&2
    echo "$other" | sed 's/^/  /' >&2
    exit 1
  fi
  mapfile -t changed < <(git diff --name-only --diff-filter=M "$rev" -- . ":(exclude)$BASE_DIR")
  [ ${#changed[@]} -gt 0 ] || { echo "ci/gpu/ab.sh --prepare: the working tree does not differ from $rev" >&2; exit 1; }
  rm -rf "$BASE_DIR"
  for f in "${changed[@]}"; do
    mkdir -p "$BASE_DIR/$(dirname "$f")"
    git show "$rev:$f" > "$BASE_DIR/$f" || exit 1
  done
  printf '%s\n' "${changed[@]}" > "$BASE_DIR/FILES"
  git rev-parse "$rev" > "$BASE_DIR/REV"
  echo "$BASE_DIR/: ${#changed[@]} file(s) as $(cut -c1-12 "$BASE_DIR/REV") has them:"
  sed 's/^/  /' "$BASE_DIR/FILES"
  echo "carry $BASE_DIR in the device call (carry: [\".whl\", \"$BASE_DIR\"])"
  exit 0
fi

STEPS_DEFAULT=(build base measure compare)
STEPS_OPTIONAL=()
stage_parse ab "$@"
filter=""
set -- "${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}"
while [ $# -gt 0 ]; do
  case $1 in
    --bench) [ $# -ge 2 ] || usage_error "--bench needs a benchmark filter"; filter=$2; shift ;;
    --bench=*) filter=${1#--bench=} ;;
    *) usage_error "unknown option '$1'" ;;
  esac
  shift
done
[ -n "$filter" ] || usage_error "--bench FILTER is required (a gemma4-bench --benchmark_filter regex)"
if in_list base "${SELECTED[@]}" && [ ! -s "$GPU_CI_REPO/$BASE_DIR/FILES" ] && [ ! -s "$GPU_CI_REPO/$BASE_DIR/tree.tar.gz" ]; then
  usage_error "no $BASE_DIR/FILES or $BASE_DIR/tree.tar.gz: run ci/gpu/ab.sh --prepare REV (or --prepare-tree REV) here first and carry $BASE_DIR"
fi
stage_start

read -r -a flags <<< "${BENCH_FLAGS:---benchmark_min_time=0.05s}"
rounds=${ROUNDS:-3} reps=${REPS:-3}
step build && gpu_build

# copy_listed FROM TO: the files of .ab-base/FILES copied from the tree FROM into the tree TO.
copy_listed() {
  local f
  while IFS= read -r f; do mkdir -p "$2/$(dirname "$f")" && cp "$1/$f" "$2/$f" || return 1; done < "$BASE_DIR/FILES"
}
BASE_TREE=/tmp/ab-base-tree BASE_BIN=""
if [ -s "$BASE_DIR/tree.tar.gz" ] && step base; then
  # The base's own tree, built apart; rebuilt only when another revision is carried.
  if [ "$(cat "$BASE_TREE/REV" 2> /dev/null)" != "$(cat "$BASE_DIR/REV")" ] || [ ! -x "$BASE_TREE/build/bin/gemma4-bench" ]; then
    rm -rf "$BASE_TREE" && mkdir -p "$BASE_TREE" && tar xzf "$BASE_DIR/tree.tar.gz" -C "$BASE_TREE" && cp "$BASE_DIR/REV" "$BASE_TREE/REV"
    # The base tree has no .venv and no .whl: its ci/build.sh finds the CuTe headers only through
    # CUTLASS_INCLUDE_DIR, set here from this checkout's wheel (the build step's, when it ran).
    gpu_cutlass > "$OUT/cutlass-base.log" 2>&1 || tail -1 "$OUT/cutlass-base.log"
    run build-base 0 "$OUT/build-base.log" env BUILD_TARGETS=gemma4-bench bash -c "cd $BASE_TREE && ci/build.sh" ||
      tail -20 "$OUT/build-base.log"
  fi
  echo "base: $(cut -c1-12 "$BASE_DIR/REV")'s tree in $BASE_TREE"
  [ -x "$BASE_TREE/build/bin/gemma4-bench" ] && BASE_BIN=$BASE_TREE/build/bin/gemma4-bench
elif step base; then
  # The base's files swapped in, its gemma4-bench built and kept apart, the working tree's put back.
  saved=$(mktemp -d /tmp/ab-new.XXXXXX)
  copy_listed . "$saved" || exit 1
  echo "base: $(cut -c1-12 "$BASE_DIR/REV" 2> /dev/null)'s $(wc -l < "$BASE_DIR/FILES") file(s)"
  if copy_listed "$BASE_DIR" . && run build-base 0 "$OUT/build-base.log" cmake --build build -j "$(nproc)" --target gemma4-bench; then
    cp build/bin/gemma4-bench /tmp/ab-base-gemma4-bench && BASE_BIN=/tmp/ab-base-gemma4-bench
  else
    tail -20 "$OUT/build-base.log" 2> /dev/null
  fi
  copy_listed "$saved" .
  rm -rf "$saved"
  run build-restored 0 "$OUT/build-restored.log" cmake --build build -j "$(nproc)"
fi

if step measure; then
  if [ -z "$BASE_BIN" ]; then
    fail_run measure "no base gemma4-bench (the base step failed or was not run)"
  else
    interleave base new "$BASE_BIN" "^(ceiling/|$filter)" "$rounds" "$reps" "${flags[@]}"
  fi
fi

if step compare; then
  if [ -f "$OUT/base.json" ] && [ -f "$OUT/new.json" ]; then
    detail_re=- run compare '*' "$OUT/compare.txt" build/bin/gemma4-conform bench-compare \
      "$OUT/base.json" "$OUT/new.json" --html "$OUT/compare.html"
    cat "$OUT/compare.txt"
    keep_file "$OUT/compare.txt"
  else
    fail_run compare "base.json or new.json is missing (a run above failed or was not run)"
  fi
fi
stage_finish

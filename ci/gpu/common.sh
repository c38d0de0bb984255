# shellcheck shell=bash
# The GPU CI's shared steps, sourced by ci/gpu.sh and the stages ci/gpu/{test,bench,memory,distributed}.sh
# (not run by itself; `bash ci/gpu/common.sh --help` prints this).
#
# A stage is a list of steps; a step launches runs (one command each: a build, a conform, a
# benchmark...). Every run is recorded in $OUT/results.tsv with its verdict against its expected
# exit code (pass, fail, skipped: a backend or package is absent, not-run: the time limit or the
# build), and ci/gpu/results.py turns those into $OUT/junit.xml (through the report module),
# summary.json and summary.txt.
#
# The stages' common options:
#   --out DIR          results (logs, JSON, JUnit) here; default $OUT, else /tmp/gpu-ci/<stage>
#   --time-limit S     launch no run when fewer than $GPU_CI_MIN_RUN_S (30) seconds would be left
#                      before S seconds from the start minus $GPU_CI_RESERVE_S (20, for the reports),
#                      and cut a run short at that point; the runs not launched are listed as
#                      "not run". Through ci/gpu.sh the limit is the whole call's ($GPU_CI_DEADLINE).
#   --max-files N      at the end, when more than N files are under --out, pack them into
#                      results.tar.gz beside summary.txt, junit.xml and the stage's key files, N in all
#   --only STEP,...    these steps (default: the stage's default list; "all" is that list)
#   --help
# The environment they share: TORCH_PREFIX (default: python3's torch), TORCH_CUDA_ARCH_LIST (9.0a),
# the system GCC (CC, CXX, CUDAHOSTCXX) where /usr/bin/g++ is, CUTLASS_INCLUDE_DIR (from
# .whl/nvidia_cutlass-*.whl, else PyPI, into /tmp/cutlass), RUN_TIMEOUT (seconds one run may take;
# the stages set their own defaults for some runs).

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  awk 'NR == 1 && /^# shellcheck/ {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$0"
  exit 0
fi

GPU_CI_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GPU_CI_RESERVE_S=${GPU_CI_RESERVE_S:-20}
GPU_CI_MIN_RUN_S=${GPU_CI_MIN_RUN_S:-30}

now() { printf '%(%s)T\n' -1; }

# print_usage FILE: FILE's leading comment block (after the #! line), the '# ' taken off.
print_usage() {
  awk 'NR == 1 && /^#!/ {next} /^# shellcheck/ {next} /^#/ {sub(/^# ?/, ""); print; next} {exit}' "$1"
}

usage_error() {
  local script
  script=$(realpath "$0")
  script=${script#"$GPU_CI_REPO"/}
  echo "$script: $*" >&2
  echo "usage: $script --help" >&2
  exit 2
}

in_list() {  # WORD LIST...: whether WORD is one of LIST
  local word=$1 item
  shift
  for item in "$@"; do [ "$item" = "$word" ] && return 0; done
  return 1
}

# absolute_path PATH: PATH made absolute against the current directory (it need not exist).
absolute_path() {
  case $1 in
    /*) echo "$1" ;;
    *) echo "$PWD/$1" ;;
  esac
}

# require_gpu: fails (with the reason on stderr) unless nvidia-smi lists at least one GPU.
require_gpu() {
  local list
  if ! command -v nvidia-smi > /dev/null 2>&1; then
    echo "no GPU: nvidia-smi not found" >&2
    return 1
  fi
  if ! list=$(timeout 60 nvidia-smi -L 2>&1); then
    echo "no GPU: nvidia-smi failed: $(head -1 <<< "$list")" >&2
    return 1
  fi
  if ! grep -q '^GPU ' <<< "$list"; then
    echo "no GPU: nvidia-smi lists none" >&2
    return 1
  fi
}

# gpu_count: the GPUs this process may use (nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES when set).
gpu_count() {
  local physical visible
  physical=$(timeout 60 nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    visible=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c '[^[:space:]]')
    [ "$visible" -lt "$physical" ] && physical=$visible
  fi
  echo "$physical"
}

# gpu_key: the GPU's name as a file name: lowercased, spaces as '-' (nvidia-h200, nvidia-h100-80gb-hbm3).
gpu_key() {
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr '[:upper:]' '[:lower:]' | sed 's/[[:space:]]*$//; s/ /-/g'
}

# gpu_env_setup: the host's CUDA LibTorch for ci/build.sh, the CUDA architecture, the compilers.
gpu_env_setup() {
  if [ -z "${TORCH_PREFIX:-}" ]; then
    if ! TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> /dev/null); then
      echo "python3 cannot import torch: the GPU stages build against the host's CUDA LibTorch" \
        "(python3's torch) and run the Python package with it; install torch for python3 or set TORCH_PREFIX" >&2
      return 1
    fi
  fi
  export TORCH_PREFIX
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
  # The system GCC, not the image's CXX=/opt/gcc/bin/g++: that one links parts of libstdc++ statically
  # (its locale code among them) and shared objects with -Bsymbolic, so the Python module
  # (tools/python) carried a second copy of the locale machinery beside the process's libstdc++.so
  # and crashed on its first ostream insertion. /usr/bin/g++ links libstdc++.so like torch does.
  if [ -x /usr/bin/g++ ]; then
    export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
  fi
}

# stage_parse NAME "$@": for a stage script, after it set STEPS_DEFAULT and STEPS_OPTIONAL: parses
# the common options (--help prints the script's usage and exits; exit 2 on a bad one; other options
# are left in EXTRA_ARGS for the stage). Sets STAGE_NAME, SELECTED (the steps to run), MAX_FILES,
# STAGE_OUT, STAGE_LIMIT. Nothing else: stage_start does.
stage_parse() {
  STAGE_NAME=$1
  shift
  local out="" only="" limit=""
  MAX_FILES=""
  EXTRA_ARGS=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) print_usage "$0"; exit 0 ;;
      --out) [ $# -ge 2 ] || usage_error "--out needs a directory"; out=$2; shift ;;
      --out=*) out=${1#--out=} ;;
      --time-limit) [ $# -ge 2 ] || usage_error "--time-limit needs seconds"; limit=$2; shift ;;
      --time-limit=*) limit=${1#--time-limit=} ;;
      --max-files) [ $# -ge 2 ] || usage_error "--max-files needs a number"; MAX_FILES=$2; shift ;;
      --max-files=*) MAX_FILES=${1#--max-files=} ;;
      --only) [ $# -ge 2 ] || usage_error "--only needs a list of steps"; only=$2; shift ;;
      --only=*) only=${1#--only=} ;;
      *) EXTRA_ARGS+=("$1") ;;
    esac
    shift
  done
  [ -z "$limit" ] || [[ "$limit" =~ ^[1-9][0-9]*$ ]] || usage_error "--time-limit: '$limit' is not a number of seconds"
  [ -z "$MAX_FILES" ] || [[ "$MAX_FILES" =~ ^[1-9][0-9]*$ ]] || usage_error "--max-files: '$MAX_FILES' is not a positive number"
  local step
  SELECTED=()
  if [ -z "$only" ] || [ "$only" = all ]; then
    SELECTED=("${STEPS_DEFAULT[@]}")
  else
    for step in ${only//,/ }; do
      in_list "$step" "${STEPS_DEFAULT[@]}" "${STEPS_OPTIONAL[@]}" ||
        usage_error "--only: no step '$step' (steps: ${STEPS_DEFAULT[*]}; optional: ${STEPS_OPTIONAL[*]:-none})"
      SELECTED+=("$step")
    done
  fi
  STAGE_OUT=$(absolute_path "${out:-${OUT:-/tmp/gpu-ci/$STAGE_NAME}}")
  STAGE_LIMIT=$limit
}

# stage_start: goes to the repository root, checks for a GPU (exit 1 without one), sets up the
# environment, writes $OUT/gpu.txt and starts $OUT/results.tsv. Sets OUT (exported), STAGE_T0.
stage_start() {
  OUT=$STAGE_OUT
  export OUT
  export GPU_CI_ROOT=${GPU_CI_ROOT:-$OUT}
  cd "$GPU_CI_REPO" || exit 2
  STAGE_T0=$(now)
  [ -n "$STAGE_LIMIT" ] && export GPU_CI_DEADLINE=$((STAGE_T0 + STAGE_LIMIT))
  require_gpu || exit 1
  gpu_env_setup || exit 1
  mkdir -p "$OUT" || exit 1
  : > "$OUT/results.tsv"
  [ "$GPU_CI_ROOT" = "$OUT" ] && rm -f "$OUT/.keep-files"
  CURRENT_STEP=$STAGE_NAME
  BUILD_FAILED=""
  {
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import sys, sysconfig, torch; print("python", sys.version.split()[0], "headers", sysconfig.get_paths()["include"], "torch", torch.__version__)' 2>&1
  } | tee "$OUT/gpu.txt"
  echo "== $STAGE_NAME: steps ${SELECTED[*]}; results in $OUT${GPU_CI_DEADLINE:+; time left $((GPU_CI_DEADLINE - STAGE_T0)) s}"
}

# stage_init NAME "$@": stage_parse, no option of the stage's own, stage_start.
stage_init() {
  stage_parse "$@"
  [ ${#EXTRA_ARGS[@]} -eq 0 ] || usage_error "unknown option '${EXTRA_ARGS[0]}'"
  stage_start
}

# record STEP RUN VERDICT EXIT EXPECTED SECONDS DETAIL [LOG]: one line of $OUT/results.tsv.
record() {
  local detail log=${8:-}
  detail=$(printf '%s' "$7" | tr '\t\r\n' '   ' | cut -c1-300)
  [ -n "$log" ] && log=${log#"$OUT"/}
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$detail" "$log" >> "$OUT/results.tsv"
}

# time_check RUN: whether there is time left to launch RUN; records it as not run when there is not.
time_check() {
  [ -z "${GPU_CI_DEADLINE:-}" ] && return 0
  local left=$((GPU_CI_DEADLINE - $(now)))
  [ $((left - GPU_CI_RESERVE_S)) -ge "$GPU_CI_MIN_RUN_S" ] && return 0
  record "$CURRENT_STEP" "$1" not-run - - 0 "time limit: $left s left"
  echo "[not run] $1: the time limit ($left s left)"
  return 1
}

# step NAME: whether to run step NAME (selected, the build did not fail, time is left); prints a header.
step() {
  in_list "$1" "${SELECTED[@]}" || return 1
  CURRENT_STEP=$1
  if [ -n "$BUILD_FAILED" ]; then
    record "$1" "$1" not-run - - 0 "the build failed"
    echo "[not run] $1: the build failed"
    return 1
  fi
  time_check "$1" || return 1
  echo "== $1"
}

# run RUN EXPECTED LOG COMMAND...: runs COMMAND (an executable: use `env VAR=...` for variables), its
# output in LOG; EXPECTED is the exit code that passes ('*': any). Under the time limit and
# $RUN_TIMEOUT (the smaller). Prints one line: verdict, exit code, seconds and a detail, the last
# line of LOG matching $detail_re (else its last line; none when detail_re is '-'). Sets run_code
# (125 when not launched); returns 0 when it passed.
run() {
  local name=$1 expected=$2 log=$3 t0 seconds code tmo="" by="" left verdict detail
  shift 3
  run_code=125
  if ! time_check "$name"; then
    echo "not run: the time limit" > "$log"
    return 1
  fi
  if [ -n "${RUN_TIMEOUT:-}" ]; then tmo=$RUN_TIMEOUT by="its ${RUN_TIMEOUT} s timeout (RUN_TIMEOUT)"; fi
  if [ -n "${GPU_CI_DEADLINE:-}" ]; then
    left=$((GPU_CI_DEADLINE - $(now) - GPU_CI_RESERVE_S))
    if [ -z "$tmo" ] || [ "$left" -lt "$tmo" ]; then tmo=$left by="the time limit"; fi
  fi
  t0=$(now)
  if [ -n "$tmo" ]; then
    timeout -k 10 "$tmo" "$@" > "$log" 2>&1
  else
    "$@" > "$log" 2>&1
  fi
  code=$?
  # shellcheck disable=SC2034 # run_code: for the calling stage
  run_code=$code
  seconds=$(($(now) - t0))
  detail=""
  if [ "${detail_re:-}" != - ]; then
    [ -n "${detail_re:-}" ] && detail=$(grep -E "$detail_re" "$log" 2> /dev/null | tail -1)
    [ -n "$detail" ] || detail=$(grep -v '^[[:space:]]*$' "$log" 2> /dev/null | tail -1)
  fi
  if [ -n "$tmo" ] && { [ $code -eq 124 ] || [ $code -eq 137 ]; } && [ "$seconds" -ge $((tmo - 1)) ]; then
    detail="cut short by $by: $detail"
  fi
  if [ "$expected" = '*' ] || [ "$code" = "$expected" ]; then verdict=pass; else verdict=fail; fi
  record "$CURRENT_STEP" "$name" "$verdict" "$code" "$expected" "$seconds" "$detail" "$log"
  printf '[%s] %s: exit %s (expected %s; %s s): %s\n' "$([ $verdict = pass ] && echo pass || echo FAIL)" \
    "$name" "$code" "$expected" "$seconds" "$detail"
  [ $verdict = pass ]
}

# skip_run RUN REASON / fail_run RUN REASON [LOG]: a run recorded without a command.
skip_run() {
  record "$CURRENT_STEP" "$1" skipped - - 0 "$2"
  echo "[skipped] $1: $2"
}
fail_run() {
  record "$CURRENT_STEP" "$1" fail - - 0 "$2" "${3:-}"
  echo "[FAIL] $1: $2"
}

# keep_file PATH: a key result that --max-files keeps beside the tarball (after summary.txt and
# junit.xml, in the order given) while there is room.
keep_file() {
  local rel=${1#"$GPU_CI_ROOT"/}
  [ "$rel" != "$1" ] && echo "$rel" >> "$GPU_CI_ROOT/.keep-files"
}

# gpu_cutlass: CUTLASS_INCLUDE_DIR for ci/build.sh where nvcc will build the CUDA backend: the
# nvidia-cutlass wheel (headers only are used) carried in .whl/ (pip download nvidia-cutlass==<ci/build.sh's
# CUTLASS_VERSION> --no-deps -d .whl) on a host without network, else from PyPI; into /tmp/cutlass.
gpu_cutlass() {
  if [ -n "${CUTLASS_INCLUDE_DIR:-}" ] || [ "${GEMMA4_CUDA:-on}" = off ]; then return 0; fi
  command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
  local dir=/tmp/cutlass version
  if [ ! -d "$dir/cutlass_library/source/include" ]; then
    if ls .whl/nvidia_cutlass-*.whl > /dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$dir" .whl/nvidia_cutlass-*.whl || return 1
    else
      version=$(sed -n 's/^CUTLASS_VERSION=\([^ ]*\).*/\1/p' ci/build.sh)
      python3 -m pip install -q --no-deps --no-compile --retries 0 --timeout 15 --target "$dir" \
        "nvidia-cutlass==$version" > /dev/null 2>&1 ||
        { echo "no nvidia-cutlass: no wheel in .whl/ and PyPI unreachable (carry it: pip download nvidia-cutlass==$version --no-deps -d .whl)"; return 1; }
    fi
  fi
  export CUTLASS_INCLUDE_DIR=$dir/cutlass_library/source/include
}

# The sources ci/gpu/test.sh's mutation step edited since the build last matched the tree: one
# whose rebuild did not finish (the time limit, a failed build) leaves the mutant's objects, and the
# device's copy of the tree brings the source back with its old time, older than those objects, so
# ninja would keep the mutant (seen on an H100: test_cuda_kv_cache failing 10 cases in the call
# after the decode mutants). touch_mutated_sources makes them newer; the next whole build clears it.
MUTATED_SOURCES=build/mutated-sources.txt
touch_mutated_sources() {
  [ -s "$MUTATED_SOURCES" ] || return 0
  local sources
  sources=$(sort -u "$MUTATED_SOURCES")
  echo "rebuilding what a mutation step left built: $(tr '\n' ' ' <<< "$sources")"
  xargs touch <<< "$sources"
}
# mutate_source FILE EDIT SAVED: FILE saved to SAVED, then edited with the sed expression EDIT (a
# mutant: ci/gpu/kernel_mutations.txt, ci/gpu/slowdown_mutants.txt); listed for touch_mutated_sources
# until a whole build passes. Returns 1, FILE untouched, when the edit changes nothing.
mutate_source() {
  cp "$1" "$3" || return 1
  echo "$1" >> "$MUTATED_SOURCES"
  sed -i "$2" "$1"
  ! cmp -s "$1" "$3"
}
# gpu_build: ci/build.sh against the host's CUDA LibTorch, its log in $OUT/build.log (the tail
# printed on failure); honours GEMMA4_CUDA and BUILD_TARGETS as ci/build.sh does. Under ci/gpu.sh,
# a stage after one whose build passed reuses that build ($GPU_CI_FULL_BUILD). On failure, sets
# BUILD_FAILED: the later steps are then recorded as not run.
gpu_build() {
  if [ -n "${GPU_CI_FULL_BUILD:-}" ]; then
    record "$CURRENT_STEP" build pass 0 0 0 "reused: built by an earlier stage of this ci/gpu.sh run"
    echo "[pass] build: reused (built by an earlier stage of this run)"
    return 0
  fi
  touch_mutated_sources
  if ! gpu_cutlass > "$OUT/cutlass.log" 2>&1; then
    fail_run build "$(tail -1 "$OUT/cutlass.log")" "$OUT/cutlass.log"
    BUILD_FAILED=1
    return 1
  fi
  if ! detail_re='^\[build\] built|error' run build 0 "$OUT/build.log" ci/build.sh; then
    tail -40 "$OUT/build.log"
    [ "$run_code" = 125 ] || BUILD_FAILED=1  # not launched (the time limit): the later steps are not either
    return 1
  fi
  rm -f "$MUTATED_SOURCES"
}

# has_cuda_backend: whether the build has the cuda backend (gemma4-conform backends lists it).
has_cuda_backend() {
  # Not `grep -q`: it stops reading at the first match, and under pipefail the writer's SIGPIPE
  # then fails the pipeline (seen on an H200: the decode step skipped with the backend built).
  build/bin/gemma4-conform backends 2> /dev/null | grep '^cuda ' > /dev/null
}
# shellcheck disable=SC2034 # for the stages
NO_CUDA_BACKEND="the cuda backend is not built (GEMMA4_CUDA=off, no nvcc, or a CPU LibTorch)"

# calibrate_run RUN ARGS...: one calibrate run; its console in $OUT/RUN.txt (the verdict lines shown),
# its JSON in $OUT/RUN.json, every run's conform report in $OUT/RUN-reports.tgz.
calibrate_run() {
  local name=$1 work=/tmp/$1
  shift
  rm -rf "$work"
  run "$name" 0 "$OUT/$name.txt" $CLI calibrate --work-dir "$work" --report "$OUT/$name.json" "$@"
  tar czf "$OUT/$name-reports.tgz" -C "$work" . 2> /dev/null
  grep -E "WRONG|^  (f32|bf16|f16) |^PASS|^FAIL" "$OUT/$name.txt" | tail -40
}

# conform_run RUN EXPECTED ARGS...: `gemma4-conform conform --device cuda ARGS`, its table in
# $OUT/RUN.txt and report in $OUT/RUN.json.
conform_run() {
  local name=$1 expected=$2
  shift 2
  run "$name" "$expected" "$OUT/$name.txt" build/bin/gemma4-conform conform --device cuda --report "$OUT/$name.json" "$@"
}

# bench_run RUN FILTER [GEMMA4_BENCH_FLAGS...]: one gemma4-bench run ($BENCH_BIN, default this build's)
# of the benchmarks matching FILTER, its JSON report in $OUT/RUN.json (every repetition; what
# bench-compare reads), its console in $OUT/RUN.txt.
bench_run() {
  local name=$1 filter=$2
  shift 2
  detail_re=- run "$name" 0 "$OUT/$name.txt" "${BENCH_BIN:-build/bin/gemma4-bench}" --benchmark_filter="$filter" "$@" \
    --benchmark_out="$OUT/$name.json" --benchmark_out_format=json
}

# gpu_monitor_start DIR / gpu_monitor_stop: nvidia-smi beside a benchmark run, every 500 ms: the
# GPU's state (DIR/samples.csv: utilisation, SM and memory clocks, power, temperature, throttle
# reasons) and its compute processes (DIR/apps.csv); ci/gpu/gate.py monitor DIR reads them.
gpu_monitor_start() {
  local gpu=${CUDA_VISIBLE_DEVICES:-0}  # the GPU the benchmarks run on (gate.py idle watches the same)
  gpu=${gpu%%,*}
  mkdir -p "$1"
  nvidia-smi -i "$gpu" --query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader,nounits -lms 500 > "$1/samples.csv" 2> "$1/samples.err" &
  GPU_MONITOR_PIDS=$!
  nvidia-smi -i "$gpu" --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv,noheader,nounits -lms 500 \
    > "$1/apps.csv" 2> "$1/apps.err" &
  GPU_MONITOR_PIDS+=" $!"
}
gpu_monitor_stop() {
  # shellcheck disable=SC2086 # two pids
  kill $GPU_MONITOR_PIDS 2> /dev/null
  # shellcheck disable=SC2086 # two pids
  wait $GPU_MONITOR_PIDS 2> /dev/null
  return 0
}

# interleave BASE NEW BASE_BIN FILTER ROUNDS REPS [GEMMA4_BENCH_FLAGS...]: FILTER measured by the
# base's gemma4-bench (BASE_BIN) and this build's in turn, ROUNDS rounds of REPS repetitions a side,
# base first, each run a fresh process ($OUT/BASE-R.json, $OUT/NEW-R.json), each side's rounds pooled
# into $OUT/BASE.json and $OUT/NEW.json (gate.py merge). A time can move between processes (the E2B
# layer by up to +-8% on an H200: bench/README.md, "The regression gate"): one process a side would
# compare two draws of that.
interleave() {
  local base=$1 new=$2 bin=$3 filter=$4 rounds=$5 reps=$6 r
  shift 6
  for r in $(seq 1 "$rounds"); do
    BENCH_BIN=$bin bench_run "$base-$r" "$filter" --benchmark_repetitions="$reps" "$@"
    bench_run "$new-$r" "$filter" --benchmark_repetitions="$reps" "$@"
  done
  python3 ci/gpu/gate.py merge "$OUT/$base.json" "$OUT/$base"-[0-9]*.json &&
    python3 ci/gpu/gate.py merge "$OUT/$new.json" "$OUT/$new"-[0-9]*.json
}

# python_env: for the runs of the Python package: the module built in build/python, the carried
# wheels of .whl/ (liger-kernel, axolotl, ...) installed with --no-deps into /tmp/site, PYTHONPATH.
# Records a failed run "python-env" and returns 1 when the module is missing.
python_env() {
  [ -n "${PYTHON_ENV_READY:-}" ] && return 0
  if ! ls build/python/gemma4_conform/_core*.so > /dev/null 2>&1; then
    fail_run python-env "the Python module was not built (build/python/gemma4_conform/_core*.so)"
    return 1
  fi
  if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl > "$OUT/python-env.log" 2>&1 ||
      { fail_run python-env "pip install of .whl/*.whl into /tmp/site failed" "$OUT/python-env.log"; return 1; }
  fi
  export PYTHONPATH=build/python:tools/python/tests:impl/python:impl/third_party:/tmp/site
  PYTHON_ENV_READY=1
}

# py_has MODULE...: whether python3 (with python_env's path) imports every MODULE.
py_has() {
  local module
  for module in "$@"; do python3 -c "import $module" > /dev/null 2>&1 || return 1; done
}

# py_run RUN EXPECTED COMMAND ARGS...: `python3 -m gemma4_conform COMMAND --device cuda ARGS` (conform
# or conform-model), its table in $OUT/RUN.txt and report in $OUT/RUN.json; RUN_TIMEOUT default 400 s.
py_run() {
  local name=$1 expected=$2 command=$3
  shift 3
  RUN_TIMEOUT=${RUN_TIMEOUT:-400} detail_re='^(PASS|FAIL): |error' run "$name" "$expected" "$OUT/$name.txt" \
    python3 -m gemma4_conform "$command" --device cuda --report "$OUT/$name.json" "$@"
}

# pack_results DIR N: when more than N files are under DIR, every file goes into DIR/results.tar.gz
# and only summary.txt, junit.xml, the kept files (keep_file) and summary.json stay beside it, N in all.
pack_results() {
  local dir=$1 max=$2 total keep=() f tmp rel
  rm -f "$dir/results.tar.gz"
  total=$(find "$dir" -type f ! -name .keep-files | wc -l)
  if [ "$total" -le "$max" ]; then
    rm -f "$dir/.keep-files"
    return 0
  fi
  while IFS= read -r f; do
    [ ${#keep[@]} -lt $((max - 1)) ] || break
    if [ -f "$dir/$f" ] && ! in_list "$f" "${keep[@]}"; then keep+=("$f"); fi
  done < <(printf '%s\n' summary.txt junit.xml; cat "$dir/.keep-files" 2> /dev/null; echo summary.json)
  tmp=$(mktemp /tmp/gpu-ci-results.XXXXXX) || return 1
  if ! tar -czf "$tmp" -C "$dir" --exclude=./.keep-files .; then
    echo "packing $dir failed; its files are left as they are" >&2
    rm -f "$tmp"
    return 1
  fi
  while IFS= read -r -d '' f; do
    rel=${f#"$dir"/}
    in_list "$rel" "${keep[@]}" || rm -f "$f"
  done < <(find "$dir" -type f -print0)
  find "$dir" -mindepth 1 -type d -empty -delete
  mv "$tmp" "$dir/results.tar.gz"
  chmod 644 "$dir/results.tar.gz"
  echo "packed $total files into $dir/results.tar.gz (--max-files $max); beside it: ${keep[*]}"
}

# stage_finish: the stage's junit.xml, summary.json and summary.txt (its one-line summary printed),
# the packing (--max-files), and exit: 0 when every run passed or was skipped, else 1.
stage_finish() {
  local code
  PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH} python3 ci/gpu/results.py stage "$OUT" "$STAGE_NAME" $(($(now) - STAGE_T0))
  code=$?
  if [ "$GPU_CI_ROOT" = "$OUT" ]; then
    [ -n "$MAX_FILES" ] && pack_results "$OUT" "$MAX_FILES"
    rm -f "$OUT/.keep-files"
  fi
  exit $code
}

# shellcheck shell=bash
# Sourced (from the repository root) by the GPU-host scripts: where their logs go ($OUT), the
# host's CUDA LibTorch for ci/build.sh, and the steps
# they share (gpu_build, gpu_key, conform_run, bench_run).
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export TORCH_PREFIX=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
# The system GCC, not the image's CXX=/opt/gcc/bin/g++: that one links parts of libstdc++ statically
# (its locale code among them) and shared objects with -Bsymbolic, so the Python module
# (tools/python) carried a second copy of the locale machinery beside the process's libstdc++.so
# and crashed on its first ostream insertion. /usr/bin/g++ links libstdc++.so like torch does.
if [ -x /usr/bin/g++ ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
fi

# gpu_cutlass: CUTLASS_INCLUDE_DIR for ci/build.sh. The host has no network: the nvidia-cutlass
# wheel (headers only are used) is carried in .whl/ (pip download nvidia-cutlass==4.2.0.0 --no-deps).
gpu_cutlass() {
  [ -n "${CUTLASS_INCLUDE_DIR:-}" ] || [ "${GEMMA4_CUDA:-on}" = off ] && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cutlass .whl/nvidia_cutlass-*.whl ||
    { echo "no nvidia-cutlass wheel in .whl/ (carry it)"; return 1; }
  export CUTLASS_INCLUDE_DIR=/tmp/cutlass/cutlass_library/source/include
}

# gpu_build: the GPU (name, memory, driver) into $OUT/gpu.txt, then ci/build.sh (log in
# $OUT/build.log; its tail on failure). Returns ci/build.sh's status.
gpu_build() {
  local t0=$SECONDS code
  gpu_cutlass || return 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  ci/build.sh > "$OUT/build.log" 2>&1
  code=$?
  [ $code -eq 0 ] || tail -40 "$OUT/build.log"
  echo "build: exit $code, $((SECONDS - t0)) s"
  return $code
}

# gpu_key: the GPU's name as a file name: lowercased, spaces as '-' (nvidia-h200, nvidia-h100-80gb-hbm3).
gpu_key() {
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr '[:upper:]' '[:lower:]' | sed 's/[[:space:]]*$//; s/ /-/g'
}

# conform_run NAME EXPECTED_EXIT ARGS...: one `gemma4-conform conform --device cuda ARGS` run, its
# table in $OUT/NAME.txt and report in $OUT/NAME.json; prints one line. Sets run_code (its exit
# status; 124 when it ran past $RUN_TIMEOUT seconds, where set) and status=1 when that is not
# EXPECTED_EXIT.
conform_run() {
  local name=$1 expected=$2 t0=$SECONDS
  shift 2
  ${RUN_TIMEOUT:+timeout "$RUN_TIMEOUT"} build/bin/gemma4-conform conform --device cuda --report "$OUT/$name.json" "$@" \
    > "$OUT/$name.txt" 2>&1
  run_code=$?
  # shellcheck disable=SC2034 # status: the calling script's
  [ "$run_code" = "$expected" ] || status=1
  echo "$name: exit $run_code (expected $expected; $((SECONDS - t0)) s): $(tail -1 "$OUT/$name.txt")"
}

# bench_run NAME FILTER [GEMMA4_BENCH_FLAGS...]: one gemma4-bench run of the benchmarks matching
# FILTER, its JSON report in $OUT/NAME.json (every repetition; what bench-compare reads), its
# console in $OUT/NAME.txt; prints one line. Sets run_code as conform_run does.
bench_run() {
  local name=$1 filter=$2 t0=$SECONDS
  shift 2
  ${RUN_TIMEOUT:+timeout "$RUN_TIMEOUT"} build/bin/gemma4-bench --benchmark_filter="$filter" "$@" \
    --benchmark_out="$OUT/$name.json" --benchmark_out_format=json > "$OUT/$name.txt" 2>&1
  run_code=$?
  echo "$name: exit $run_code, $((SECONDS - t0)) s"
}

# stage PART: whether PART is in the comma-separated $STAGE the calling script defaulted.
stage() { [[ ",$STAGE," == *",$1,"* ]]; }

# gpu_python_env: for the scripts that run the Python package (gpu_python.sh, gpu_model.sh): $LOGS,
# tarred into $OUT/logs.tar.gz on exit (the device tool returns at most 8 files); the build when
# STAGE has it; the carried wheels of .whl/ installed into /tmp/site; PYTHONPATH.
gpu_python_env() {
  LOGS=$OUT/logs
  mkdir -p "$LOGS"
  trap 'tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"' EXIT
  if stage build; then
    python3 -c 'import sysconfig; print("python headers:", sysconfig.get_paths()["include"])'
    gpu_build || { cp "$OUT/build.log" "$LOGS/"; exit 1; }
    cp "$OUT/build.log" "$LOGS/"
  fi
  ls build/python/gemma4_conform/_core*.so || { echo "the Python module was not built"; exit 1; }
  if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
  fi
  export PYTHONPATH=build/python:tools/python/tests:tools/python/third_party:/tmp/site
}

# py_run NAME EXPECTED_EXIT COMMAND ARGS...: one `python3 -m gemma4_conform COMMAND --device cuda ARGS`
# run (conform or conform-model), its table in $LOGS/NAME.txt and report in $LOGS/NAME.json; prints
# one line; status=1 when its exit code is not EXPECTED_EXIT.
py_run() {
  local name=$1 expected=$2 command=$3 t0=$SECONDS code
  shift 3
  timeout "${RUN_TIMEOUT:-400}" python3 -m gemma4_conform "$command" --device cuda --report "$LOGS/$name.json" "$@" \
    > "$LOGS/$name.txt" 2>&1
  code=$?
  # shellcheck disable=SC2034 # status: the calling script's
  [ "$code" = "$expected" ] || status=1
  echo "$name: exit $code (expected $expected; $((SECONDS - t0)) s): $(grep -E "^(PASS|FAIL): |error" "$LOGS/$name.txt" | tail -1)"
}

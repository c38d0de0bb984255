#!/usr/bin/env bash
# Installs what is missing (idempotent), configures and builds into build/.
#
#   ci/build.sh                 Debian packages + a project-local .venv with PyPI torch 2.11.0
#   TORCH_PREFIX=DIR ci/build.sh  build against an existing LibTorch (its CMake prefix), e.g. the
#                               GPU host's: TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
#   GEMMA4_CUDA=auto            (default) the CUDA backend where nvcc and a GPU are found: the GPU CI
#                               (ci/gpu/test.sh) builds and runs it; a machine without a GPU could
#                               only compile it (PTX, about 150 of the CPU CI's 640 build CPU-seconds)
#   GEMMA4_CUDA=on              also without a GPU: nvcc compiles the kernels to PTX (a build check)
#   GEMMA4_CUDA=off             without the CUDA backend, even where a GPU is found
#   BUILD_TARGETS="T ..."       only these targets (e.g. gemma4_conform_core: the Python module)
#   GEMMA4_UNITY=off            a new build directory without CMake's unity build (for editing: a
#                               changed file then recompiles alone, not with its batch of 8)
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."

TORCH_VERSION=2.11.0  # the GPU host's version; its PyPI wheel is built for CUDA 13.0, like our nvcc
H5PY_VERSION=3.16.0
TRANSFORMERS_VERSION=5.17.0  # golden check proven on transformers (golden/generators/check_transformers_candidates.py)
SAFETENSORS_VERSION=0.8.0
NUMPY_VERSION=2.4.6
PYTEST_VERSION=8.4.2               # the Python package's tests (tools/python/tests)
SCIKIT_BUILD_CORE_VERSION=0.11.6   # builds the Python package (pyproject.toml)
GGUF_VERSION=0.19.0                # gguf-py: GGUF files of quantized subjects (golden/generators/gguf_dequantized.py)
CUTLASS_VERSION=4.2.0.0            # nvidia-cutlass: the CuTe/CUTLASS headers of the Hopper kernels
BUILD_DIR=${BUILD_DIR:-build}
say() { echo "[build, ${SECONDS} s] $*"; }

# Each requirement: a Debian package and a probe that tells whether it is already there (by
# command or header, so a machine that has it from elsewhere, like the GPU host, is left alone).
install_debian_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v ninja >/dev/null || missing+=(ninja-build)
  command -v g++ >/dev/null || missing+=(g++)
  command -v git >/dev/null || missing+=(git)
  if [ -z "${TORCH_PREFIX:-}" ]; then
    command -v python3 >/dev/null || missing+=(python3)
    python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  fi
  [ -e /usr/include/hdf5/serial/hdf5.h ] || [ -e /usr/include/hdf5.h ] || missing+=(libhdf5-dev)
  [ -e /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  [ -e /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  [ -e /usr/include/benchmark/benchmark.h ] || missing+=(libbenchmark-dev)
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Chromium, in which the scoreboard's page is tested (tools/python/tests/test_scoreboard.py): Debian's
# package where apt-get reaches it; elsewhere (the GPU host: Ubuntu without a network) a warning,
# and that test fails under CI=true and is skipped otherwise.
install_chromium() {
  command -v chromium >/dev/null && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null 2>&1 ||
    say "chromium could not be installed: the scoreboard page's browser test will not run here"
}

# pip install into .venv, up to three attempts a minute apart (a PyPI hiccup on the CI machine
# otherwise fails the whole run), without pip's wheel cache (torch's 3 GB would be kept twice).
pip_install() {
  local attempt
  for attempt in 1 2 3; do
    .venv/bin/python -m pip install -q --no-cache-dir --retries 10 --timeout 60 "$@" >&2 && return 0
    [ $attempt -lt 3 ] && { say "pip install $* failed (attempt $attempt of 3); retrying in 60 s" >&2; sleep 60; }
  done
  return 1
}

# Prints the LibTorch CMake prefix on stdout.
torch_prefix() {
  if [ -n "${TORCH_PREFIX:-}" ]; then
    echo "$TORCH_PREFIX"
    return
  fi
  if [ ! -x .venv/bin/python ]; then
    say "creating .venv" >&2
    python3 -m venv .venv >&2
  fi
  if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
    say "installing torch==$TORCH_VERSION from PyPI into .venv (about 3 GB with its CUDA libraries)" >&2
    # No fallback to another LibTorch: Debian's libtorch-dev is 1.13, which lacks APIs the suite
    # calls (at::rms_norm, at::scaled_dot_product_attention), so building on it only buried the
    # real cause under compile errors. Without pip's cache (3 GB less on disk) and with retries.
    if ! pip_install "torch==$TORCH_VERSION"; then
      say "torch==$TORCH_VERSION could not be installed from PyPI (pip's error above; free disk below)." >&2
      say "Set TORCH_PREFIX to an existing LibTorch >= 2.11 to build without it." >&2
      df -h . >&2
      exit 1
    fi
  fi
  # h5py and NumPy: the golden files' cross-read check (golden/generators/golden_h5py_check.py, in CTest).
  if ! .venv/bin/python -c 'import h5py, numpy' 2>/dev/null; then
    say "installing h5py==$H5PY_VERSION numpy==$NUMPY_VERSION from PyPI into .venv" >&2
    pip_install "h5py==$H5PY_VERSION" "numpy==$NUMPY_VERSION" || exit 1
  fi
  # transformers: `golden check` judged on candidates transformers itself computes (CTest
  # golden_check_transformers); the version that wrote golden/transformers/.
  if ! .venv/bin/python -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" 2>/dev/null; then
    say "installing transformers==$TRANSFORMERS_VERSION safetensors==$SAFETENSORS_VERSION from PyPI into .venv" >&2
    pip_install "transformers==$TRANSFORMERS_VERSION" "safetensors==$SAFETENSORS_VERSION" || exit 1
  fi
  # pytest and scikit-build-core: the Python package gemma4_conform, its build and its tests.
  if ! .venv/bin/python -c "import pytest, scikit_build_core" 2>/dev/null; then
    say "installing pytest==$PYTEST_VERSION scikit-build-core==$SCIKIT_BUILD_CORE_VERSION from PyPI into .venv" >&2
    pip_install "pytest==$PYTEST_VERSION" "scikit-build-core==$SCIKIT_BUILD_CORE_VERSION" || exit 1
  fi
  # gguf: reads and dequantizes the GGUF files quantized implementations load (llama.cpp's gguf-py).
  if ! .venv/bin/python -c "import gguf, importlib.metadata as m, sys; sys.exit(m.version('gguf') != '$GGUF_VERSION')" 2>/dev/null; then
    say "installing gguf==$GGUF_VERSION from PyPI into .venv" >&2
    pip_install "gguf==$GGUF_VERSION" || exit 1
  fi
  .venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)'
}

# The Python package into .venv, built by scikit-build-core in the build directory just built (so
# only the packaging is new) against .venv's torch. Not with TORCH_PREFIX: that LibTorch's Python
# is not ours to install into; use PYTHONPATH=$BUILD_DIR/python there.
# --config-settings, not its short form -C: pip 23.0 (Debian 12's, in a venv of /usr/bin/python3)
# has only the long one ("no such option: -C").
install_python_package() {
  [ -n "${TORCH_PREFIX:-}" ] && return 0
  say "installing the Python package gemma4_conform into .venv"
  .venv/bin/python -m pip install -q --no-build-isolation --no-deps --config-settings="build-dir=$BUILD_DIR" . \
    > "$BUILD_DIR/pip-install.log" 2>&1 || { tail -30 "$BUILD_DIR/pip-install.log"; return 1; }
}

# nvcc builds the fused CUDA backend (impl/cuda/) where a GPU will run it (GEMMA4_CUDA=auto), or
# wherever nvcc is (on: without a GPU, PTX only, so that a CUDA build break shows on a CPU machine);
# once asked for, a failure to build that backend is an error.
cuda_options() {
  local mode=${GEMMA4_CUDA:-auto} gpu=false
  nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu=true
  if [ "$mode" = off ] || { [ "$mode" = auto ] && ! $gpu; }; then
    [ "$mode" = auto ] && say "no GPU: the CUDA backend is not built (GEMMA4_CUDA=on compiles it anyway)" >&2
    echo "-DGEMMA4_BUILD_CUDA_BACKEND=OFF -DGEMMA4_REQUIRE_CUDA=OFF"
    return
  fi
  local nvcc
  nvcc=$(command -v nvcc || true)
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -n "$nvcc" ]; then
    local include
    include=$(cutlass_include) || return 1
    # Without a GPU here nothing runs the kernels: PTX only, no ptxas (GEMMA4_CUDA_PTX_ONLY).
    local ptx_only=ON
    $gpu && ptx_only=OFF
    echo "-DCMAKE_CUDA_COMPILER=$nvcc -DGEMMA4_REQUIRE_CUDA=ON -DGEMMA4_BUILD_CUDA_BACKEND=ON -DGEMMA4_CUDA_PTX_ONLY=$ptx_only -DCUTLASS_INCLUDE_DIR=$include"
  else
    say "no nvcc: the CUDA backend is not built" >&2
  fi
}

# The CuTe/CUTLASS headers (header-only; the Hopper kernels): $CUTLASS_INCLUDE_DIR where set (the
# GPU host, ci/gpu/common.sh), else the nvidia-cutlass wheel in .venv, installed without its Python
# dependencies (only the headers it carries are used).
cutlass_include() {
  if [ -n "${CUTLASS_INCLUDE_DIR:-}" ]; then
    echo "$CUTLASS_INCLUDE_DIR"
    return
  fi
  local python=.venv/bin/python
  [ -x "$python" ] || { say "set CUTLASS_INCLUDE_DIR (no .venv to install nvidia-cutlass into)" >&2; return 1; }
  if ! $python -c "import importlib.metadata as m, sys; sys.exit(m.version('nvidia-cutlass') != '$CUTLASS_VERSION')" 2>/dev/null; then
    say "installing nvidia-cutlass==$CUTLASS_VERSION (headers only, --no-deps) from PyPI into .venv" >&2
    if ! $python -m pip install -q --no-deps "nvidia-cutlass==$CUTLASS_VERSION" >&2; then
      say "nvidia-cutlass==$CUTLASS_VERSION could not be installed into .venv (PyPI unreachable?): set" \
        "CUTLASS_INCLUDE_DIR to CUTLASS's include directory, or GEMMA4_CUDA=off to build without the CUDA backend" >&2
      return 1
    fi
  fi
  $python -c "import importlib.util, os, sys
spec = importlib.util.find_spec('cutlass_library')
if spec is None or not spec.submodule_search_locations:
    sys.exit('nvidia-cutlass is installed in .venv but has no cutlass_library package: set CUTLASS_INCLUDE_DIR')
print(os.path.join(list(spec.submodule_search_locations)[0], 'source', 'include'))"
}

install_debian_packages
install_chromium
prefix=$(torch_prefix)
say "LibTorch CMake prefix: $prefix"
options=$(cuda_options) || exit 1
# A new build directory compiles each target's sources in batches of 8 (CMake's unity build): the
# files of a batch share one load of the 470 MB precompiled header, which was two of the three
# CPU-seconds a typical file took (gemma4_impl's 14 files: 50 CPU-seconds one by one, 17 in two
# batches). Every file must therefore compile beside the others of its target: no two same-named
# helpers in anonymous namespaces, no using-declaration that changes what another file's name means.
unity="-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8"
[ "${GEMMA4_UNITY:-on}" = off ] && unity="-DCMAKE_UNITY_BUILD=OFF"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" $options $unity >/dev/null
elif [ -n "$options" ]; then
  # an existing build directory gets today's CUDA options too (a checkout that predates the
  # CUTLASS headers has none in its cache)
  # shellcheck disable=SC2086
  cmake -B "$BUILD_DIR" $options >/dev/null
fi
if [ -n "${BUILD_TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target $BUILD_TARGETS
  say "built $BUILD_TARGETS"
  exit 0
fi
# One job more than cores, as ctest -j (ci/test.sh): at -j 2 the 2-core CI machine's ninja used
# about 1.6 cores (796 CPU-seconds in 484 s; its jobs waited on 470 MB precompiled headers and
# nvcc's stages); at -j 3 ninja took 439 s instead of 471-484 s.
cmake --build "$BUILD_DIR" -j "$(($(nproc) + 1))"
say "built $BUILD_DIR/bin/gemma4-conform"
install_python_package

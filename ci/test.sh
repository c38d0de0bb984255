#!/usr/bin/env bash
# Setup + build (ci/build.sh), then the tests through CTest. This is the README's test command and
# what .ci/run calls (the CPU CI; the GPU CI is ci/gpu.sh).
#
#   ci/test.sh          the per-commit CI: every CTest test but those labelled `extended`
#   ci/test.sh --all    every test: also the extended ones (the faulty backends' bf16 calibration,
#                       llama.cpp judged on its own Q8_0 file, after building llama.cpp's pinned
#                       environment); the GPU test stage's ctest step runs them too (there
#                       quantized_llama_cpp skips unless llama.cpp's pinned environment is built)
#
# `extended` holds what would push the per-commit CI on the 2-core CI machine past its 15 minutes
# and is checked elsewhere too (each test's CMakeLists comment says where).
set -euo pipefail
all=0
case "${1:-}" in
  -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
  --all) all=1 ;;
  "") ;;
  *) echo "ci/test.sh: unknown option '$1' (ci/test.sh [--all], --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
ci/build.sh
labels=(-LE extended)
if [ $all -eq 1 ]; then
  # llama.cpp's pinned environment (cached in .cache/pinned; about 4 minutes to build on 2 cores),
  # for CTest quantized_llama_cpp, which must not skip here.
  impl/third_party/pinned_envs.sh llama-cpp
  export GEMMA4_REQUIRE_LLAMA_CPP=1
  labels=()
fi
# One test more than cores: several tests spend seconds waiting (a hang or a dead rank waited out to
# its timeout, child processes starting), and on the 2-core CI machine -j 2 left about 9% of the
# CPU idle.
# glibc malloc keeps freed memory for reuse instead of returning every large block to the kernel
# (by default a block over 128 KiB to 32 MiB is an mmap of its own, zeroed page by page on each
# touch and unmapped when freed): the real-size tensors were faulted in anew on every step, a third
# of CTest's CPU time in the kernel (real_size_bf16: 47 of its 102 CPU-seconds, 8 with this). The
# tests compute the same (memory checks count bytes in the suite's tracking allocator, not the
# process's RSS); peaks grow (real_size_bf16: 6.5 -> 8.9 GB), hence real_size and real_size_bf16
# never run side by side (RESOURCE_LOCK, tools/CMakeLists.txt).
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=1073741824
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(($(nproc) + 1))" "${labels[@]}"

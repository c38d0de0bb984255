#!/usr/bin/env bash
# Setup + build (ci/build.sh), then every test through CTest. This is the README's test command
# and what .ci/run calls (the CPU CI; the GPU CI is ci/gpu.sh).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
ci/build.sh
# llama.cpp's pinned environment (cached in .cache/pinned; about 2.5 minutes to build on 2 cores): CI
# judges one quantized subject, llama.cpp on a Q8_0 GGUF (CTest quantized_llama_cpp), and must not
# skip it.
impl/third_party/pinned_envs.sh llama-cpp
export GEMMA4_REQUIRE_LLAMA_CPP=1
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
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(($(nproc) + 1))"

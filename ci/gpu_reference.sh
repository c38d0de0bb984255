#!/usr/bin/env bash
# On the GPU host: build against its CUDA LibTorch, run every CTest test (the CUDA variants run
# there instead of skipping), then compare one decoder layer of each released geometry with
# transformers (tools/gpu_compare_transformers.sh). Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh

gpu_build || exit 1
ctest --test-dir build --output-on-failure -j 8 > "$OUT/ctest.log" 2>&1
ctest_status=$?
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest.log" | tail -15
# Evidence that the CUDA variants ran rather than skipped.
build/bin/test_reference --gtest_filter='*cuda*:*Cuda*:Checkpoint.RecomputeThread' 2>&1 | tee "$OUT/cuda_tests.log" |
  grep -E "recompute on|PASSED|FAILED|SKIPPED" | tail -8
CONFIGS=reference/configs tools/gpu_compare_transformers.sh
compare_status=$?
echo "ctest exit $ctest_status, comparison exit $compare_status"
exit $((ctest_status || compare_status))

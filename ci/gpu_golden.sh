#!/usr/bin/env bash
# On the GPU host: the golden-tensor checks that need a GPU (issue "Golden tensors").
#   STAGE=build  build against the host's CUDA LibTorch, run CTest (the CUDA variants of the
#                transformers cases run there), and verify every committed golden file on CUDA
#                (files made on a CPU, recomputed on the GPU).
#   STAGE=real   for each real-geometry case in CASES (default: all of `golden list` under real/):
#                generate it in bf16 on CUDA, verify it on CUDA, read it from h5py, delete it.
# Logs go to $OUT. shared/ must be copied into the checkout (see ci/gpu_reference.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
CLI=build/bin/gemma4-conform

case ${STAGE:-build} in
build)
  gpu_build || exit 1
  ctest --test-dir build --output-on-failure -j 8 > "$OUT/ctest.log" 2>&1
  ctest_status=$?
  grep -E "tests passed|tests failed|\(Failed\)" "$OUT/ctest.log" | tail -15
  grep -c "_cuda .*Passed" "$OUT/ctest.log" | sed 's/^/CUDA transformers-case runs passed: /'
  build/bin/test_golden --gtest_filter='*cuda*' 2>&1 | grep -E "worst error" | tee "$OUT/cuda_rule.log"
  $CLI golden verify --device cuda golden/reference/*/*.h5 golden/transformers/*/golden.*.h5 > "$OUT/verify_committed_cuda.log"
  verify_status=$?
  grep -E "^(PASS|FAIL)|golden verify:" "$OUT/verify_committed_cuda.log" | tail -3
  echo "ctest exit $ctest_status, verify exit $verify_status"
  exit $((ctest_status || verify_status))
  ;;
real)
  CASES=${CASES:-$($CLI golden list | grep '^real/')}
  dir=$(mktemp -d /tmp/gemma4_real_XXXXXX)
  status=0
  for name in $CASES; do
    file=$dir/$name.bf16.h5
    start=$(date +%s)
    $CLI golden generate --case "$name" --dtype bf16 --device cuda --out "$dir" > "$OUT/${name//\//_}.generate.log" 2>&1 ||
      { status=1; cat "$OUT/${name//\//_}.generate.log"; continue; }
    generated=$(date +%s)
    $CLI golden verify --device cuda "$file" > "$OUT/${name//\//_}.verify.log" 2>&1 || status=1
    verified=$(date +%s)
    $CLI golden show "$file" | sed -n '2,12p' | grep -E "generator|device|gpu_name|cuda_version|torch_version" | tr -s ' ' | paste -sd';'
    size=$(stat -c %s "$file")
    echo "$name: $(head -1 "$OUT/${name//\//_}.verify.log" | cut -c1-4) ($((size / 1000000)) MB," \
      "generate $((generated - start)) s, verify $((verified - generated)) s)"
    # The h5py cross-read on the files under 2 GB (it reads every dataset into memory).
    if [ "$size" -lt 2000000000 ] && python3 -c 'import h5py, numpy' 2>/dev/null; then
      python3 tools/golden_h5py_check.py "$file" > "$OUT/${name//\//_}.h5py.log" 2>&1 || { status=1; cat "$OUT/${name//\//_}.h5py.log"; }
    fi
    rm -f "$file"
  done
  exit $status
  ;;
esac

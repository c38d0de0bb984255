#!/usr/bin/env bash
# On the GPU host (issue "Trustworthy verdicts"): the calibration of the tolerance policy where the
# CI machine cannot run it. From the repository root, with shared/ copied into the checkout; logs,
# the calibration JSON and a tarball of every run's report go to $OUT. Per STAGE (comma-separated):
#   build   ci/build.sh against the host's CUDA LibTorch (incremental when build/ is there);
#   cpu     gemma4-conform calibrate on the host's CPU at every oneDNN ISA level it offers
#           (AVX512-FP16 and AMX included where present), every dtype;
#   cuda    gemma4-conform calibrate --device cuda in $DTYPES (default bf16,f16,f32): the cuda
#           backend, the reference and every variant must pass, every faulty backend fail where it says;
#   verify  every committed golden verified on CUDA (golden verify --device cuda).
# $JOBS: calibrate runs at a time (default 8 on the CPU, 4 on the GPU). Exit 1 when a stage failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu_env.sh
STAGE=${STAGE:-build,cpu,cuda,verify}
CLI=build/bin/gemma4-conform
status=0
has() { [[ ",$STAGE," == *",$1,"* ]]; }

if has build; then gpu_build || exit 1; fi

# calibrate_stage NAME ARGS...: one calibrate run; its console in $OUT/NAME.txt (last lines shown),
# its JSON in $OUT/NAME.json, every run's conform report in $OUT/NAME-reports.tgz.
calibrate_stage() {
  local name=$1 t0=$SECONDS work=/tmp/calibrate-$1
  shift
  rm -rf "$work"
  $CLI calibrate --work-dir "$work" --report "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1 || status=1
  tar czf "$OUT/$name-reports.tgz" -C "$work" . 2>/dev/null
  grep -E "WRONG|^  (f32|bf16|f16) |^PASS|^FAIL" "$OUT/$name.txt" | tail -40
  echo "$name: $((SECONDS - t0)) s"
}

if has cpu; then
  lscpu | grep -E "Model name|Flags" | cut -c1-300 > "$OUT/cpu-model.txt"
  calibrate_stage cpu --isa auto --jobs "${JOBS:-8}"
fi
if has cuda; then
  calibrate_stage "cuda-$(gpu_key)" --device cuda --dtype "${DTYPES:-bf16,f16,f32}" --jobs "${JOBS:-4}"
fi
if has verify; then
  $CLI golden verify --device cuda --quiet golden/reference/op/*.h5 golden/reference/model/*.h5 \
    golden/transformers/*/golden.*.h5 > "$OUT/verify-cuda.txt" 2>&1 || status=1
  grep -E "^FAIL|golden verify:" "$OUT/verify-cuda.txt" | tail -20
fi
exit $status

#!/usr/bin/env bash
# Compare the C++ reference with transformers at real Gemma-4 layer geometry, on a GPU host.
#
# Run from the repo root once the C++ is built at build/bin/gemma4-conform. For each geometry:
#   1. golden/generators/hf_cases.py generate-geometry writes the case (random weights, fp32 and bf16
#      expected outputs computed by transformers on the GPU),
#   2. gemma4-conform forward runs our code on it in fp32 and in bf16,
#   3. golden/generators/compare_h5.py prints expected vs ours (fp32), and expected_bf16 vs ours_bf16 with
#      the fp32 expected as truth (the FlashAttention error-ratio rule).
# The comparisons report; they do not judge. The script fails only if a step fails to run.
#
# Environment (all optional):
#   PYTHON      interpreter with transformers 5.17, h5py, safetensors   (default: python3)
#   OUT         if set, everything is also written to $OUT/gpu_compare.log
#   CASES       where cases are written                                (default: /tmp/g4cases)
#   GEOMETRIES  which geometries                                       (default: "31b 26b-a4b e2b")
#   SEQ         sequence length                                        (default: 2048)
#   DEVICE      device for transformers and for gemma4-conform         (default: cuda)
#   CONFIGS     released text configs (hf_cases.py default: <repo>/reference/configs)
#   KEEP_CASES  1 keeps each case directory; by default it is removed after its comparison,
#               because one 26B-A4B case with its outputs takes tens of GB of disk
set -uo pipefail

PYTHON=${PYTHON:-python3}
CASES=${CASES:-/tmp/g4cases}
GEOMETRIES=${GEOMETRIES:-"31b 26b-a4b e2b"}
SEQ=${SEQ:-2048}
DEVICE=${DEVICE:-cuda}
KEEP_CASES=${KEEP_CASES:-0}
CONFORM=build/bin/gemma4-conform

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/gpu_compare.log") 2>&1
fi

failures=0

# Runs a command, echoing it first; records a failure instead of stopping, so that one broken
# geometry does not hide the results of the others.
step() {
  echo "+ $*"
  if ! "$@"; then
    echo "!! step failed (exit $?): $*"
    failures=$((failures + 1))
    return 1
  fi
}

if [[ ! -x "$CONFORM" ]]; then
  echo "error: $CONFORM not found; build the C++ first" >&2
  exit 2
fi

echo "== gpu_compare_transformers: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
"$PYTHON" -c 'import torch, transformers; print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

configs_arg=()
[[ -n "${CONFIGS:-}" ]] && configs_arg=(--configs "$CONFIGS")

for geometry in $GEOMETRIES; do
  case_dir="$CASES/geometry_$geometry"
  echo
  echo "==================== $geometry (S=$SEQ, $DEVICE) ===================="
  SECONDS=0
  step "$PYTHON" golden/generators/hf_cases.py generate-geometry --geometry "$geometry" --seq "$SEQ" \
    --out "$CASES" --device "$DEVICE" "${configs_arg[@]}" || continue
  echo "generated in ${SECONDS}s"

  for dtype in f32 bf16; do
    SECONDS=0
    step "$CONFORM" forward --model "$case_dir" --inputs "$case_dir/inputs.safetensors" \
      --out "$case_dir/ours_$dtype.h5" --dtype "$dtype" --device "$DEVICE" &&
      echo "gemma4-conform $dtype in ${SECONDS}s"
  done

  echo
  echo "---- $geometry fp32: transformers (expected.h5) vs ours (ours_f32.h5)"
  [[ -f "$case_dir/ours_f32.h5" ]] &&
    step "$PYTHON" golden/generators/compare_h5.py "$case_dir/expected.h5" "$case_dir/ours_f32.h5"
  echo
  echo "---- $geometry bf16: transformers (expected_bf16.h5) vs ours (ours_bf16.h5), truth = fp32 transformers"
  [[ -f "$case_dir/ours_bf16.h5" ]] &&
    step "$PYTHON" golden/generators/compare_h5.py "$case_dir/expected_bf16.h5" "$case_dir/ours_bf16.h5" \
      --truth "$case_dir/expected.h5"

  if [[ "$KEEP_CASES" != 1 ]]; then
    rm -rf "$case_dir"
  fi
done

echo
echo "== done: $failures failed step(s)"
[[ $failures -eq 0 ]]

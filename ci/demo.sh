#!/usr/bin/env bash
# Setup + build (ci/build.sh), then the main job on a bundled tiny checkpoint: the reference's
# forward and backward on an E2B-like model (PLE, KV sharing, double-wide MLP), written to HDF5.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/build.sh
case_dir=golden/transformers/e2b_like
out=${1:-${TMPDIR:-/tmp}/gemma4-forward.h5}
"${BUILD_DIR:-build}"/bin/gemma4-conform forward --model "$case_dir" --inputs "$case_dir/inputs.safetensors" --out "$out" --checkpoint

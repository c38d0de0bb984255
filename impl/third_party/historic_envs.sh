#!/usr/bin/env bash
# The historic environments of conform-model's proof (README, "Judging a whole model"): real releases
# with real bugs, each pinned in its own directory (pip install --target --no-deps, on top of the
# running Python's torch), cached: a directory with .complete is kept.
#
#   impl/third_party/historic_envs.sh [DIR]        # default .cache/historic; PyPI
#   HISTORIC_WHEELS=.whl/historic impl/third_party/historic_envs.sh   # offline (GPU host)
#   PYTHON=python3 ...                                       # another interpreter (default .venv's)
#
# transformers-5.5.1  the use_cache=False bug on KV-shared models (fixed in 5.5.2)
# transformers-5.5.2  its fix, the control
# axolotl-0.17.0      axolotl's Gemma-4 fused-attention patch with the transformers it pins (5.9.0),
#                     the Liger it pins (0.7.0) and what its import needs (accelerate 1.13.0, psutil)
# tokenizers 0.22.2: transformers 5.5 and 5.9 refuse at import any tokenizers above 0.23.0.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-.cache/historic}
PYTHON=${PYTHON:-.venv/bin/python}
declare -A ENVS=(
  [transformers-5.5.1]="transformers==5.5.1 tokenizers==0.22.2"
  [transformers-5.5.2]="transformers==5.5.2 tokenizers==0.22.2"
  [axolotl-0.17.0]="axolotl==0.17.0 transformers==5.9.0 tokenizers==0.22.2 liger-kernel==0.7.0 accelerate==1.13.0 psutil==7.2.2"
)
source_args=()
[ -n "${HISTORIC_WHEELS:-}" ] && source_args=(--no-index --find-links "$HISTORIC_WHEELS")
for name in "${!ENVS[@]}"; do
  if [ -f "$DIR/$name/.complete" ]; then echo "[historic] $DIR/$name: cached"; continue; fi
  rm -rf "${DIR:?}/$name"
  echo "[historic] $DIR/$name: ${ENVS[$name]}"
  # shellcheck disable=SC2086
  "$PYTHON" -m pip install -q --no-deps --no-compile --target "$DIR/$name" "${source_args[@]}" ${ENVS[$name]}
  touch "$DIR/$name/.complete"
done

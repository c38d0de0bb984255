# Sourced (from the repository root) by the GPU-host scripts: where their logs go ($OUT), the
# shared data copied into the checkout, and the host's CUDA LibTorch for ci/build.sh.
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export GEMMA4_SHARED_DIR=${GEMMA4_SHARED_DIR:-$PWD/shared}
export TORCH_PREFIX=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}

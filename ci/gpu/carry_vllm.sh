#!/usr/bin/env bash
# vLLM for the offline GPU host, in parts that fit a call's carry (64 MiB with the working tree).
#
#   ci/gpu/carry_vllm.sh            # here (with network): .whl/vllm-part1 .. -partN, one file each
#   ci/gpu/carry_vllm.sh --join     # there, after every part was carried: .whl/vllm (what
#                                   # PINNED_WHEELS=.whl/vllm impl/third_party/pinned_envs.sh vllm reads)
#
# What travels: vLLM 0.25.0's wheel (the newest release pinning the host's torch 2.11.0, CUDA 13) less
# what the scoreboard's Gemma-4 runs never load: the FlashAttention 2 library (190 MB; FlashAttention 3,
# which the adapter runs on the H200, stays), the Rust front end (vllm-rs) and DeepGEMM / SM100 FMHA
# sources, as an xz tarball of the unpacked wheel; and the wheels of the Python packages vLLM imports that the host lacks
# and the transformers release it reads Gemma-4 configs with (impl/third_party/pinned_envs.sh lists
# them), side by side in one folder. About 150 MB: six parts of 26 MiB (a call carries the 38.5 MB working
# tree too).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART_MIB=${PART_MIB:-26}
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
if [ "${1:-}" = --join ]; then
  rm -rf .whl/vllm && mkdir -p .whl/vllm
  cat .whl/vllm-part*/part | tar -x -C .whl/vllm
  echo "[carry_vllm] .whl/vllm: $(ls .whl/vllm | wc -l) files, $(du -sh .whl/vllm | cut -f1)"
  exit 0
fi
PYTHON=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platform=(--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
          --platform manylinux_2_31_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux1_x86_64)
mkdir -p "$work/bundle" "$work/wheel"
# shellcheck disable=SC2046
"$PYTHON" -m pip download -q --no-deps "${platform[@]}" -d "$work/bundle" \
  $(bash impl/third_party/pinned_envs.sh --list vllm | tr ' ' '\n' | grep -v '^vllm==') \
  $(bash impl/third_party/pinned_envs.sh --list vllm-transformers-5.13.1)
"$PYTHON" -m pip download -q --no-deps "${platform[@]}" -d "$work/wheel" vllm==0.25.0
(cd "$work/wheel" && unzip -q ./*.whl && rm ./*.whl &&
 tar -cf - --exclude=vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so --exclude=vllm/vllm-rs --exclude=vllm/third_party/deep_gemm \
     --exclude=vllm/third_party/fmha_sm100 vllm vllm-0.25.0.dist-info | xz -T0 -6 > "$work/bundle/vllm-0.25.0-trimmed.tar.xz")
rm -rf .whl/vllm-part*
tar -cf - -C "$work/bundle" . | split -b "${PART_MIB}M" -d -a 1 - "$work/part."
i=1
for part in "$work"/part.*; do
  mkdir -p ".whl/vllm-part$i" && mv "$part" ".whl/vllm-part$i/part"
  i=$((i + 1))
done
echo "[carry_vllm] $((i - 1)) parts of at most $PART_MIB MiB: carry .whl/vllm-part1 .. .whl/vllm-part$((i - 1)), one a call, then --join there"

#!/usr/bin/env bash
# A pinned environment's wheels for the offline GPU host, in parts that fit a call's carry (64 MiB with
# the working tree, about 38.5 MB of it).
#
#   ci/gpu/carry_pinned.sh NAME           # here (with network): .whl/NAME-part1 .. -partN, one file each
#   ci/gpu/carry_pinned.sh --join NAME    # there, after every part was carried: .whl/NAME (what
#                                         # PINNED_WHEELS=.whl/NAME impl/third_party/pinned_envs.sh ENV... reads)
#
# NAME is a bundle: the pinned environments of impl/third_party/pinned_envs.sh whose wheels travel together
# (BUNDLES; any other NAME is that one environment), for Python 3.12 on manylinux x86_64, the host's.
# A wheel in TRIM travels unpacked, less what the scoreboard's Gemma-4 runs never load, as an xz tarball
# DIST-VERSION-trimmed.tar.xz beside the wheels; pinned_envs.sh unpacks it in place of installing that pin.
#   vllm     vLLM 0.25.0 and the transformers it reads Gemma-4 configs with (vllm, vllm-transformers-5.13.1):
#            about 150 MB, six parts. vLLM's wheel less the FlashAttention 2 library (190 MB; FlashAttention 3,
#            which the adapter runs on the H200, stays), the Rust front end (vllm-rs) and the DeepGEMM / SM100
#            FMHA sources.
#   unsloth  unsloth 2026.10.9 and what importing it and FastModel.from_pretrained need that the host lacks:
#            about 13 MB, one part. unsloth's wheel less Unsloth Studio (studio/, its web UI: 82 MB unpacked,
#            which `import unsloth` never imports); bitsandbytes' less its CUDA 11/12, ROCm and XPU libraries
#            (the host's torch is CUDA 13.0: bitsandbytes loads libbitsandbytes_cuda130.so; cuda132 and the
#            CPU library stay).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART_MIB=${PART_MIB:-26}
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ] || [ $# -eq 0 ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
declare -A BUNDLES=([vllm]="vllm vllm-transformers-5.13.1")
declare -A TRIM=(
  [vllm==0.25.0]="vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/third_party/deep_gemm vllm/third_party/fmha_sm100"
  [unsloth==2026.10.9]="studio"
  [bitsandbytes==0.50.2]="bitsandbytes/libbitsandbytes_cuda11* bitsandbytes/libbitsandbytes_cuda12* bitsandbytes/libbitsandbytes_rocm* bitsandbytes/libbitsandbytes_xpu*"
)

if [ "$1" = --join ]; then
  name=${2:?--join NAME}
  [ -d ".whl/$name-part1" ] || { echo "[carry_pinned] no .whl/$name-part1: carry the parts first" >&2; exit 2; }
  rm -rf ".whl/$name" && mkdir -p ".whl/$name"
  parts=()  # in order: part1, part2, ..., part10 (a glob would sort part10 before part2)
  while [ -f ".whl/$name-part$((${#parts[@]} + 1))/part" ]; do parts+=(".whl/$name-part$((${#parts[@]} + 1))/part"); done
  cat "${parts[@]}" | tar -x -C ".whl/$name"
  echo "[carry_pinned] .whl/$name from ${#parts[@]} part(s): $(find ".whl/$name" -type f | wc -l) files, $(du -sh ".whl/$name" | cut -f1)"
  exit 0
fi

name=$1
PYTHON=${PYTHON:-.venv/bin/python}
pins=()
for env in ${BUNDLES[$name]:-$name}; do
  # shellcheck disable=SC2207
  pins+=($(bash impl/third_party/pinned_envs.sh --list "$env"))
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platform=(--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
          --platform manylinux_2_31_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux1_x86_64)
mkdir -p "$work/bundle"
whole=()
for pin in "${pins[@]}"; do
  if [ -z "${TRIM[$pin]+set}" ]; then whole+=("$pin"); continue; fi
  # The trimmed tarball: the unpacked wheel's top-level entries, less TRIM's paths (tar patterns).
  rm -rf "$work/wheel" && mkdir -p "$work/wheel"
  "$PYTHON" -m pip download -q --no-deps "${platform[@]}" -d "$work/wheel" "$pin"
  read -r -a trim_paths <<< "${TRIM[$pin]}"  # (read: the patterns stay unexpanded)
  excludes=()
  for path in "${trim_paths[@]}"; do excludes+=("--exclude=$path"); done
  (cd "$work/wheel" && unzip -q ./*.whl && rm ./*.whl &&
   tar -cf - "${excludes[@]}" -- * | xz -T0 -6 > "$work/bundle/${pin%%==*}-${pin#*==}-trimmed.tar.xz")
done
"$PYTHON" -m pip download -q --no-deps "${platform[@]}" -d "$work/bundle" "${whole[@]}"
echo "[carry_pinned] $name: $(du -cb "$work/bundle"/* | tail -1 | cut -f1) bytes in these files:"
(cd "$work/bundle" && for f in *; do echo "  $(stat -c %s "$f")  $f"; done)
rm -rf ".whl/$name"-part*
tar -cf - -C "$work/bundle" . | split -b "${PART_MIB}M" -d -a 2 - "$work/part."
i=1
for part in "$work"/part.*; do
  mkdir -p ".whl/$name-part$i" && mv "$part" ".whl/$name-part$i/part"
  i=$((i + 1))
done
echo "[carry_pinned] $((i - 1)) part(s) of at most $PART_MIB MiB: carry .whl/$name-part1 .. .whl/$name-part$((i - 1)), one a call, then ci/gpu/carry_pinned.sh --join $name there"

#!/usr/bin/env bash
# vLLM for the offline GPU host, in parts: ci/gpu/carry_pinned.sh for the vllm bundle (vLLM 0.25.0, trimmed,
# and the transformers it reads Gemma-4 configs with; six parts of 26 MiB). Kept for the commands that name it.
#
#   ci/gpu/carry_vllm.sh            # here (with network): .whl/vllm-part1 .. -partN, one file each
#   ci/gpu/carry_vllm.sh --join     # there, after every part was carried: .whl/vllm (what
#                                   # PINNED_WHEELS=.whl/vllm impl/third_party/pinned_envs.sh vllm reads)
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
if [ "${1:-}" = --join ]; then exec "$(dirname "$0")/carry_pinned.sh" --join vllm; fi
exec "$(dirname "$0")/carry_pinned.sh" vllm

#!/usr/bin/env bash
# On the GPU host: the fused CUDA backend (issue "Fused CUDA backend for Hopper"). Builds against
# the host's CUDA LibTorch (ci/build.sh), then per STAGE (default: all):
#   conform  the whole conformance suite with --backend cuda --device cuda, in bf16 and fp16, plus
#            the reference on CUDA in bf16 as the same-run comparison;
#   bench    gemma4-bench for the issue's figures: sliding and global attention against every
#            SDPA backend, q/k norm + RoPE and GeGLU against the copy ceiling, the six-layer group
#            against the reference backend, and the ceilings (BENCH_FILTER overrides the selection).
# Tables, reports and JSON go to $OUT. shared/ must be copied into the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
STAGE=${STAGE:-all}
CLI=build/bin/gemma4-conform

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s)
ci/build.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

status=0
conform() {  # NAME ARGS...: one conform run; table in $OUT/NAME.txt, report in $OUT/NAME.json
  local name=$1
  shift
  local t0=$(date +%s)
  $CLI conform --device cuda --report "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1
  local code=$?
  [ "$code" = 0 ] || status=1
  echo "$name: exit $code ($(( $(date +%s) - t0 )) s): $(tail -1 "$OUT/$name.txt")"
}

if [ "$STAGE" = all ] || [ "$STAGE" = conform ]; then
  conform cuda-bf16 --backend cuda --dtype bf16
  conform cuda-f16 --backend cuda --dtype f16
  grep -h "FAIL\|fail " "$OUT"/cuda-bf16.txt "$OUT"/cuda-f16.txt | head -20
fi

if [ "$STAGE" = all ] || [ "$STAGE" = bench ]; then
  filter=${BENCH_FILTER:-'^(ceiling|sliding_attention|global_attention|qk_norm_rope|geglu|layer_group)/.*/cuda/31b/'}
  t0=$(date +%s)
  build/bin/gemma4-bench --benchmark_filter="$filter" --benchmark_out="$OUT/bench.json" \
    --benchmark_out_format=json ${BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1
  code=$?
  [ "$code" = 0 ] || status=1
  echo "bench: exit $code ($(( $(date +%s) - t0 )) s)"
  grep -E "_median|ERROR|not supported" "$OUT/bench.txt" | cut -c1-200 | head -80
fi
exit $status

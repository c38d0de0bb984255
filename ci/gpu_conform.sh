#!/usr/bin/env bash
# On the GPU host: the conformance suite on CUDA (issue "Pluggable backends and the conformance
# suite"). Builds against the host's CUDA LibTorch (ci/build.sh), then:
#   - the reference backend, every category, fp32 and bf16;
#   - every faulty-* backend, restricted to the category its bug belongs to;
#   - the example plugin through --backend-lib;
#   - memory flatness over 200 steps, including the real-geometry E2B layer stack.
# Reports (JSON) and tables go to $OUT. shared/ must be copied into the checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu_env.sh
CLI=build/bin/gemma4-conform

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
ci/build.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }

status=0
# run NAME EXPECTED_EXIT ARGS...: one conform run, its table in $OUT/NAME.txt, its report in $OUT/NAME.json.
run() {
  local name=$1 expected=$2
  shift 2
  local start=$(date +%s)
  $CLI conform --device cuda --report "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1
  local code=$?
  local verdict=ok
  [ "$code" = "$expected" ] || { verdict=UNEXPECTED; status=1; }
  echo "$name: exit $code (expected $expected, $verdict, $(( $(date +%s) - start )) s): $(tail -1 "$OUT/$name.txt")"
}

run reference-f32 0 --backend reference
run reference-bf16 0 --backend reference --dtype bf16
run example-plugin 0 --backend-lib build/lib/libgemma4_example_plugin.so
for pair in faulty-no-window:golden faulty-window-off-by-one:golden faulty-one-plus-w-norm:golden \
            faulty-head-dim-256-kernel:golden faulty-checkpoint-closure:memory_flatness \
            faulty-thread-local-kv:multithreaded_recompute faulty-process-wide-kv:multithreaded_recompute \
            faulty-detached-recompute:multithreaded_recompute faulty-kv-key-mismatch:key_conventions \
            faulty-norm-no-weight-grad:finite_grads faulty-nondeterministic-attention:determinism; do
  run "${pair%%:*}" 1 --backend "${pair%%:*}" --filter "^${pair##*:}/"
done
grep -h "recompute thread" "$OUT"/reference-f32.txt | head -4
grep -h "memory_flatness" "$OUT"/reference-f32.txt "$OUT"/reference-bf16.txt "$OUT"/faulty-checkpoint-closure.txt | head -8
exit $status

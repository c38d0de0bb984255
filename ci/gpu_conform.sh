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
gpu_build || exit 1
status=0
conform_run reference-f32 0 --backend reference
conform_run reference-bf16 0 --backend reference --dtype bf16
conform_run example-plugin 0 --backend-lib build/lib/libgemma4_example_plugin.so
for pair in faulty-no-window:golden faulty-window-off-by-one:golden faulty-one-plus-w-norm:golden \
            faulty-head-dim-256-kernel:golden faulty-checkpoint-closure:memory_flatness \
            faulty-thread-local-kv:multithreaded_recompute faulty-process-wide-kv:multithreaded_recompute \
            faulty-detached-recompute:multithreaded_recompute faulty-kv-key-mismatch:key_conventions \
            faulty-norm-no-weight-grad:finite_grads faulty-nondeterministic-attention:determinism; do
  conform_run "${pair%%:*}" 1 --backend "${pair%%:*}" --filter "^${pair##*:}/"
done
grep -h "recompute thread" "$OUT"/reference-f32.txt | head -4
grep -h "memory_flatness" "$OUT"/reference-f32.txt "$OUT"/reference-bf16.txt "$OUT"/faulty-checkpoint-closure.txt | head -8
exit $status

#!/usr/bin/env bash
# On a GPU host with NPROC GPUs (issue 18; default 2): conform-model --distributed
# (tools/python/gemma4_conform/model_distributed.py) with NCCL, one rank per GPU, FSDP2 per decoder
# layer with activation checkpointing, bf16, S = $SEQ (default 4096), $STEPS steps (default 200):
#   - transformers' Gemma4ForCausalLM (sdpa) on the E2B and 26B-A4B geometries at real width,
#     reduced to their first pattern of layers (E2B: 5 + 5 KV-shared, 26B-A4B: 6), must pass:
#     every step equal to the single-device run, live bytes flat on every rank;
#   - the closure-capture control (tools/python/tests/model_controls.py: checkpoint_closure) on E2B
#     must fail memory-flatness on every rank.
# One SGD step is compared with the single-device run by default ($EQUAL_STEPS): at real width every
# gradient, the embedding tables included, is gathered and judged on the CPU.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1), also for the
# processes torchrun starts. NPROC=1 runs the same on one GPU (the code path, not the sharding).
# STAGE (default build,run); reports and logs in $OUT/logs.tar.gz, one line per run printed.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${STAGE:-build,run}
source ci/gpu_env.sh
gpu_python_env
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
status=0
NPROC=${NPROC:-2}

distributed_run() {  # NAME EXPECTED_EXIT ARGS...
  local name=$1 expected=$2 t0=$SECONDS code
  shift 2
  timeout "${RUN_TIMEOUT:-540}" python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
    -m gemma4_conform conform-model --distributed --device cuda --dtype bf16 --seq "${SEQ:-4096}" \
    --steps "${STEPS:-200}" --equal-steps "${EQUAL_STEPS:-1}" --timeout 300 --report "$LOGS/$name.json" --work "$LOGS/$name.work" --verbose "$@" \
    > "$LOGS/$name.txt" 2>&1
  code=$?
  [ "$code" = "$expected" ] || status=1
  echo "$name: exit $code (expected $expected; $((SECONDS - t0)) s): $(grep -E "^(PASS|FAIL): " "$LOGS/$name.txt" | tail -1)"
  grep -E "^(FAIL|PASS) +distributed/memory" "$LOGS/$name.txt" | cut -c1-220
}

if stage run; then
  distributed_run e2b-sdpa 0 --factory transformers_models:sdpa --geometry e2b
  distributed_run 26b-a4b-sdpa 0 --factory transformers_models:sdpa --geometry 26b-a4b
  distributed_run e2b-closure-control 1 --factory model_controls:checkpoint_closure --geometry e2b
fi
exit $status

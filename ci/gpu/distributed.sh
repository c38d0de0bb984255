#!/usr/bin/env bash
# The GPU distributed stage: conform-model --distributed (tools/python/gemma4_conform/model_distributed.py)
# with NCCL on $NPROC GPUs (default 2), one rank per GPU. Skipped, with "skipped: needs 2 GPUs,
# found N", on a host with fewer. From any directory; results under --out.
#
#   ci/gpu/distributed.sh [--only STEP,...] [--out DIR] [--time-limit S] [--max-files N] [--help]
#   (the options: bash ci/gpu/common.sh --help; ci/gpu.sh runs this as its stage "distributed")
#
# Steps:
#   build  the Python module alone, without the CUDA backend (GEMMA4_CUDA=off
#          BUILD_TARGETS=gemma4_conform_core ci/build.sh, 61-75 s; build/ is reconfigured without the
#          CUDA backend); under ci/gpu.sh, after a stage that built everything, that build is reused;
#   runs   the runs of $RUNS (comma-separated), bf16 unless named -f32, FSDP2 per decoder layer with
#          activation checkpointing, S = $DIST_SEQ (default 4096), $DIST_STEPS flatness steps (default
#          200), $EQUAL_STEPS compared steps (default 1), at real width (the released geometries reduced
#          to their first pattern of layers, constructed weights: golden/FORMAT.md); RUN_TIMEOUT
#          default 300 s a run; then a table of every report's per-rank figures:
#     e2b        E2B, 5 + 5 KV-shared layers, transformers' Gemma4ForCausalLM (sdpa): must pass;
#     26b-a4b    26B-A4B, 6 MoE layers, transformers' default MoE experts (grouped_mm): must pass;
#     31b        31B, 5 sliding + 1 global (head dim 512): must pass.
#                The equality of these two runs at S = $EQUAL_SEQ_LARGE (default 2048): their fp32
#                single-device run holds 5.4B (4.3B) parameters and their gradients, 43 (34) GB, plus
#                one sequence's fp32 activations, of which the logits alone take 4 GB a copy at 4096:
#                no margin left on an 80 GB card. Memory flatness runs at $DIST_SEQ;
#     e2b-closure-control  the closure-capture control (impl/python/model_controls.py) on E2B,
#                memory-flatness only: must fail on every rank;
#     e2b-mixed-precision  fsdp2-mixed-precision (fp32 master weights, fp32 reduction), equality only: must pass;
#     e2b-f32, 26b-a4b-f32, 31b-f32  equality only, in fp32 (the strict rule: max-abs <= 1e-4 x max,
#                cosine >= 0.99999): must pass;
#     e2b-summed-gradients-f32  model_controls:sum_reduced_sharding, fp32 equality: must fail;
#     e2b-summed-gradients  the same in bf16: must fail (the constructed weights keep bf16 with fp32);
#     e2b-summed-gradients-factory  the same in bf16 on the factory's random initialisation (--weights
#                factory): passes, the blindness the constructed weights remove (README "Sharded
#                training": the single-device bf16 run's own error is as large as the gradients);
#     e2b-sdpa-equality, e2b-eager-equality  bf16 equality alone with sdpa and eager attention: must
#                pass (their notes: each single-device bf16 run's agreement with its fp32 run).
# The default RUNS (e2b, 26b-a4b, e2b-closure-control, e2b-f32, e2b-summed-gradients-f32) adds up to
# about 480 s with the build, from the walls measured run by run: build 75 s, e2b 98, 26b-a4b 168,
# e2b-closure-control 71 s on 2x H100; e2b-f32 38, e2b-summed-gradients-f32 35 s on 2x H200. The
# others: 31b 172, e2b-mixed-precision 54 s (H100); 26b-a4b-f32 72, 31b-f32 58, e2b-sdpa-equality and
# e2b-eager-equality 50 s each (H200); RUNS=all runs every one.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1), also for the
# processes torchrun starts. Exit 0 when every run passed or the stage was skipped, 1 otherwise.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
STEPS_DEFAULT=(build runs)
STEPS_OPTIONAL=()
stage_parse distributed "$@"
[ ${#EXTRA_ARGS[@]} -eq 0 ] || usage_error "unknown option '${EXTRA_ARGS[0]}'"
NPROC=${NPROC:-2}
ALL_RUNS=e2b,26b-a4b,31b,e2b-closure-control,e2b-mixed-precision,e2b-f32,e2b-summed-gradients-f32,e2b-summed-gradients,e2b-summed-gradients-factory,26b-a4b-f32,31b-f32,e2b-sdpa-equality,e2b-eager-equality
RUNS=${RUNS:-e2b,26b-a4b,e2b-closure-control,e2b-f32,e2b-summed-gradients-f32}
[ "$RUNS" = all ] && RUNS=$ALL_RUNS
for name in ${RUNS//,/ }; do
  [[ ",$ALL_RUNS," == *",$name,"* ]] || usage_error "RUNS: no run '$name' (runs: $ALL_RUNS)"
done
[[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || usage_error "NPROC: '$NPROC' is not a number of GPUs"
stage_start

found=$(gpu_count)
if [ "$found" -lt "$NPROC" ]; then
  skip_run distributed "needs $NPROC GPUs, found $found"
  stage_finish
fi

export GEMMA4_CUDA=off BUILD_TARGETS=gemma4_conform_core
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

step build && gpu_build

distributed_run() {  # NAME EXPECTED ARGS...
  local name=$1 expected=$2
  shift 2
  [[ ",$RUNS," == *",$name,"* ]] || return 0
  rm -f "$OUT/$name.json"  # the table below reads this run's report only
  RUN_TIMEOUT=${RUN_TIMEOUT:-300} detail_re='^(PASS|FAIL): ' run "$name" "$expected" "$OUT/$name.txt" \
    python3 -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
    -m gemma4_conform conform-model --distributed --device cuda --dtype bf16 --seq "${DIST_SEQ:-4096}" \
    --steps "${DIST_STEPS:-200}" --equal-steps "${EQUAL_STEPS:-1}" --timeout 240 --report "$OUT/$name.json" \
    --verbose "$@" || grep -E "Error|error|raised" "$OUT/$name.txt" | head -5 | cut -c1-300
}

if step runs && python_env; then
  distributed_run e2b 0 --factory transformers_models:sdpa --geometry e2b
  distributed_run 26b-a4b 0 --factory transformers_models:sdpa_grouped_mm --geometry 26b-a4b --equal-seq "${EQUAL_SEQ_LARGE:-2048}"
  distributed_run 31b 0 --factory transformers_models:sdpa --geometry 31b --equal-seq "${EQUAL_SEQ_LARGE:-2048}"
  distributed_run e2b-closure-control 1 --factory model_controls:checkpoint_closure --geometry e2b \
    --checks memory-flatness
  distributed_run e2b-mixed-precision 0 --factory transformers_models:sdpa --geometry e2b \
    --sharding fsdp2-mixed-precision --checks sharded-equals-single
  # fp32 at real width: the strict rule (max-abs <= 1e-4 x max, cosine >= 0.99999) on the sharding alone.
  distributed_run e2b-f32 0 --factory transformers_models:sdpa --geometry e2b --dtype f32 --checks sharded-equals-single
  distributed_run e2b-summed-gradients-f32 1 --factory transformers_models:sdpa --geometry e2b --dtype f32 \
    --sharding model_controls:sum_reduced_sharding --checks sharded-equals-single
  distributed_run e2b-summed-gradients 1 --factory transformers_models:sdpa --geometry e2b \
    --sharding model_controls:sum_reduced_sharding --checks sharded-equals-single
  distributed_run e2b-summed-gradients-factory 0 --factory transformers_models:sdpa --geometry e2b --weights factory \
    --sharding model_controls:sum_reduced_sharding --checks sharded-equals-single
  distributed_run 26b-a4b-f32 0 --factory transformers_models:sdpa_grouped_mm --geometry 26b-a4b --dtype f32 \
    --checks sharded-equals-single --equal-seq "${EQUAL_SEQ_LARGE:-2048}"
  distributed_run 31b-f32 0 --factory transformers_models:sdpa --geometry 31b --dtype f32 \
    --checks sharded-equals-single --equal-seq "${EQUAL_SEQ_LARGE:-2048}"
  # bf16 equality alone, sdpa and eager attention: the notes give each single-device run's agreement with fp32.
  distributed_run e2b-sdpa-equality 0 --factory transformers_models:sdpa --geometry e2b --checks sharded-equals-single
  distributed_run e2b-eager-equality 0 --factory transformers_models:eager --geometry e2b --checks sharded-equals-single
  # The figures of every report: per rank, the flatness slope against its bound, and the equality's
  # loss and worst gradient with both errors (the sharded run's and the single-device run's own).
  reports=()
  for name in ${RUNS//,/ }; do [ -f "$OUT/$name.json" ] && reports+=("$OUT/$name.json"); done
  [ ${#reports[@]} -gt 0 ] && python3 - "${reports[@]}" << 'EOF' | tee "$OUT/distributed_table.txt"
import json, sys
for path in sys.argv[1:]:
    report = json.load(open(path))
    name = path.rsplit("/", 1)[-1][:-5]
    for r in report["runs"][0]["results"]:
        check = r["test"].split("/")[1]
        if check == "memory-flatness" or "loss" in r["case"] or "(worst of" in r["case"] or r["status"] != "pass":
            base = f" single {r['baseline']:.3e}" if r.get("baseline") is not None else ""
            print(f"{name:22} {check:22} {r['case'][:70]:70} {r['status']:4} {r['metric']} {r['value']:.3e}{base} "
                  f"bound {r['bound']:.3e}")
    print(f"{name:22} seconds {report['seconds']}")
    for notes in report["notes"].values():
        for note in notes:
            print(f"{name:22} {note}")
EOF
  [ -f "$OUT/distributed_table.txt" ] && keep_file "$OUT/distributed_table.txt"
fi

stage_finish

#!/usr/bin/env bash
# The GPU test stage: everything that checks correctness on CUDA. From any directory; results
# (one table/log and JSON report per run, ctest's and pytest's JUnit XML, junit.xml and
# summary.txt for the stage) under --out.
#
#   ci/gpu/test.sh [--only STEP,...] [--out DIR] [--time-limit S] [--max-files N] [--help]
#   ci/gpu/test.sh --list-mutants   the mutations step's mutants as it reads them, one a line, the six
#                         fields of kernel_mutations.txt tab-separated ($MUTANTS applies); no GPU needed
#   (the options: bash ci/gpu/common.sh --help; ci/gpu.sh runs this as its stage "test")
#
# Steps, in this order (each recorded run by run; a run's expected exit is 0 unless it says 1):
#   build                 ci/build.sh against the host's CUDA LibTorch (build.log);
#   ctest                 every CTest test, -j 8 (the CUDA variants run there instead of skipping),
#                         then the evidence that they ran: test_reference's CUDA tests and the
#                         recompute thread, test_golden's CUDA rule (worst errors);
#   compare-transformers  one decoder layer of each released geometry against transformers at
#                         S = 2048 (golden/generators/gpu_compare_transformers.sh; its own knobs
#                         CASES, GEOMETRIES, SEQ); skipped without transformers;
#   golden-verify         every committed golden (golden/reference, golden/transformers) verified on CUDA;
#   golden-real           each real/* case ($REAL_CASES, default all of `golden list`): generated in
#                         bf16 on CUDA, verified on CUDA, read from h5py (files under 2 GB), deleted;
#   conform               the suite on CUDA: the reference in f32 and bf16, the example plugin
#                         (--backend-lib), every faulty-* backend in f32 held to its declaration
#                         (calibrate --expect-declared), memory flatness over 200 steps with the
#                         real-geometry E2B layer stack;
#   cuda-backend          the fused backend: cuda and cuda-deterministic, every category, bf16 and
#                         f16; the CUDA negative controls (op_sweep attention, attention-op
#                         determinism: 1); skipped when the cuda backend is not built;
#   decode                test_cuda_kv_cache (the cuda KvCacheOps against the reference's); the decode
#                         category: cuda and cuda-deterministic (bf16, f16) and variant-paged-kv-cache
#                         pass, two faulty decoding backends fail (1);
#   python                python3 -m gemma4_conform conform --device cuda (PYTHONPATH=build/python):
#                         python_backends:correct in f32, bf16, f16 (backward on autograd's device
#                         thread, two models in two threads), python_backends:window_off_by_one (1);
#   third-party           Liger-Kernel and axolotl as backends ($THIRD_PARTY: SPEC:DTYPES ...; wheels
#                         from .whl/, installed --no-deps into /tmp/site); skipped when not importable;
#   third-party-controls  the same kernels with Gemma 2/3's (1 + w) norm (1);
#   model                 conform-model on transformers' Gemma4ForCausalLM ($MODELS: FACTORY:DTYPES ...,
#                         default eager:f32,bf16 sdpa:bf16,f16 liger:bf16,f32), every check;
#   model-tests           the historic environments (impl/third_party/pinned_envs.sh, offline
#                         from .whl/historic/ when there) and pytest with GEMMA4_TEST_DEVICE=cuda
#                         ($TESTS, default test_conform_model.py and test_historic.py; $TESTS_TIMEOUT, 540 s);
#   real-size             the real-size goldens (golden/real, FORMAT.md): the f16 files made here on CUDA
#                         by transformers with their baselines (hf_real_cases.py --dtype f16 --device
#                         cuda; e2b-full-width too); transformers with SDPA against every file (golden
#                         check: must pass; the soft-cap dropped: must fail); python_backends:correct on
#                         real_size; then calibrate --device cuda --categories real_size in $DTYPES,
#                         one process per GPU (real-size-cuda-<gpu>-<i>): every legitimate backend
#                         passes, each faulty one that declares real_size fails;
#   calibrate             gemma4-conform calibrate --device cuda in $DTYPES (default bf16,f16,f32; $JOBS
#                         at a time, default 4): legitimate backends pass, faulty ones fail where they
#                         say; real_size is the step above's;
#   calibrate-cpu         calibrate on the host's CPU at every oneDNN ISA level it offers ($JOBS, default
#                         8), real_size left out (minutes per run at every level).
# Optional steps (only with --only):
#   cuda-ops              golden and op_sweep with one fused op at a time (GEMMA4_CUDA_OPS), to bisect;
#   scoreboard            python -m gemma4_conform scoreboard --device cuda in $DTYPES (default bf16),
#                         real_size left out: every subject this host runs (transformers on CUDA,
#                         Liger-Kernel and axolotl from .whl/, google-deepmind's gemma in its venv built
#                         from .whl/jax-gemma/, vLLM from .whl/vllm/ (ci/gpu/carry_pinned.sh vllm), unsloth from
#                         .whl/unsloth/ (carry_pinned.sh unsloth), our cuda
#                         backends), into $OUT/scoreboard;
#                         $SCOREBOARD_SUBJECTS: only these subjects (its --subjects regex), $SCOREBOARD_JOBS
#                         runs at once (default 4), SCOREBOARD_REAL_SIZE=1 with real_size (the in-tree
#                         backends' real-size goldens); the rows so far in scoreboard.partial.json;
#                         needs GEMMA4_GIT_SHA (the commit the rows name; not run without it);
#   mutations             each attention kernel mutated in one place (ci/gpu/kernel_mutations.txt: file,
#                         sed edit, the checks that must catch it), rebuilt, run: every mutant must fail
#                         (1); the source is restored and rebuilt after each ($MUTANTS: only the
#                         mutants whose names match this regex);
#   cuda-quick            one kernel iteration: the suite for both cuda backends in bf16 and f16
#                         ($CONFORM_FILTER narrows it; RUN_TIMEOUT default 240), the attention kernels'
#                         resource use (cuobjdump), attention at S = 8192 beside its peers (median of 3).
# Exit 0 when every run passed or was skipped, 1 otherwise, 2 on a bad option.
set -uo pipefail
# shellcheck source=ci/gpu/common.sh
source "$(dirname "$0")/common.sh" || exit 2
STEPS_DEFAULT=(build ctest compare-transformers golden-verify golden-real conform cuda-backend decode python
  third-party third-party-controls model model-tests real-size calibrate calibrate-cpu)
STEPS_OPTIONAL=(cuda-ops cuda-quick mutations scoreboard)

# each_mutant FUNCTION: FUNCTION NAME FILE EDIT BACKEND DTYPE FILTER for each line of
# ci/gpu/kernel_mutations.txt (NAME|FILE|SED EXPRESSION|BACKEND|DTYPE|FILTER: the checks that must
# fail) whose name matches $MUTANTS. The one reader of that file: its CPU test
# (ci/gpu/test_kernel_mutations.py) reads what `test.sh --list-mutants` prints from here.
each_mutant() {
  local name file edit backend dtype filter
  # Read on descriptor 3: FUNCTION's commands (builds, the suite) keep the stage's stdin.
  while IFS='|' read -r -u 3 name file edit backend dtype filter; do
    case "$name" in '' | '#'*) continue ;; esac
    [[ "$name" =~ ${MUTANTS:-.} ]] || continue
    "$1" "$name" "$file" "$edit" "$backend" "$dtype" "$filter"
  done 3< "$GPU_CI_REPO/ci/gpu/kernel_mutations.txt"
}
# run_mutant NAME FILE EDIT BACKEND DTYPE FILTER: the mutations step's run of one mutant: edit, rebuild,
# the checks (must fail: exit 1 with a failing check in the report), the source restored.
# shellcheck disable=SC2317 # called through each_mutant
run_mutant() {
  local name=$1 file=$2 edit=$3
  if ! mutate_source "$file" "$edit" "$OUT/original.src"; then
    fail_run "mutant-$name" "the edit '$edit' changed nothing in $file" "$OUT/original.src"
  elif ! run "build-mutant-$name" 0 "$OUT/build-mutant-$name.log" cmake --build build -j "$(nproc)"; then
    tail -20 "$OUT/build-mutant-$name.log"
  else
    conform_run "mutant-$name" 1 --backend "$4" --dtype "$5" --filter "$6"
    grep -h "FAIL" "$OUT/mutant-$name.txt" 2> /dev/null | head -3
    # Caught means a check failed: exit 1 from an error (no device, a thrown launch) is not that.
    local counted
    if [ "$run_code" = 1 ] && ! counted=$(PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH} \
      python3 ci/gpu/results.py failures "$OUT/mutant-$name.json" 2>&1); then
      fail_run "mutant-$name-caught" "exit 1 but no check failed ($counted): $(tail -1 "$OUT/mutant-$name.txt")" \
        "$OUT/mutant-$name.txt"
    fi
  fi
  cp "$OUT/original.src" "$file"
}
# shellcheck disable=SC2317 # called through each_mutant
print_mutant() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }
if [ "${1:-}" = --list-mutants ]; then  # one line a mutant, its six fields tab-separated
  each_mutant print_mutant
  exit 0
fi
stage_init test "$@"
CLI=build/bin/gemma4-conform

step build && gpu_build

if step ctest; then
  detail_re='tests passed|tests failed' run ctest 0 "$OUT/ctest.log" \
    ctest --test-dir build --output-on-failure -j 8 --no-tests=error --output-junit "$OUT/ctest.junit.xml"
  grep -E "tests passed|tests failed|\(Failed\)|\*\*\*" "$OUT/ctest.log" | tail -15
  # Evidence that the CUDA variants ran rather than skipped (their verdicts are ctest's).
  run cuda-tests-reference '*' "$OUT/cuda_tests.log" \
    build/bin/test_reference --gtest_filter='*cuda*:*Cuda*:Checkpoint.RecomputeThread'
  grep -E "recompute on|PASSED|FAILED|SKIPPED" "$OUT/cuda_tests.log" | tail -8
  run cuda-tests-golden '*' "$OUT/cuda_rule.log" build/bin/test_golden --gtest_filter='*cuda*'
  grep -c '^\[       OK \] .*_cuda' "$OUT/cuda_rule.log" | sed 's/^/CUDA cases of test_golden passed: /'
  grep -E "worst error" "$OUT/cuda_rule.log"
fi

if step compare-transformers; then
  if ! py_has transformers; then
    skip_run compare-transformers "python3 cannot import transformers (5.17.0 wanted)"
  else
    # OUT= : the script's own tee into $OUT/gpu_compare.log would repeat this run's log.
    detail_re='^== done' run compare-transformers 0 "$OUT/compare-transformers.txt" \
      env OUT= CONFIGS=reference/configs golden/generators/gpu_compare_transformers.sh
  fi
fi

if step golden-verify; then
  detail_re='golden verify:' run golden-verify 0 "$OUT/verify_committed_cuda.log" \
    $CLI golden verify --device cuda golden/reference/*/*.h5 golden/transformers/*/golden.*.h5
  grep -E "^(PASS|FAIL)|golden verify:" "$OUT/verify_committed_cuda.log" | tail -3
fi

if step golden-real; then
  dir=$(mktemp -d /tmp/gemma4_real_XXXXXX)
  h5py=false
  python3 -c 'import h5py, numpy' 2> /dev/null && h5py=true
  cases=${REAL_CASES:-$($CLI golden list | grep '^real/')}
  [ -n "$cases" ] || fail_run golden-real "no real/* case in 'gemma4-conform golden list'"
  for name in $cases; do
    base=${name//\//_} file=$dir/$name.bf16.h5
    if ! run "$base-generate" 0 "$OUT/$base.generate.log" \
      $CLI golden generate --case "$name" --dtype bf16 --device cuda --out "$dir"; then
      tail -20 "$OUT/$base.generate.log"
      continue
    fi
    detail_re='^(PASS|FAIL)' run "$base-verify" 0 "$OUT/$base.verify.log" $CLI golden verify --device cuda "$file"
    $CLI golden show "$file" | sed -n '2,12p' | grep -E "generator|device|gpu_name|cuda_version|torch_version" |
      tr -s ' ' | paste -sd';'
    size=$(stat -c %s "$file" 2> /dev/null || echo 0)
    echo "$name: $((size / 1000000)) MB"
    # The h5py cross-read on the files under 2 GB (it reads every dataset into memory).
    if [ "$size" -lt 2000000000 ] && $h5py; then
      run "$base-h5py" 0 "$OUT/$base.h5py.log" python3 golden/generators/golden_h5py_check.py "$file" ||
        tail -20 "$OUT/$base.h5py.log"
    fi
    rm -f "$file"
  done
  rm -rf "$dir"
fi

if step conform; then
  conform_run reference-f32 0 --backend reference
  conform_run reference-bf16 0 --backend reference --dtype bf16
  conform_run example-plugin 0 --backend-lib build/lib/libgemma4_example_plugin.so
  # Every faulty backend held to its own declaration (impl/faulty*: the categories where its bug
  # must show), in f32 on CUDA: the list lives in the declarations, not here.
  calibrate_run conform-faulty --device cuda --dtype f32 --backends '^faulty-' --skip-categories real_size \
    --expect-declared
  grep -h "recompute thread" "$OUT"/reference-f32.txt 2> /dev/null | head -4
  grep -h "memory_flatness" "$OUT"/reference-f32.txt "$OUT"/reference-bf16.txt 2> /dev/null | head -8
fi

# conform_both [ARGS...]: the suite (ARGS narrow it) for both cuda backends, in bf16 and fp16.
conform_both() {
  local backend dtype
  for backend in cuda cuda-deterministic; do
    for dtype in bf16 f16; do conform_run "$backend-$dtype" 0 --backend $backend --dtype $dtype "$@"; done
  done
}

if step cuda-backend; then
  if ! has_cuda_backend; then
    skip_run cuda-backend "$NO_CUDA_BACKEND"
  else
    conform_both
    conform_run faulty-window-off-by-one-sweep 1 --backend faulty-window-off-by-one --dtype bf16 --filter '^op_sweep/attention'
    conform_run faulty-nondeterministic-op 1 --backend faulty-nondeterministic-attention --dtype f32 \
      --filter '^determinism/attention_op'
    grep -h "FAIL\|fail " "$OUT"/cuda-*.txt 2> /dev/null | head -20
  fi
fi

if step cuda-ops; then  # one fused op at a time (GEMMA4_CUDA_OPS), on the golden and op_sweep checks
  if ! has_cuda_backend; then
    skip_run cuda-ops "$NO_CUDA_BACKEND"
  else
    for op in attention qk_norm_rope geglu; do
      for dtype in bf16 f16; do
        GEMMA4_CUDA_OPS=$op conform_run "only-$op-$dtype" 0 --backend cuda --dtype $dtype --filter '^(golden|op_sweep)/'
      done
    done
  fi
fi

if step cuda-quick; then
  if ! has_cuda_backend; then
    skip_run cuda-quick "$NO_CUDA_BACKEND"
  else
    RUN_TIMEOUT=${RUN_TIMEOUT:-240} conform_both ${CONFORM_FILTER:+--filter "$CONFORM_FILTER"}
    grep -h "FAIL\|fail " "$OUT"/cuda-*.txt 2> /dev/null | head -20
    /usr/local/cuda/bin/cuobjdump -res-usage build/impl/cuda/libgemma4_cuda_kernels.a 2> /dev/null |
      grep -A1 "hopper_[a-z0-9_]*kernel" | grep -o "REG:[0-9]* STACK:[0-9]* SHARED:[0-9]*" | sort | uniq -c
    RUN_TIMEOUT=${RUN_TIMEOUT:-240} bench_run quick-attention \
      '^(ceiling/|(sliding_attention|global_attention|causal_attention_sliding_shape)/(cuda|cuda-deterministic|sdpa-cudnn|sdpa-efficient)/cuda/31b/8192/bf16/)' \
      --benchmark_min_time=0.2s --benchmark_repetitions=3
    python3 bench/summarize.py "$OUT/quick-attention.json"
  fi
fi

if step mutations; then
  if ! has_cuda_backend; then
    skip_run mutations "$NO_CUDA_BACKEND"
  else
    touch_mutated_sources  # an earlier call's mutant, not rebuilt, must not ride along
    each_mutant run_mutant
    rm -f "$OUT/original.src"
    run build-restored 0 "$OUT/build-restored.log" cmake --build build -j "$(nproc)" &&
      rm -f "$MUTATED_SOURCES"
  fi
fi

if step decode; then  # the cuda KV cache, then the decode category on CUDA
  if ! has_cuda_backend || [ ! -x build/bin/test_cuda_kv_cache ]; then
    skip_run test_cuda_kv_cache "$NO_CUDA_BACKEND"
  else
    detail_re='^\[  (PASSED|FAILED) ' run test_cuda_kv_cache 0 "$OUT/test_cuda_kv_cache.txt" build/bin/test_cuda_kv_cache
    grep -E "^\[  FAILED|OUT$|Failure" "$OUT/test_cuda_kv_cache.txt" | head -20
    for backend in cuda cuda-deterministic; do
      for dtype in bf16 f16; do conform_run "decode-$backend-$dtype" 0 --backend $backend --dtype $dtype --filter '^decode/'; done
    done
  fi
  conform_run decode-variant-paged-kv-cache-bf16 0 --backend variant-paged-kv-cache --dtype bf16 --filter '^decode/'
  for bug in sliding-window-plus-one kv-shared-own-step; do
    conform_run "decode-faulty-$bug-bf16" 1 --backend "faulty-decode-$bug" --dtype bf16 --filter '^decode/'
  done
  grep -h "FAIL" "$OUT"/decode-cuda*.txt 2> /dev/null | head -20
fi

if step python && python_env; then
  for dtype in f32 bf16 f16; do
    py_run "python-all-ops-$dtype" 0 conform --backend python_backends:correct --dtype "$dtype" --verbose
  done
  grep -h "multithreaded_recompute" "$OUT"/python-all-ops-bf16.txt 2> /dev/null | head -6
  py_run python-window-off-by-one 1 conform --backend python_backends:window_off_by_one --filter '^(golden|op_sweep)/'
fi

# The packages a third-party backend module imports.
third_party_needs() {
  case $1 in
    liger_backend) echo liger_kernel ;;
    axolotl_backend) echo "liger_kernel axolotl" ;;
  esac
}

# The third-party backends, each SPEC:DTYPES (impl/third_party/README.md).
if step third-party && python_env; then
  for spec_dtypes in ${THIRD_PARTY:-liger_backend:backend:bf16,f32,f16 liger_backend:backend_raw_geglu:bf16 \
    liger_backend:backend_noscale_kernel:bf16 axolotl_backend:backend:bf16,f32,f16}; do
    spec=${spec_dtypes%:*} dtypes=${spec_dtypes##*:}
    # shellcheck disable=SC2046
    if ! py_has $(third_party_needs "${spec%%:*}"); then
      skip_run "${spec/:/-}" "cannot import $(third_party_needs "${spec%%:*}") (carry the wheels in .whl/: impl/third_party/README.md)"
      continue
    fi
    for dtype in ${dtypes//,/ }; do
      py_run "${spec/:/-}-$dtype" 0 conform --backend "$spec" --dtype "$dtype" --verbose
    done
  done
fi

# Their negative controls: the same kernels given Gemma 2/3's (1 + w) norm, which the suite must fail
# (proof that it judges the packages' kernels, not a fallback).
if step third-party-controls && python_env; then
  for spec in liger_backend:backend_gemma3_offset axolotl_backend:backend_unit_offset; do
    # shellcheck disable=SC2046
    if ! py_has $(third_party_needs "${spec%%:*}"); then
      skip_run "${spec/:/-}-bf16" "cannot import $(third_party_needs "${spec%%:*}")"
      continue
    fi
    py_run "${spec/:/-}-bf16" 1 conform --backend "$spec" --dtype bf16 --filter '^(golden|op_sweep)/'
  done
fi

if step model && python_env; then
  for run_spec in ${MODELS:-eager:f32,bf16 sdpa:bf16,f16 liger:bf16,f32}; do
    factory=${run_spec%:*} dtypes=${run_spec##*:}
    for dtype in ${dtypes//,/ }; do
      if ! py_has transformers; then
        skip_run "transformers-$factory-$dtype" "python3 cannot import transformers"
      elif [ "$factory" = liger ] && ! py_has liger_kernel; then
        skip_run "transformers-$factory-$dtype" "cannot import liger_kernel (carry its wheel in .whl/)"
      else
        py_run "transformers-$factory-$dtype" 0 conform-model --factory "transformers_models:$factory" --dtype "$dtype" --verbose
      fi
    done
  done
fi

if step model-tests && python_env; then
  wheels=()
  [ -d .whl/historic ] && wheels=(PINNED_WHEELS=.whl/historic)
  run historic-envs 0 "$OUT/historic_envs.log" \
    env PYTHON=python3 PINNED_DIR=/tmp/historic "${wheels[@]}" impl/third_party/pinned_envs.sh transformers-5.5.1 transformers-5.5.2 axolotl-0.17.0 ||
    tail -5 "$OUT/historic_envs.log"
  # shellcheck disable=SC2086
  RUN_TIMEOUT=${TESTS_TIMEOUT:-540} run pytest-cuda 0 "$OUT/pytest.log" \
    env GEMMA4_TEST_DEVICE=cuda GEMMA4_HISTORIC_DIR=/tmp/historic OMP_NUM_THREADS=4 \
    python3 -m pytest -s -rA -p no:cacheprovider -p no:gemma4_conform --junitxml="$OUT/pytest.junit.xml" \
    ${TESTS:-tools/python/tests/test_conform_model.py tools/python/tests/test_historic.py}
  grep -E "^(PASSED|FAILED|SKIPPED|ERROR) " "$OUT/pytest.log"
fi

# real_size_part PART: whether $REAL_SIZE_PARTS (default all: generate,transformers,python,calibrate)
# names it, so that one device call can take a part of the step.
real_size_part() { [[ ",${REAL_SIZE_PARTS:-generate,transformers,python,calibrate}," == *",$1,"* ]]; }

if step real-size && python_env; then
  if real_size_part generate; then
    run real-size-f16 0 "$OUT/real_size_f16.log" \
      python3 golden/generators/hf_real_cases.py --out golden/real --dtype f16 --device cuda --conform $CLI
    run real-size-f16-full-width 0 "$OUT/real_size_f16_full_width.log" python3 golden/generators/hf_real_cases.py \
      --out golden/real --geometry e2b --full-width --dtype f16 --device cuda --conform $CLI
  fi
  # transformers with SDPA (another attention path than the goldens' eager one) must pass every
  # real-size golden through golden check; the soft-cap dropped must fail.
  if real_size_part transformers; then
    run real-size-transformers 0 "$OUT/real_size_transformers.log" \
      python3 golden/generators/check_transformers_candidates.py --cli $CLI --real golden/real --real-only \
      --device cuda --dtypes "${DTYPES:-bf16,f16,f32}" --real-geometries e2b,e4b,31b,26b-a4b,e2b-full-width
  fi
  if real_size_part python; then
    for dtype in $(echo "${DTYPES:-bf16,f16,f32}" | tr , ' '); do
      py_run "python-real-size-$dtype" 0 conform --backend python_backends:correct --dtype "$dtype" \
        --filter '^real_size/'
    done
  fi
  # One calibrate per GPU (45 runs a dtype, 50-110 s each on an H200 with 8 side by side), the
  # backends that judge real_size (legitimate ones, faulty ones declaring it) dealt out in turn, so
  # that the groups are even; each process computes the baseline family once. $PER_GPU (default 1)
  # processes share a GPU; REAL_SIZE_KINDS=legitimate leaves the faulty backends out. Run one
  # test.sh at a time: python_env installs .whl into the one /tmp/site.
  if real_size_part calibrate; then
    gpus=$(gpu_count)
    mapfile -t groups < <(PYTHONPATH=build/python python3 - $((gpus * ${PER_GPU:-1})) << 'EOF'
import os
import sys
from gemma4_conform import _core
legitimate_only = os.environ.get("REAL_SIZE_KINDS") == "legitimate"
names = [b["name"] for b in _core.builtin_backends()
         if b["kind"] != "faulty" or ("real_size" in b["fails_in"] and not legitimate_only)]
n = int(sys.argv[1])
for i in range(n):
    print("^(" + "|".join(names[i::n]) + ")$")
EOF
    )
    IFS=, read -ra visible <<< "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((gpus - 1)))}"
    for i in "${!groups[@]}"; do
      CUDA_VISIBLE_DEVICES=${visible[$((i % gpus))]} calibrate_run "real-size-cuda-$(gpu_key)-$i" --device cuda --categories real_size \
        --dtype "${DTYPES:-bf16,f16,f32}" --backends "${groups[$i]}" &
    done
    wait
  fi
fi

if step scoreboard; then
  # The board's rows name this project's commit, and this copy's .git does not follow the tree (tools/git_sha.cmake).
  if [ -z "${GEMMA4_GIT_SHA:-}" ]; then
    fail_run scoreboard "not run: GEMMA4_GIT_SHA is not set (the commit of this tree, which the board's rows name)"
  elif python_env; then
    if [ -d .whl/jax-gemma ]; then  # google-deepmind's gemma: its venv of the host's python3 (3.12, JAX with CUDA)
      PYTHON312=python3 PINNED_WHEELS=.whl/jax-gemma impl/third_party/pinned_envs.sh jax-gemma > "$OUT/jax-gemma-env.log" 2>&1 ||
        fail_run jax-gemma-env "impl/third_party/pinned_envs.sh jax-gemma failed" "$OUT/jax-gemma-env.log"
    fi
    if [ -d .whl/vllm ]; then  # vLLM 0.25.0 and the transformers it reads Gemma-4 configs with, carried in parts
      PYTHON=python3 PINNED_WHEELS=.whl/vllm impl/third_party/pinned_envs.sh vllm vllm-transformers-5.13.1 \
        > "$OUT/vllm-env.log" 2>&1 || fail_run vllm-env "impl/third_party/pinned_envs.sh vllm failed" "$OUT/vllm-env.log"
    fi
    if [ -d .whl/unsloth ]; then  # unsloth 2026.10.9 and what it needs that the host lacks (ci/gpu/carry_pinned.sh unsloth)
      PYTHON=python3 PINNED_WHEELS=.whl/unsloth impl/third_party/pinned_envs.sh unsloth \
        > "$OUT/unsloth-env.log" 2>&1 || fail_run unsloth-env "impl/third_party/pinned_envs.sh unsloth failed" "$OUT/unsloth-env.log"
    fi
    RUN_TIMEOUT=${RUN_TIMEOUT:-560} detail_re='^wrote ' run scoreboard 0 "$OUT/scoreboard.log" \
      python3 -m gemma4_conform scoreboard --out "$OUT/scoreboard" --device cuda --dtype "${DTYPES:-bf16}" \
      $([ "${SCOREBOARD_REAL_SIZE:-0}" = 1 ] || echo --skip-real-size) --jobs "${SCOREBOARD_JOBS:-4}" ${SCOREBOARD_SUBJECTS:+--subjects "$SCOREBOARD_SUBJECTS"}
    grep -E "^\[" "$OUT/scoreboard.log" | tail -40
  fi
fi

if step calibrate; then
  calibrate_run "calibrate-cuda-$(gpu_key)" --device cuda --dtype "${DTYPES:-bf16,f16,f32}" --jobs "${JOBS:-4}" \
    --skip-categories real_size
fi

if step calibrate-cpu; then
  lscpu | grep -E "Model name|Flags" | cut -c1-300 > "$OUT/cpu-model.txt"
  calibrate_run calibrate-cpu --isa auto --jobs "${JOBS:-8}" --skip-categories real_size
fi

stage_finish

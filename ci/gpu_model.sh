#!/usr/bin/env bash
# On the GPU host: conform-model (tools/python/gemma4_conform/model_runner.py) on CUDA. Builds against
# the host's CUDA LibTorch (ci/build.sh; the Python package from build/python), then:
#   - models: transformers' Gemma4ForCausalLM (the host's 5.17.0), eager and sdpa, and after
#     Liger-Kernel's apply_liger_kernel_to_gemma4_text (0.8.5, from .whl/), every check, per dtype;
#   - tests: the pytest proof (tools/python/tests/test_conform_model.py, test_historic.py) with
#     GEMMA4_TEST_DEVICE=cuda: the side-channel controls, the contract breakers and the historic
#     environments (tools/python/third_party/historic_envs.sh, offline from .whl/historic/).
# STAGE (default build,models,tests) picks the parts; MODELS the factory:dtypes runs; TESTS, pytest's arguments (default both files). Tables, JSON reports and the pytest log go
# into $OUT/logs.tar.gz; one line per run is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${STAGE:-build,models,tests}
source ci/gpu_env.sh
gpu_python_env
status=0

if stage models; then
  for run in ${MODELS:-eager:f32,bf16 sdpa:bf16,f16 liger:bf16,f32}; do
    factory=${run%:*} dtypes=${run##*:}
    for dtype in ${dtypes//,/ }; do
      py_run "transformers-$factory-$dtype" 0 conform-model --factory "transformers_models:$factory" --dtype "$dtype" --verbose
    done
  done
fi
if stage tests; then
  PYTHON=python3 HISTORIC_WHEELS=.whl/historic tools/python/third_party/historic_envs.sh /tmp/historic \
    > "$LOGS/historic_envs.log" 2>&1 || { tail -5 "$LOGS/historic_envs.log"; status=1; }
  t0=$SECONDS
  GEMMA4_TEST_DEVICE=cuda GEMMA4_HISTORIC_DIR=/tmp/historic OMP_NUM_THREADS=4 \
    timeout "${TESTS_TIMEOUT:-540}" python3 -m pytest -s -rA -p no:cacheprovider -p no:gemma4_conform \
    ${TESTS:-tools/python/tests/test_conform_model.py tools/python/tests/test_historic.py} > "$LOGS/pytest.log" 2>&1
  code=$?
  [ $code -eq 0 ] || status=1
  echo "pytest (cuda): exit $code, $((SECONDS - t0)) s: $(tail -1 "$LOGS/pytest.log")"
  grep -E "^(PASSED|FAILED|SKIPPED|ERROR) " "$LOGS/pytest.log"
fi
exit $status

#!/usr/bin/env bash
# On the GPU host: the Python package (tools/python) on CUDA. Builds against the host's CUDA
# LibTorch (ci/build.sh), then runs `python3 -m gemma4_conform conform --device cuda` from the build
# tree's package (PYTHONPATH=build/python):
#   - python_backends:correct (every op in plain PyTorch) in f32, bf16 and f16: backward on autograd's
#     device thread and two models in two threads, through the GIL;
#   - python_backends:window_off_by_one, its negative control (must fail);
#   - the third-party kernels of tools/python/third_party (their wheels carried in .whl/, installed
#     with --no-deps into /tmp/site): Liger-Kernel and axolotl, in bf16, f32 and f16, and
#     (third_party_controls) each with Gemma 2/3's (1 + w) norm, which must fail.
# STAGE (default build,python,third_party,third_party_controls) picks the parts, so that a warm machine can run them in
# separate calls of under 10 minutes. Every table and JSON report goes into $OUT/logs.tar.gz (the
# device tool returns at most 8 files); one line per run is printed.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${STAGE:-build,python,third_party,third_party_controls}
source ci/gpu_env.sh
gpu_python_env
status=0

if stage python; then
  for dtype in f32 bf16 f16; do
    py_run "python-all-ops-$dtype" 0 conform --backend python_backends:correct --dtype "$dtype" --verbose
  done
  grep -h "multithreaded_recompute" "$LOGS"/python-all-ops-bf16.txt | head -6
  py_run python-window-off-by-one 1 conform --backend python_backends:window_off_by_one --filter '^(golden|op_sweep)/'
fi
# The third-party backends, each SPEC:DTYPES (tools/python/third_party/README.md); a verdict, not an
# expectation: the exit codes are reported and the tables kept.
if stage third_party; then
  for run in ${THIRD_PARTY:-liger_backend:backend:bf16,f32,f16 liger_backend:backend_raw_geglu:bf16 \
                              liger_backend:backend_noscale_kernel:bf16 axolotl_backend:backend:bf16,f32,f16}; do
    spec=${run%:*} dtypes=${run##*:}
    for dtype in ${dtypes//,/ }; do
      py_run "${spec/:/-}-$dtype" 0 conform --backend "$spec" --dtype "$dtype" --verbose
    done
  done
fi
# Their negative controls: the same kernels given Gemma 2/3's (1 + w) norm, which the suite must fail
# (proof that it judges the packages' kernels, not a fallback).
if stage third_party_controls; then
  for spec in liger_backend:backend_gemma3_offset axolotl_backend:backend_unit_offset; do
    py_run "${spec/:/-}-bf16" 1 conform --backend "$spec" --dtype bf16 --filter '^(golden|op_sweep)/'
  done
fi
exit $status

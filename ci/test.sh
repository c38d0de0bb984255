#!/usr/bin/env bash
# Setup + build (ci/build.sh), then every test through CTest. This is the README's test command
# and what .ci/run calls (the CPU CI; the GPU CI is ci/gpu.sh).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
ci/build.sh
# One test more than cores: several tests spend seconds waiting (a hang or a dead rank waited out to
# its timeout, child processes starting), and on the 2-core CI machine -j 2 left about 9% of the
# CPU idle.
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(($(nproc) + 1))"

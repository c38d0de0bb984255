#!/usr/bin/env bash
# Setup + build (ci/build.sh), then every test through CTest. This is the README's test command
# and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"

#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test label but `cuda`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -LE cuda -j 2 "$@"

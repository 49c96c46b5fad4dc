#!/usr/bin/env bash
# Installs every system package and Python test tool deepinfer needs, by name. Idempotent.
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
PACKAGES=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev
          libgtest-dev libgmock-dev libbenchmark-dev python3 python3-pip
          libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev pybind11-dev libicu-dev)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Python test tools (pinned): pytest drives the end-to-end tests; numpy reads golden/case files there.
python3 -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/requirements-test.txt"

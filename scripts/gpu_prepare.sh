#!/usr/bin/env bash
# Run HERE (the CPU machine) before a GPU session: fills .gpu/ (git-ignored) with what scripts/gpu_check.sh
# needs on the device machine, which has nvcc, CMake and ninja but no network and none of the project's
# Debian build dependencies: their .deb files (unpacked there with dpkg -x, no install) and a copy of the
# golden models (../shared/golden does not travel). About 50 MB with the source tree, under the 64 MiB a
# device call carries. Then: run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=540).
set -euo pipefail
cd "$(dirname "$0")/.."
GOLDEN_SRC=${GOLDEN_SRC:-../shared/golden}
mkdir -p .gpu/debs
(cd .gpu/debs && apt-get download nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 \
    libpcre2-32-0 libpcre2-posix3 libcpp-httplib-dev libcpp-httplib0.11 googletest pkgconf pkgconf-bin libpkgconf3 \
    libicu72)
# ICU's headers, .pc files and .so links, without libicu-dev's 45 MB of static libraries (the call carries
# 64 MiB at most): a tarball that gpu_check.sh unpacks beside the debs.
rm -rf .gpu/icu-dev .gpu/icu-dev.tar.gz
mkdir -p .gpu/icu-dev
(cd .gpu/icu-dev && apt-get download libicu-dev && dpkg -x libicu-dev_*.deb root && rm libicu-dev_*.deb)
find .gpu/icu-dev/root -name "*.a" -delete
tar -C .gpu/icu-dev/root -czf .gpu/icu-dev.tar.gz .
rm -rf .gpu/icu-dev
rm -rf .gpu/golden
mkdir -p .gpu/golden
cp -r "$GOLDEN_SRC/v4-flash" "$GOLDEN_SRC/v41-flash" .gpu/golden/
du -sh .gpu

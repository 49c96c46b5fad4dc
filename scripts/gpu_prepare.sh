#!/usr/bin/env bash
# Run HERE (the CPU machine) before a GPU session: fills .gpu/ (git-ignored) with what scripts/gpu_check.sh
# needs on the device machine, which has nvcc, CMake and ninja but no network and none of the project's
# Debian build dependencies: their .deb files (unpacked there with dpkg -x, no install) and a copy of the
# golden models (../shared/golden does not travel). About 62 MiB with the source tree, under the 64 MiB a
# device call carries. Then: run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=540).
set -euo pipefail
cd "$(dirname "$0")/.."
GOLDEN_SRC=${GOLDEN_SRC:-../shared/golden}
mkdir -p .gpu/debs
(cd .gpu/debs && apt-get download nlohmann-json3-dev libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 \
    libpcre2-32-0 libpcre2-posix3 libcpp-httplib-dev libcpp-httplib0.11 googletest pkgconf pkgconf-bin libpkgconf3 \
    libicu72 libssl3 libbrotli1 zlib1g)
# Headers, .pc files and .so links of -dev packages whose static libraries would not fit in the 64 MiB a
# call carries (libicu-dev alone holds 45 MB of them): ICU for the library, and the TLS, zlib and brotli
# headers that cpp-httplib's header includes (the CLI links the HTTP server). gpu_check.sh unpacks them.
rm -rf .gpu/dev .gpu/*.tar.gz
mkdir -p .gpu/dev/root
(cd .gpu/dev && apt-get download libicu-dev libssl-dev libbrotli-dev zlib1g-dev && for f in *.deb; do dpkg -x "$f" root; done)
find .gpu/dev/root -name "*.a" -delete
rm -rf .gpu/dev/root/usr/share
tar -C .gpu/dev/root -czf .gpu/dev-headers.tar.gz .
rm -rf .gpu/dev
rm -rf .gpu/golden
mkdir -p .gpu/golden
cp -r "$GOLDEN_SRC/v4-flash" "$GOLDEN_SRC/v41-flash" .gpu/golden/
du -sh .gpu

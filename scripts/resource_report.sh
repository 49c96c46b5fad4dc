#!/usr/bin/env bash
# The CUDA kernels' resource report on the CPU machine (nvcc -Xptxas -v, no GPU needed): one line a kernel and target
# with its registers, spill bytes, stack frame and static shared memory, then the kernels that spill or have a stack
# frame (a non-inlined device function's own line, where ptxas prints one). Exit code 1 where any does, 2 where nvcc
# fails.
#   bash scripts/resource_report.sh [FILE.cu ...]   (default: every src/backend/cuda/*.cu)
#   ARCHS="sm_90a sm_120" bash scripts/resource_report.sh   (default: the four targets the build compiles)
set -euo pipefail
cd "$(dirname "$0")/.."
ARCHS=${ARCHS:-"sm_90a sm_100a sm_89 sm_120"}
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(src/backend/cuda/*.cu)
log=$(mktemp)
trap 'rm -f "$log" "$log.o" "$log.one"' EXIT
for arch in $ARCHS; do
  for f in "${files[@]}"; do
    echo "== $arch $(basename "$f")" >>"$log"
    if ! nvcc -std=c++17 -I src -arch="$arch" -Xptxas -v -c "$f" -o "$log.o" >"$log.one" 2>&1; then
      cat "$log.one" >&2
      echo "resource_report: nvcc failed on $f for $arch" >&2
      exit 2
    fi
    cat "$log.one" >>"$log"
  done
done
# ptxas prints, per entry function: "Compiling entry function 'NAME' for 'ARCH'", then "Function properties for NAME"
# with its stack frame and spills, then its registers and shared memory; a device function it calls has "Function
# properties" of its own. A name is shown demangled, without its namespaces and parameters.
c++filt <"$log" | python3 -c '
import re, sys
rows, bad, arch, file, name, props, stack, spill = [], [], "", "", "", "", 0, 0
def short(n):
    n = n.replace("deepinfer::cuda::", "").replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(n):  # the parameter list: the first "(" outside the template arguments
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0 and i > 0:
            return n[:i].removeprefix("void ")
    return n
for line in sys.stdin:
    if line.startswith("== "):
        arch, file = line.split()[1:3]
    elif m := re.search(r"Compiling entry function .(.*). for ", line):
        name, stack, spill = short(m.group(1)), 0, 0
    elif m := re.search(r"Function properties for (.*)", line):
        props = short(m.group(1).strip())
    elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
        if props == name:
            stack, spill = int(m.group(1)), max(int(m.group(2)), int(m.group(3)))
        elif int(m.group(1)) or int(m.group(2)) or int(m.group(3)):  # a called function of its own
            bad.append(f"{arch:8} {file:28} called function {props}: {line.strip()}")
    elif m := re.search(r"Used (\d+) registers", line):
        smem = re.search(r"(\d+) bytes smem", line)
        row = f"{arch:8} {file:28} {m.group(1):>4} regs {spill:5} B spill {stack:5} B stack {int(smem.group(1)) if smem else 0:6} B smem  {name}"
        rows.append((file, name, arch, row))
        if spill or stack:
            bad.append(row)
for r in sorted(rows):
    print(r[3])
if bad:
    print("== kernels that spill or have a stack frame:")
    print("\n".join(bad))
    sys.exit(1)
print(f"== no kernel spills or has a stack frame ({len(rows)} kernel builds)")
'

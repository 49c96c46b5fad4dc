// Whether this process may use AMX tiles. Linux hands out the tile state (8 KB per thread) only to processes
// that ask for it (arch_prctl ARCH_REQ_XCOMP_PERM, once per process); a VM or an old kernel may refuse.
#pragma once

namespace deepinfer {

// The CPU has AMX-TILE and AMX-BF16 and the kernel granted this process the tile state (asked on the first call).
bool amx_usable();

}  // namespace deepinfer

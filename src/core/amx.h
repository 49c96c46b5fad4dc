// AMX tiles: whether this process may use them, and the tile configuration every AMX loop loads first.
// Linux hands out the tile state (8 KB per thread) only to processes that ask for it (arch_prctl
// ARCH_REQ_XCOMP_PERM, once per process); a VM or an old kernel may refuse.
#pragma once

#include <cstdint>

namespace deepinfer {

// The CPU has AMX-TILE and AMX-BF16 and the kernel granted this process the tile state (asked on the first call).
bool amx_usable();

// The 64-byte operand of LDTILECFG, palette 1: tile t has rows[t] rows of colsb[t] bytes (0: unused).
struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Configures this thread's tiles. GCC 12 does not see _tile_loadconfig's builtin read its operand and dropped the
// stores that filled it (the tiles stayed unconfigured: SIGILL on the first tile instruction); the asm operand
// makes the read explicit. Plain asm: callable without an AMX target attribute (the caller checks amx_usable).
inline void load_amx_tile_config(const AmxTileConfig& cfg) { asm volatile("ldtilecfg %0" : : "m"(cfg)); }

}  // namespace deepinfer

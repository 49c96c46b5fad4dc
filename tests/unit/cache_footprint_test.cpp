// The engine's memory plan counts the packed cache formats (spec §4.4, §8.3), checked on the real
// V4-Flash and V4.1-Flash shapes from their config values alone (no weights): the global bytes per token
// and the fixed per-sequence bytes, which must equal what a fresh SequenceState holds.
#include "engine/cache_footprint.h"

#include <gtest/gtest.h>

#include "model/config.h"
#include "model/sequence_state.h"

namespace deepinfer {
namespace {

ModelConfig v4_flash() {  // spec §1.1: 43 layers + 1 MTP, compress_ratios [0, 0, 4, 128, ..., 4, 128, 4, 0]
  ModelConfig c;
  c.arch = Architecture::kDeepseekV4;
  c.n_layers = 43;
  c.n_mtp_layers = 1;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.index_head_dim = 128;
  c.window_size = 128;
  c.compress_ratios = {0, 0};
  for (int l = 2; l < 43; ++l) c.compress_ratios.push_back(l % 2 == 0 ? 4 : 128);
  c.compress_ratios.push_back(0);
  return c;
}

ModelConfig v41_flash() {  // spec §5.1: 40 layers + 3 DSpark stages, KV sources 2, 8, 14 (ratio 2), 20 (ratio 1)
  ModelConfig c;
  c.arch = Architecture::kDeepseekV41;
  c.n_layers = 40;
  c.n_mtp_layers = 3;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.index_head_dim = 128;
  c.window_size = 128;
  c.compress_ratios = {0, 0};
  for (int l = 2; l < 20; ++l) c.compress_ratios.push_back(2);
  for (int l = 20; l < 40; ++l) c.compress_ratios.push_back(1);
  c.compress_ratios.insert(c.compress_ratios.end(), {0, 0, 0});
  c.kv_source_layers = {2, 8, 14, 20};
  c.index_source_layers = {2, 8, 14, 20, 24, 28, 32, 36};
  return c;
}

TEST(CacheFootprint, V41FlashHolds890BytesPerToken) {
  const ModelConfig c = v41_flash();
  const SequenceState fresh = new_sequence_state(c);
  const CacheFootprint f = cache_footprint_of(c, fresh.fixed_bytes(), kDefaultPageBytes);
  EXPECT_DOUBLE_EQ(f.bytes_per_token(), 890.0);  // 3 x (288 + 68) / 2 + (288 + 68)
  // 16 KiB pages: 56 rows of 288 B, 240 keys of 68 B. 1024 tokens: 512 rows per ratio-2 source, 1024 for ratio 1.
  EXPECT_EQ(f.pages_at(1024), 3 * (10 + 3) + (19 + 5));
  EXPECT_EQ(f.bytes_at(1024) - f.bytes_at(0), f.pages_at(1024) * kDefaultPageBytes);
  // Fixed: 43 window rings (40 layers + 3 DSpark stages) of 144 slots x 528 B and an 8-byte write stamp, plus
  // the fp32 kv / score rings (2 + 16 rows x 512) of the three ratio-2 sources.
  EXPECT_EQ(f.fixed_bytes, 43 * 144 * (528 + 8) + 3 * (18 * 512 * 4 * 2));
}

TEST(CacheFootprint, V4FlashHoldsAbout3500BytesPerToken) {
  const ModelConfig c = v4_flash();
  const SequenceState fresh = new_sequence_state(c);
  const CacheFootprint f = cache_footprint_of(c, fresh.fixed_bytes(), kDefaultPageBytes);
  EXPECT_DOUBLE_EQ(f.bytes_per_token(), 21 * (584 + 68) / 4.0 + 20 * 584 / 128.0);  // 3514.25
  // 16 KiB pages: 28 rows of 584 B, 240 keys of 68 B. 512 tokens: 128 rows (5 pages) + 128 keys (1 page) per
  // ratio-4 layer, 4 rows (1 page) per ratio-128 layer.
  EXPECT_EQ(f.pages_at(512), 21 * (5 + 1) + 20 * 1);
  // Fixed: 44 window rings of 144 x 584 B and an 8-byte write stamp per slot; ratio-4 layers hold kv / score
  // rings of 24 rows x 1024 (main) and 24 x 256 (indexer), ratio-128 layers 144 x 512, all fp32.
  EXPECT_EQ(f.fixed_bytes, 44 * 144 * (584 + 8) + 21 * (24 * 1024 + 24 * 256) * 8 + 20 * (144 * 512) * 8);
}

TEST(CacheFootprint, MatchesAGrownSequenceState) {
  // bytes_at(n) == cache_bytes() of a sequence after n tokens: grow the rows as the model would.
  for (const ModelConfig& c : {v4_flash(), v41_flash()}) {
    SequenceState s = new_sequence_state(c);
    const CacheFootprint f = cache_footprint_of(c, s.fixed_bytes(), kDefaultPageBytes);
    EXPECT_EQ(s.cache_bytes(), f.bytes_at(0));
    const int64_t n = 300;
    std::vector<float> zeros(512, 0.0f);
    for (int l = 0; l < c.n_layers; ++l) {
      LayerState& ls = s.layers[size_t(l)];
      for (CompressorState* cs : {&ls.compressor, &ls.index_compressor}) {
        if (cs->row_format.n_values == 0) continue;
        for (int64_t j = 0; j < n / cs->ratio; ++j) cs->append_row(zeros.data());
      }
    }
    EXPECT_EQ(s.cache_bytes(), f.bytes_at(n));
  }
}

}  // namespace
}  // namespace deepinfer

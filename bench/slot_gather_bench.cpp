// Micro-benchmark of SlotGather, the host side of a device backend's attention call: a decode step of `batch`
// sequences at V4 shapes (a 144-slot window ring of 584-byte rows, then 512 compressed rows picked by top-k from
// 16 KiB pages of 28 rows), every row packed. At batch 256 that is ~164k slots a layer, each looked up once to
// give every distinct row one index. With kept = 1 the compressed part is a kept selection's instead
// (SparseAttentionParams::kept_selection, DEEPINFER_CUDA_INDEX_SELECT=kept): every visible compressed row (here
// the same 512, at 2048 tokens of context) handed over as the pages' runs. Counter: slots per second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/slot_gather.h"
#include "model/kv_format.h"

namespace deepinfer {
namespace {

void BM_SlotGatherDecode(benchmark::State& state) {
  const int64_t batch = state.range(0), H = 64, D = 512, ring = 144, n_compressed = 2048 / 4, top_k = 512;
  const bool kept = state.range(1) != 0;
  const KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, D, 64);
  const int64_t rows_per_page = (16 << 10) / format.row_bytes;
  std::mt19937 rng(1);
  std::vector<std::unique_ptr<uint8_t[]>> memory;  // each ring and each page its own allocation, as in the model
  std::vector<PackedSlot> packed;
  std::vector<uint64_t> stamps(static_cast<size_t>(n_compressed), 1);
  std::vector<std::vector<PackedRowRun>> runs(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) {
    memory.push_back(std::make_unique<uint8_t[]>(size_t(ring * format.row_bytes)));
    for (int64_t j = 0; j < ring - 16; ++j) packed.push_back({memory.back().get() + j * format.row_bytes, &format, 1});
    std::vector<uint8_t*> pages;
    for (int64_t p = 0; p < (n_compressed + rows_per_page - 1) / rows_per_page; ++p) {
      memory.push_back(std::make_unique<uint8_t[]>(size_t(16 << 10)));
      pages.push_back(memory.back().get());
      runs[size_t(s)].push_back({pages.back(), std::min(rows_per_page, n_compressed - p * rows_per_page), stamps.data()});
    }
    std::vector<int64_t> order(static_cast<size_t>(n_compressed));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t r = order[size_t(j)];
      packed.push_back(kept ? PackedSlot{} : PackedSlot{pages[size_t(r / rows_per_page)] + (r % rows_per_page) * format.row_bytes, &format, 1});
    }
  }
  const int64_t n_slots = (ring - 16) + top_k;
  std::vector<const float*> none(packed.size(), nullptr);
  std::vector<float> q(static_cast<size_t>(H * D)), sink(static_cast<size_t>(H));
  std::vector<SparseAttentionParams> ps;
  std::vector<KeptSelectionSlots> kept_slots(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) {
    kept_slots[size_t(s)] = {.selected = nullptr, .n = top_k, .at = ring - 16, .ascending = false, .format = &format,
                             .runs = runs[size_t(s)], .n_rows = n_compressed};
    ps.push_back({q.data(), H, D, &none[size_t(s * n_slots)], n_slots, sink.data(), 0.04, true, nullptr,
                  &packed[size_t(s * n_slots)]});
    if (kept) ps.back().kept_selection = &kept_slots[size_t(s)];
  }
  SlotGather gather;
  for (auto _ : state) {
    gather.gather(ps);
    benchmark::DoNotOptimize(gather.slot_rows().data());
  }
  state.counters["slots/s"] = benchmark::Counter(double(batch * n_slots), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SlotGatherDecode)->ArgsProduct({{1, 64, 256}, {0, 1}})->ArgNames({"batch", "kept"})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace deepinfer

// Micro-benchmark of SlotGather, the host side of a device backend's attention call: a decode step of `batch`
// sequences at V4 shapes (a 144-slot window ring of 584-byte rows, then 512 compressed rows picked by top-k from
// 16 KiB pages of 28 rows), every row packed. At batch 256 that is ~164k slots a layer, each looked up once to
// give every distinct row one index. With kept = 1 the compressed part is a kept selection's instead
// (SparseAttentionParams::kept_selection, DEEPINFER_CUDA_INDEX_SELECT=kept): every visible compressed row (here
// the same 512, at 2048 tokens of context) handed over as the pages' runs. With unshared = 1 each token's rows are
// placed without a lookup and its window ring whole (SparseAttentionParams::rows_unshared and window_ring, as the
// model hands a decode step's tokens over). With mirror = 1 each packed group's slots are then found in a row mirror
// as CudaBackend::plan_upload finds them (mirror_group_slots; DEEPINFER_CUDA_KV=mirror), each sequence's rows with
// stamps of their own and one window row per sequence rewritten each step (copied again; the rest found). threads:
// the host threads the gather (in parts where every token is unshared) and the mirror run on, as the backend runs them
// on its host backend's threads.
// Counter: slots per second.
// BM_KeptSelectionHostSide: the whole host side of one batch-1 decode step's attention call with a kept selection at
// longer contexts (every visible compressed row handed over): the gather, then each packed row's slot in the row
// mirror (DEEPINFER_CUDA_KV=mirror; every row already there, as in a decode step), on one thread: with runs = 1 as
// the backend does it (mirror_group_slots: the pages' runs found whole), with runs = 0 row by row. Counter: the
// handed-over rows per second; the time per call is what Backend::kept_selection_extra_rows weighs against a wait.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/row_mirror.h"
#include "backend/slot_gather.h"
#include "model/kv_format.h"

namespace deepinfer {
namespace {

void BM_SlotGatherDecode(benchmark::State& state) {
  const int64_t batch = state.range(0), H = 64, D = 512, ring = 144, n_compressed = 2048 / 4, top_k = 512;
  const bool kept = state.range(1) != 0, unshared = state.range(2) != 0, mirrored = state.range(3) != 0;
  std::unique_ptr<Backend> threads;  // the host threads (nullptr: the calling thread alone)
  std::string error;
  if (state.range(4) > 1 && !(threads = make_fast_backend(int(state.range(4)), &error))) state.SkipWithError(error.c_str());
  const KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, D, 64);
  const int64_t rows_per_page = (16 << 10) / format.row_bytes;
  std::mt19937 rng(1);
  std::vector<std::unique_ptr<uint8_t[]>> memory;  // each ring and each page its own allocation, as in the model
  std::vector<PackedSlot> packed;
  // Each sequence's stamps: its ring's rows, then its compressed rows (distinct, as the model's).
  uint64_t next_stamp = 1;
  std::vector<std::vector<uint64_t>> stamps(static_cast<size_t>(batch));
  for (std::vector<uint64_t>& sequence : stamps) {
    for (int64_t j = 0; j < ring + n_compressed; ++j) sequence.push_back(next_stamp++);
  }
  std::vector<std::vector<PackedRowRun>> runs(static_cast<size_t>(batch));
  std::vector<PackedRowRun> rings;  // each sequence's window ring, whole (SparseAttentionParams::window_ring)
  for (int64_t s = 0; s < batch; ++s) {
    const uint64_t* sequence = stamps[size_t(s)].data();
    memory.push_back(std::make_unique<uint8_t[]>(size_t(ring * format.row_bytes)));
    rings.push_back({memory.back().get(), ring, sequence});
    for (int64_t j = 0; j < ring - 16; ++j) packed.push_back({memory.back().get() + j * format.row_bytes, &format, sequence[j]});
    std::vector<uint8_t*> pages;
    for (int64_t p = 0; p < (n_compressed + rows_per_page - 1) / rows_per_page; ++p) {
      memory.push_back(std::make_unique<uint8_t[]>(size_t(16 << 10)));
      pages.push_back(memory.back().get());
      runs[size_t(s)].push_back({pages.back(), std::min(rows_per_page, n_compressed - p * rows_per_page), sequence + ring + p * rows_per_page});
    }
    std::vector<int64_t> order(static_cast<size_t>(n_compressed));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t r = order[size_t(j)];
      packed.push_back(kept ? PackedSlot{}
                            : PackedSlot{pages[size_t(r / rows_per_page)] + (r % rows_per_page) * format.row_bytes, &format, sequence[ring + r]});
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
    ps.back().rows_unshared = unshared;
    if (unshared) ps.back().window_ring = &rings[size_t(s)];
  }
  SlotGather gather;
  RowMirror mirror(mirrored ? int64_t(1) << 24 : 1);  // (its index sized for the arena: only where it is used)
  std::vector<int64_t> slots, copies;
  int64_t step = 0, copied = 0;
  auto decode_step = [&] {
    if (mirrored) {  // each sequence's ring rewrites one of its window rows
      const int64_t j = step++ % (ring - 16);
      for (int64_t s = 0; s < batch; ++s) stamps[size_t(s)][size_t(j)] = packed[size_t(s * n_slots + j)].stamp = next_stamp++;
    }
    gather.gather(ps, threads.get());
    benchmark::DoNotOptimize(gather.slot_rows().data());
    if (!mirrored) return;
    for (const SlotGather::PackedGroup& g : gather.packed_groups()) {
      mirror_group_slots(mirror, g, threads.get(), slots, copies);
      copied += int64_t(copies.size());
      benchmark::DoNotOptimize(slots.data());
    }
  };
  decode_step();  // every row in the mirror from here on, as in a decode step
  step = copied = 0;
  for (auto _ : state) decode_step();
  state.counters["slots/s"] = benchmark::Counter(double(batch * n_slots), benchmark::Counter::kIsIterationInvariantRate);
  if (mirrored) state.counters["copied/step"] = double(copied) / double(std::max<int64_t>(step, 1));
}
BENCHMARK(BM_SlotGatherDecode)
    ->ArgsProduct({{1, 64, 256}, {0, 1}, {0, 1}, {0, 1}, {1, 2}})
    ->ArgNames({"batch", "kept", "unshared", "mirror", "threads"})
    ->Unit(benchmark::kMillisecond);

void BM_KeptSelectionHostSide(benchmark::State& state) {
  const int64_t context = state.range(0), H = 64, D = 512, ring = 144, n_compressed = context / 4, top_k = 512;
  const KvRowFormat format = kv_row_format(KvRowKind::kV4Kv, D, 64);
  const int64_t rows_per_page = (16 << 10) / format.row_bytes;
  std::vector<std::unique_ptr<uint8_t[]>> memory;
  memory.push_back(std::make_unique<uint8_t[]>(size_t(ring * format.row_bytes)));
  std::vector<PackedSlot> packed;
  std::vector<uint64_t> stamps;  // the window rows', then the compressed rows', page by page (distinct, as the model's)
  for (int64_t j = 0; j < ring + n_compressed; ++j) stamps.push_back(uint64_t(j + 1));
  for (int64_t j = 0; j < ring - 16; ++j) packed.push_back({memory.back().get() + j * format.row_bytes, &format, stamps[size_t(j)]});
  std::vector<PackedRowRun> runs;
  for (int64_t p = 0; p * rows_per_page < n_compressed; ++p) {
    memory.push_back(std::make_unique<uint8_t[]>(size_t(16 << 10)));
    runs.push_back({memory.back().get(), std::min(rows_per_page, n_compressed - p * rows_per_page),
                    &stamps[size_t(ring + p * rows_per_page)]});
  }
  packed.resize(size_t(ring - 16 + top_k));
  const int64_t n_slots = ring - 16 + top_k;
  std::vector<const float*> none(packed.size(), nullptr);
  std::vector<float> q(static_cast<size_t>(H * D)), sink(static_cast<size_t>(H));
  const KeptSelectionSlots kept{.selected = nullptr, .n = top_k, .at = ring - 16, .ascending = false, .format = &format,
                                .runs = runs, .n_rows = n_compressed};
  SparseAttentionParams p{q.data(), H, D, none.data(), n_slots, sink.data(), 0.04, true, nullptr, packed.data()};
  p.kept_selection = &kept;
  p.rows_unshared = true;  // as the model hands a decode step's token over
  SlotGather gather;
  RowMirror mirror(1 << 20);
  std::vector<int64_t> slots, copies;
  // CudaBackend::plan_upload's host work for the one packed group (on one thread here); runs = 0: every row looked up
  // by its stamp, as before the mirror remembered runs.
  const bool run_lookups = state.range(1) != 0;
  auto lookup = [&] {
    const SlotGather::PackedGroup& g = gather.packed_groups()[0];
    if (run_lookups) return mirror_group_slots(mirror, g, nullptr, slots, copies);
    slots.resize(g.rows.size());
    for (size_t k = 0; k < g.rows.size(); ++k) slots[k] = mirror.find(g.stamps[k]);
    mirror.place_missing(g.stamps, slots, copies);
  };
  gather.gather({&p, 1});
  lookup();  // every row in the mirror from here on
  for (auto _ : state) {
    gather.gather({&p, 1});
    lookup();
    benchmark::DoNotOptimize(slots.data());
  }
  if (!copies.empty()) state.SkipWithError("rows missing from the mirror after the first call");
  state.counters["rows/s"] = benchmark::Counter(double(ring - 16 + n_compressed), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KeptSelectionHostSide)->ArgsProduct({{2048, 8192, 32768, 131072}, {0, 1}})->ArgNames({"context", "runs"})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer

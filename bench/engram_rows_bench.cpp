// Micro-benchmark of the host's side of V4.1's Engram rows in a decode step, at V4.1-Flash's shapes (24 table rows a
// token of 256 values, a table far larger than the caches, rows picked at random as the hashing does). stored = 0:
// the rows decoded to floats (engram_table_row) and QDQ'd (qdq_fp8_v41 in 128-blocks), as the host path does and as
// the CUDA backend's engram_gate did until stop 51 (then uploading 4 bytes a value); stored = 1: the rows' stored
// bytes gathered as CudaBackend::engram_gate now does (copy_engram_table_rows: e4m3 codes and e8m0 scales; the device
// decodes and QDQs).
// One thread (both paths run on the host backend's threads in the engine). Counters: tokens per second, and the bytes a token that then cross to the device.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "model/engram.h"
#include "model/ops.h"

namespace deepinfer {
namespace {

void BM_EngramRowsHostSide(benchmark::State& state) {
  const int64_t batch = state.range(0), row_dim = 256, rows_per_token = 24, width = rows_per_token * row_dim;
  const int64_t table_rows = int64_t(1) << 20;  // 264 MB of codes and scales
  const bool stored = state.range(1) != 0;
  std::mt19937 rng(1);
  std::vector<uint8_t> codes(size_t(table_rows * row_dim)), scales(size_t(table_rows * row_dim / 32));
  for (size_t i = 0; i < codes.size(); i += 64) codes[i] = uint8_t(rng() & 0x7e);  // touched: real pages, not zero
  for (uint8_t& s : scales) s = uint8_t(120 + rng() % 8);
  const EngramTable table{.codes = codes.data(), .scales = scales.data(), .rows = table_rows, .dim = row_dim};
  std::vector<int64_t> rows(size_t(batch * rows_per_token));
  std::vector<float> x(size_t(batch * width));
  std::vector<uint8_t> gathered(size_t(batch * width + batch * width / 32));
  for (auto _ : state) {
    state.PauseTiming();
    for (int64_t& r : rows) r = int64_t(rng() % uint64_t(table_rows));  // each step's rows anew
    state.ResumeTiming();
    if (stored) {
      copy_engram_table_rows(table, rows.data(), 0, batch * rows_per_token, gathered.data(), gathered.data() + batch * width);
      benchmark::DoNotOptimize(gathered.data());
    } else {
      for (int64_t i = 0; i < batch * rows_per_token; ++i) engram_table_row(table, rows[size_t(i)], &x[size_t(i * row_dim)]);
      for (int64_t t = 0; t < batch; ++t) qdq_fp8_v41(&x[size_t(t * width)], width, 128);
      benchmark::DoNotOptimize(x.data());
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(double(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/token"] = double(stored ? width + width / 32 : width * 4);
}
BENCHMARK(BM_EngramRowsHostSide)->ArgNames({"batch", "stored"})->ArgsProduct({{1, 64, 256}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer

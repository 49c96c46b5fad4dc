// Micro-benchmark of copy_on_threads (host_copy.h): one copy of `mb` MB between host arrays, as a device backend
// stages a batch-256 step's arrays (V4-Flash: the attention's queries, 33 MB a layer; the mHC stream, 16 MB), on
// `threads` host threads. Counter: bytes per second (each byte read once and written once).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/host_copy.h"

namespace deepinfer {
namespace {

void BM_HostCopy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0)) << 20;
  std::unique_ptr<Backend> threads;
  std::string error;
  if (state.range(1) > 1 && !(threads = make_fast_backend(int(state.range(1)), &error))) state.SkipWithError(error.c_str());
  std::vector<uint8_t> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    copy_on_threads(threads.get(), dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}
BENCHMARK(BM_HostCopy)->ArgsProduct({{4, 33}, {1, 2}})->ArgNames({"mb", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace deepinfer

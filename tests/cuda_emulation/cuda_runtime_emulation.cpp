// The emulated CUDA runtime (include/cuda_runtime.h says what it is for). Ordering rules kept from the real
// runtime, because the backend's correctness depends on them:
//   - an operation on a stream runs after the ones queued before it on that stream, and at the latest when
//     the stream is synchronised (here: exactly then, the latest moment the real runtime allows; or, with
//     DEEPINFER_CUDA_EMULATION=eager, as soon as it is queued, the earliest);
//   - a copy from pageable host memory to the device takes the source bytes when it is queued (the driver
//     stages them), while a copy from pinned memory (cudaMallocHost) reads them when it runs;
//   - a copy from the device into pageable host memory returns only once it has landed (the stream is run);
//   - cudaMemcpy, cudaFree and cudaFreeHost wait for all queued work;
//   - an event's synchronisation runs its stream's work up to the event's latest record, and no further.
#include "cuda_emulation.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct CUstream_st {
  std::vector<std::function<void()>> queue;
  bool capturing = false;
  std::vector<std::function<void()>> captured;  // while capturing: the operations, in order
};
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};
struct CUevent_st {
  CUstream_st* stream = nullptr;  // of the latest record
  uint64_t recorded = 0;          // records so far
  uint64_t reached = 0;           // the latest record whose marker has run
};

namespace deepinfer::cuda_emulation {
namespace {

struct State {
  std::recursive_mutex mutex;
  std::vector<CUstream_st*> streams;
  std::map<uintptr_t, size_t> pinned;  // start -> bytes of each cudaMallocHost block
  std::map<const void*, int> max_dynamic_shared;  // kernel -> its opt-in (cudaFuncSetAttribute)
  CUstream_st legacy;                  // stream 0
};

State& state() {
  static State* s = new State;  // never destroyed: buffers freed at exit still find it
  return *s;
}

void run(CUstream_st* stream) {
  // Moved out first, so that the queue may take new work while this runs (none of it queues more today).
  std::vector<std::function<void()>> work;
  work.swap(stream->queue);
  for (auto& w : work) w();
}

// The stream's queued work in order until done() holds (or the queue is empty).
void run_until(CUstream_st* stream, const std::function<bool()>& done) {
  while (!done() && !stream->queue.empty()) {
    std::function<void()> w = std::move(stream->queue.front());
    stream->queue.erase(stream->queue.begin());
    w();
  }
}

void run_all() {
  State& s = state();
  run(&s.legacy);
  for (CUstream_st* stream : s.streams) run(stream);
}

CUstream_st* resolve(cudaStream_t stream) { return stream ? stream : &state().legacy; }

bool is_pinned(const void* p) {
  State& s = state();
  const auto at = uintptr_t(p);
  auto it = s.pinned.upper_bound(at);
  if (it == s.pinned.begin()) return false;
  --it;
  return at < it->first + it->second;
}

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard lock(state().mutex);
  if (resolve(stream)->capturing) {
    resolve(stream)->captured.push_back(std::move(work));
    return;
  }
  // DEEPINFER_CUDA_EMULATION=eager: every operation runs as it is queued, the earliest moment the real runtime
  // allows (host code that fills a staging buffer after queuing its copy then reads stale bytes); by default
  // at the stream's next synchronisation, the latest (host code that refills a buffer a queued copy still reads
  // then sends the new bytes).
  static const bool eager = [] {
    const char* mode = std::getenv("DEEPINFER_CUDA_EMULATION");
    return mode && std::string(mode) == "eager";
  }();
  if (eager) {
    work();
    return;
  }
  resolve(stream)->queue.push_back(std::move(work));
}

size_t max_dynamic_shared_bytes(const void* kernel) {
  std::lock_guard lock(state().mutex);
  const auto it = state().max_dynamic_shared.find(kernel);
  return it == state().max_dynamic_shared.end() ? size_t(48) * 1024 : size_t(it->second);
}

}  // namespace deepinfer::cuda_emulation

using namespace deepinfer::cuda_emulation;

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = {};
  std::strncpy(prop->name, "emulated device", sizeof prop->name - 1);
  prop->totalGlobalMem = size_t(16) << 30;
  prop->sharedMemPerBlockOptin = 227 * 1024;  // an H100's / H200's opt-in limit
  prop->multiProcessorCount = 132;
  prop->major = 9;  // an H100's / H200's compute capability (the wgmma path's)
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return cudaErrorInvalidDevice;
  if (attr != cudaDevAttrMultiProcessorCount) return cudaErrorInvalidValue;
  *value = prop.multiProcessorCount;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || size_t(value) > prop.sharedMemPerBlockOptin) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard lock(state().mutex);
  state().max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = size_t(16) << 30;
  *free_bytes = *total_bytes;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  // Not zeroed, as device memory is not: filled with 0xff bytes (NaN floats, -1 integers), so that a kernel that reads
  // what nothing wrote gets garbage here too, never the zeros fresh host pages hold.
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (*ptr) std::memset(*ptr, 0xff, bytes);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard lock(state().mutex);
  run_all();
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  std::lock_guard lock(state().mutex);
  *ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*ptr) return cudaErrorMemoryAllocation;
  state().pinned[uintptr_t(*ptr)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard lock(state().mutex);
  run_all();
  state().pinned.erase(uintptr_t(ptr));
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
  std::lock_guard lock(state().mutex);
  *stream = new CUstream_st;
  state().streams.push_back(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  run(stream);
  std::erase(state().streams, stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (resolve(stream)->capturing) return cudaErrorStreamCaptureUnsupported;
  run(resolve(stream));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(state().mutex);
  for (CUstream_st* stream : state().streams) {
    if (stream->capturing) return cudaErrorStreamCaptureUnsupported;
  }
  run_all();
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind /*kind*/) {
  std::lock_guard lock(state().mutex);
  run_all();
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dst_pitch || width > src_pitch) return cudaErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  // Whether a capture takes a zero-byte copy is not documented (HIP's refused zero-byte memsets), so the backend must
  // not queue one there: refused here.
  if (resolve(stream)->capturing && width * height == 0) return cudaErrorInvalidValue;
  if (resolve(stream)->capturing && ((kind == cudaMemcpyHostToDevice && !is_pinned(src)) ||
                                     (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)))) {
    return cudaErrorStreamCaptureUnsupported;
  }
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (kind == cudaMemcpyHostToDevice && !is_pinned(src)) {  // pageable: staged now
    auto staged = std::make_shared<std::vector<uint8_t>>(width * height);
    for (size_t r = 0; r < height; ++r) std::memcpy(staged->data() + r * width, s + r * src_pitch, width);
    enqueue(stream, [=] {
      for (size_t r = 0; r < height; ++r) std::memcpy(d + r * dst_pitch, staged->data() + r * width, width);
    });
    return cudaSuccess;
  }
  enqueue(stream, [=] {
    for (size_t r = 0; r < height; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
  });
  if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)) run(resolve(stream));
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return cudaMemcpy2DAsync(dst, bytes, src, bytes, bytes, 1, kind, stream);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  enqueue(stream, [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(state().mutex);
  if (resolve(stream)->capturing) return cudaErrorStreamCaptureUnsupported;  // no event nodes here
  event->stream = resolve(stream);
  const uint64_t n = ++event->recorded;
  enqueue(stream, [event, n] { event->reached = std::max(event->reached, n); });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(state().mutex);
  if (event->stream) run_until(event->stream, [event] { return event->reached >= event->recorded; });
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {  // (a GPU frees it once its last record completes)
  cudaEventSynchronize(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode /*mode*/) {
  std::lock_guard lock(state().mutex);
  CUstream_st* s = resolve(stream);
  if (!stream || s->capturing) return cudaErrorStreamCaptureUnsupported;  // not the legacy stream, not twice
  s->capturing = true;
  s->captured.clear();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard lock(state().mutex);
  CUstream_st* s = resolve(stream);
  if (!s->capturing) return cudaErrorInvalidValue;
  s->capturing = false;
  *graph = new CUgraph_st{std::move(s->captured)};
  s->captured.clear();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long /*flags*/) {
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  for (const auto& node : exec->nodes) enqueue(stream, node);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// The emulated runtime's ordering rules (cuda_runtime_emulation.cpp), which the emulated-device tests rely on
// to expose host code that touches a buffer at the wrong time. Default (deferred) mode only: ctest leaves this
// suite out of the eager repeats.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_emulation.h"

namespace deepinfer {
namespace {

class CudaEmulation : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* mode = std::getenv("DEEPINFER_CUDA_EMULATION");
    if (mode && std::string(mode) == "eager") GTEST_SKIP() << "these rules are the deferred mode's";
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&device_, 64), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&pinned_, 64), cudaSuccess);
  }
  void TearDown() override {
    if (!stream_) return;
    cudaFreeHost(pinned_);
    cudaFree(device_);
    cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
  void* device_ = nullptr;
  void* pinned_ = nullptr;
};

TEST_F(CudaEmulation, APinnedCopyReadsItsSourceWhenTheStreamRuns) {
  std::memset(pinned_, 1, 64);
  ASSERT_EQ(cudaMemcpyAsync(device_, pinned_, 64, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  std::memset(pinned_, 2, 64);  // too early on a real device too: the copy may not have read it yet
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(static_cast<unsigned char*>(device_)[0], 2);
}

TEST_F(CudaEmulation, APageableCopyTakesItsSourceWhenQueued) {
  std::vector<unsigned char> pageable(64, 1);
  ASSERT_EQ(cudaMemcpyAsync(device_, pageable.data(), 64, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  std::fill(pageable.begin(), pageable.end(), 2);  // allowed: the driver staged the bytes
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(static_cast<unsigned char*>(device_)[0], 1);
}

TEST_F(CudaEmulation, WorkWaitsForTheSynchronisationAndRunsInOrder) {
  std::memset(pinned_, 0, 64);
  std::vector<int> order;
  cuda_emulation::enqueue(stream_, [&] { order.push_back(1); });
  ASSERT_EQ(cudaMemcpyAsync(pinned_, device_, 64, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  cuda_emulation::enqueue(stream_, [&] { order.push_back(2); });
  EXPECT_TRUE(order.empty());  // a copy into pinned memory does not wait either
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST_F(CudaEmulation, AnEventsSynchronisationRunsTheWorkUpToItsLatestRecordOnly) {
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  std::vector<int> order;
  cuda_emulation::enqueue(stream_, [&] { order.push_back(1); });
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  cuda_emulation::enqueue(stream_, [&] { order.push_back(2); });
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  cuda_emulation::enqueue(stream_, [&] { order.push_back(3); });
  EXPECT_TRUE(order.empty());
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);  // passed already: nothing more runs
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(cudaEventDestroy(event), cudaSuccess);
}

TEST_F(CudaEmulation, ACopyIntoPageableMemoryAndAFreeWaitForQueuedWork) {
  std::memset(device_, 7, 64);
  bool ran = false;
  cuda_emulation::enqueue(stream_, [&] { ran = true; });
  std::vector<unsigned char> pageable(64, 0);
  ASSERT_EQ(cudaMemcpyAsync(pageable.data(), device_, 64, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  EXPECT_TRUE(ran);
  EXPECT_EQ(pageable[0], 7);
  bool ran_before_free = false;
  cuda_emulation::enqueue(stream_, [&] { ran_before_free = true; });
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&other, 16), cudaSuccess);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
  EXPECT_TRUE(ran_before_free);
}

}  // namespace
}  // namespace deepinfer

// The launch checks of the device emulation (launch_emulation.h).
#include "launch_emulation.h"

#include <string>

namespace deepinfer::device_emulation {

void check_launch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  const size_t threads = size_t(block.x) * block.y * block.z;
  require(threads >= 1 && threads <= 1024 && block.z <= 64, "launch: a block needs 1 to 1024 threads");
  require(grid.x >= 1 && grid.y >= 1 && grid.z >= 1, "launch: an empty grid");
  require(grid.x <= 0x7fffffffu && grid.y <= 65535 && grid.z <= 65535, "launch: the grid is past the device's limits");
  cudaDeviceProp prop;
  require(cudaGetDeviceProperties(&prop, 0) == cudaSuccess, "launch: no device");
  require(shared_bytes <= prop.sharedMemPerBlockOptin, "launch: more dynamic shared memory than the device has");
  if (shared_bytes > 48 * 1024 && shared_bytes > cuda_emulation::max_dynamic_shared_bytes(kernel)) {
    fail(("launch: " + std::to_string(shared_bytes) +
          " bytes of dynamic shared memory without cudaFuncSetAttribute(MaxDynamicSharedMemorySize) for the kernel")
             .c_str());
  }
}

}  // namespace deepinfer::device_emulation

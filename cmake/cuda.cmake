# The CUDA backend (-DDEEPINFER_CUDA=ON): src/backend/cuda joins deepinfer_lib, with the CUDA runtime linked
# privately so no CUDA header or include path reaches the rest of the project. Architectures: Hopper
# (sm_90a) first, Blackwell (sm_100a) and the RTX cards (sm_89, sm_120); override with
# -DCMAKE_CUDA_ARCHITECTURES=90a (scripts/gpu_check.sh builds for the H200 alone). Every kernel is portable
# (fp32 FMA, or mma.sync with bf16 operands, sm_80 and later), so each architecture runs the same code.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a 100a 89 120)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

file(GLOB DEEPINFER_CUDA_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp)
target_sources(deepinfer_lib PRIVATE ${DEEPINFER_CUDA_SOURCES})
# deepinfer_lib exists before CUDA is enabled, so its CUDA properties are set here, not from CMAKE_CUDA_*.
# The .cu files include only src/backend/cuda headers and core/status.h: C++17 is enough.
set_target_properties(deepinfer_lib PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
target_link_libraries(deepinfer_lib PRIVATE CUDA::cudart_static)
target_compile_definitions(deepinfer_lib PRIVATE DEEPINFER_HAVE_CUDA=1)
# No -use_fast_math: the kernels rely on IEEE rounding and subnormals (e8m0 scales reach 2^-127).
target_compile_options(deepinfer_lib PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)

# The kernel timing program of scripts/gpu_check.sh (reports, asserts nothing).
add_executable(cuda_kernel_timing ${CMAKE_SOURCE_DIR}/bench/cuda/kernel_timing.cpp)
target_link_libraries(cuda_kernel_timing PRIVATE deepinfer_lib CUDA::cudart_static CUDA::cublasLt)

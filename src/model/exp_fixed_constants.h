// exp_fixed's (model/ops.h) constants, shared by the scalar code, its 8-lane AVX-512 form (ops_avx512.h) and the
// CUDA kernels' exact exp (backend/cuda/device_exact_math.cuh). A header of its own, free of any other include:
// nvcc compiles the kernels as C++17, and ops.h needs C++20.
#pragma once

namespace deepinfer {

inline constexpr double kExpFixedMaxArg = 700.0;
inline constexpr double kLog2e = 0x1.71547652b82fep0;
inline constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;   // ln 2 rounded to double
inline constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;  // ln 2 - kLn2Hi
// 1 / k!, k = 0..13, rounded to double.
inline constexpr double kExpTaylor[14] = {
    1.0, 1.0, 0.5, 0x1.5555555555555p-3, 0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10,
    0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22,
    0x1.ae64567f544e4p-26, 0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33};

}  // namespace deepinfer

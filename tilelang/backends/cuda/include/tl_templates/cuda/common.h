// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/common.h -- shared definitions for tilelang's CUDA device helpers.
//
// Every other header in this directory includes this one. It provides:
//   * fixed-width integer types that work under both nvcc and NVRTC
//     (NVRTC has no <cstdint>; libcu++'s <cuda/std/cstdint> is used instead, the same
//     way TIRx's generated prelude does it),
//   * the half / bfloat16 type aliases `half_t` and `bfloat16_t` (global and in `tl::`);
//     `TL_NO_FP16` / `TL_NO_BF16`, when defined before this header, leave out cuda_fp16.h /
//     cuda_bf16.h and the matching alias (the build glue defines them for kernels that use
//     no half / bfloat16 values: each of those headers costs the device compiler time),
//   * the `TL_DEVICE` / `TL_HOST_DEVICE` function qualifiers,
//   * `tl::ceildiv`, `tl::smem_ptr_to_uint` (generic -> 32-bit shared address) and
//     `tl::is_aligned(ptr, n)` (whether ptr is a multiple of n bytes).
//
// The build glue (tilelang/backends/cuda/build.py) pastes these headers' text in front
// of the TIRx-generated CUDA source, so lowered code can call the helpers by name through
// `T.call_extern`. The headers also work with a plain `#include "tl_templates/cuda/..."`.
// They use include guards (not `#pragma once`) so that pasting them into a translation
// unit's main file does not warn.
#ifndef TL_TEMPLATES_CUDA_COMMON_H_
#define TL_TEMPLATES_CUDA_COMMON_H_

#ifdef __CUDACC_RTC__
#include <cuda/std/cstdint>
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::int8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uint8_t;
#else
#include <cstdint>
#endif

#ifndef TL_NO_BF16
#include <cuda_bf16.h>
#endif
#ifndef TL_NO_FP16
#include <cuda_fp16.h>
#endif

// Qualifier for device helpers: always inlined, device only.
#ifndef TL_DEVICE
#define TL_DEVICE __forceinline__ __device__
#endif
// Qualifier for helpers that are also usable from host code (index arithmetic).
#ifndef TL_HOST_DEVICE
#define TL_HOST_DEVICE __forceinline__ __host__ __device__
#endif

// 16-bit floating point element types as tilelang names them.
#ifndef TL_NO_FP16
using half_t = __half;
#endif
#ifndef TL_NO_BF16
using bfloat16_t = __nv_bfloat16;
#endif

namespace tl {

#ifndef TL_NO_FP16
using half_t = ::half_t;
#endif
#ifndef TL_NO_BF16
using bfloat16_t = ::bfloat16_t;
#endif

// Integer ceiling division: ceildiv(7, 4) == 2. Requires b > 0 and a >= 0.
template <typename T>
TL_HOST_DEVICE constexpr T ceildiv(T a, T b) {
  return (a + b - 1) / b;
}

// Convert a generic pointer into shared memory to the 32-bit shared-window address that
// PTX instructions with a `.shared` state space (cp.async, ldmatrix, ...) take.
TL_DEVICE uint32_t smem_ptr_to_uint(const void* smem_ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
}

// Whether ptr is aligned to n bytes (n a power of two): the vector copies' and vector
// atomics' run-time test of a tensor's base pointer.
TL_DEVICE bool is_aligned(const void* ptr, int n) {
  return (reinterpret_cast<unsigned long long>(ptr) & static_cast<unsigned long long>(n - 1)) == 0;
}

// gridDim.x as an int: the tile stride of a persistent kernel (tl.persistent_tiles,
// tilelang/backends/cuda/passes/persistent_tiles.py).
TL_DEVICE int grid_dim_x() { return static_cast<int>(gridDim.x); }

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_COMMON_H_

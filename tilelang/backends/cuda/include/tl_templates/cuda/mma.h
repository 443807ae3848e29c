// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/mma.h -- warp-level tensor-core MMA wrappers (mma.sync, sm_80+).
//
// Each function computes D = A * B + C for one warp-wide tile; all 32 lanes must call it
// together. A is row-major (M x K), B is column-major (K x N); every lane holds a fixed
// fragment of A, B, C and D in registers. Arguments are pointers to those per-lane
// fragments (thread-local arrays), so lowered code can pass `&frag[0]`; `d` may alias `c`.
// All pointers must be 4-byte aligned.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k*"), with
// g = lane / 4 ("groupID") and t = lane % 4 ("threadID_in_group"):
//
//   C / D, every shape (4 x f32 or s32, 16 x 8):
//     c[i]: row = g + 8 * (i >= 2),  col = 2 * t + (i & 1)
//
//   m16n8k16, f16 / bf16 (A: 4 x b32 = 8 elements, B: 2 x b32 = 4 elements):
//     a[i], i < 8: row = g + 8 * ((i / 2) & 1),  col = 2 * t + (i & 1) + 8 * (i >= 4)
//     b[i], i < 4: row = 2 * t + (i & 1) + 8 * (i >= 2),  col = g
//
//   m16n8k32, s8 (A: 4 x b32 = 16 elements, B: 2 x b32 = 8 elements), s32 accumulators:
//     a[i], i < 16: row = g + 8 * ((i / 4) & 1),  col = 4 * t + (i & 3) + 16 * (i >= 8)
//     b[i], i < 8:  row = 4 * t + (i & 3) + 16 * (i >= 4),  col = g
//
//   m16n8k8, tf32 (A: 4 x b32, B: 2 x b32, each one tf32 value stored as a float):
//     a[i], i < 4: row = g + 8 * (i & 1),  col = t + 4 * (i >= 2)
//     b[i], i < 2: row = t + 4 * i,  col = g
//
//   tl::mma_m16n8k16_f16f16f32(d, a, b, c)    f32 <- f16 x f16 + f32
//   tl::mma_m16n8k16_bf16bf16f32(d, a, b, c)  f32 <- bf16 x bf16 + f32
//   tl::mma_m16n8k32_s8s8s32(d, a, b, c)      s32 <- s8 x s8 + s32
//   tl::mma_m16n8k8_tf32tf32f32(d, a, b, c)   f32 <- tf32 x tf32 + f32
//   tl::float_to_tf32(x)                      round an f32 to tf32 (cvt.rna), as a float
#ifndef TL_TEMPLATES_CUDA_MMA_H_
#define TL_TEMPLATES_CUDA_MMA_H_

#include "common.h"

namespace tl {

TL_DEVICE void mma_m16n8k16_f16f16f32(void* d_ptr, const void* a_ptr, const void* b_ptr,
                                      const void* c_ptr) {
  float* d = reinterpret_cast<float*>(d_ptr);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_ptr);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_ptr);
  const float* c = reinterpret_cast<const float*>(c_ptr);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

TL_DEVICE void mma_m16n8k16_bf16bf16f32(void* d_ptr, const void* a_ptr, const void* b_ptr,
                                        const void* c_ptr) {
  float* d = reinterpret_cast<float*>(d_ptr);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_ptr);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_ptr);
  const float* c = reinterpret_cast<const float*>(c_ptr);
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

TL_DEVICE void mma_m16n8k32_s8s8s32(void* d_ptr, const void* a_ptr, const void* b_ptr,
                                    const void* c_ptr) {
  int32_t* d = reinterpret_cast<int32_t*>(d_ptr);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_ptr);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_ptr);
  const int32_t* c = reinterpret_cast<const int32_t*>(c_ptr);
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]),
        "r"(c[2]), "r"(c[3]));
}

TL_DEVICE void mma_m16n8k8_tf32tf32f32(void* d_ptr, const void* a_ptr, const void* b_ptr,
                                       const void* c_ptr) {
  float* d = reinterpret_cast<float*>(d_ptr);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_ptr);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(b_ptr);
  const float* c = reinterpret_cast<const float*>(c_ptr);
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
}

// Round an f32 to the nearest tf32 (ties away from zero); the result is still a float
// whose low 13 mantissa bits are zero. mma.tf32 itself ignores those bits (truncation).
TL_DEVICE float float_to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_MMA_H_

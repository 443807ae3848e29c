// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/ldsm.h -- ldmatrix wrappers (warp-collective, sm_75+).
//
// `ldmatrix.sync.aligned.m8n8.xK[.trans].shared.b16` loads K 8x8 matrices of 16-bit
// elements from shared memory. All 32 lanes of the warp must call it together.
// Lane t supplies `smem_ptr` = address of one 16-byte row: lanes 0-7 give the rows of
// matrix 0, lanes 8-15 of matrix 1, 16-23 of matrix 2, 24-31 of matrix 3 (for x1 only
// lanes 0-7 and for x2 only lanes 0-15 are used, but every lane must pass a valid
// shared address). Each row address must be 16-byte aligned.
//
// Result: `local_ptr` receives K 32-bit registers (2 halves each). Without .trans,
// register k of lane t holds elements (row t/4, cols 2*(t%4) and 2*(t%4)+1) of matrix
// k; with .trans it holds (rows 2*(t%4) and 2*(t%4)+1, col t/4), i.e. the matrix is
// transposed on the fly.
//
//   tl::ptx_ldmatrix_x1(smem, local)   tl::ptx_ldmatrix_x1_trans(smem, local)
//   tl::ptx_ldmatrix_x2(smem, local)   tl::ptx_ldmatrix_x2_trans(smem, local)
//   tl::ptx_ldmatrix_x4(smem, local)   tl::ptx_ldmatrix_x4_trans(smem, local)
//
// stmatrix (sm_90+), the inverse of ldmatrix without .trans: lane t's register k (two
// 16-bit elements) goes to row t/4, cols 2*(t%4) and 2*(t%4)+1 of matrix k, whose rows'
// addresses lanes 8k..8k+7 supply. The registers are packed here from 2*K values of any
// type convertible to Dst (half_t / bfloat16_t), e.g. a float accumulator:
//
//   tl::ptx_stmatrix_x{1,2,4}<Dst>(smem, local)   local[0 .. 2K-1] -> K registers
//   tl::st_shared_pair<Dst>(smem, local)          local[0], local[1] converted to Dst, one
//                                                 2-element vector store (smem aligned to it)
//
// `local_ptr` must be 4-byte aligned and have room for K 32-bit values.
#ifndef TL_TEMPLATES_CUDA_LDSM_H_
#define TL_TEMPLATES_CUDA_LDSM_H_

#include "common.h"

namespace tl {

TL_DEVICE void ptx_ldmatrix_x1(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(addr));
}

TL_DEVICE void ptx_ldmatrix_x2(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

TL_DEVICE void ptx_ldmatrix_x4(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

TL_DEVICE void ptx_ldmatrix_x1_trans(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(addr));
}

TL_DEVICE void ptx_ldmatrix_x2_trans(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

TL_DEVICE void ptx_ldmatrix_x4_trans(const void* smem_ptr, void* local_ptr) {
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  uint32_t* r = reinterpret_cast<uint32_t*>(local_ptr);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// stmatrix: passes/tma_store.py (staged epilogues of warp-specialized kernels).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define TL_STMATRIX_ARCH_CHECK(T) static_assert(sizeof(T) == 0, "stmatrix needs sm_90 or later")
#else
#define TL_STMATRIX_ARCH_CHECK(T)
#endif

template <typename Dst, typename Src>
TL_DEVICE uint32_t stmatrix_pack(const Src* v) {
  Dst pair[2] = {static_cast<Dst>(v[0]), static_cast<Dst>(v[1])};
  uint32_t word;
  memcpy(&word, pair, 4);
  return word;
}

template <typename Dst, typename Src>
TL_DEVICE void ptx_stmatrix_x1(void* smem_ptr, const Src* local_ptr) {
  TL_STMATRIX_ARCH_CHECK(Dst);
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" ::"r"(addr),
               "r"(stmatrix_pack<Dst>(local_ptr))
               : "memory");
}

template <typename Dst, typename Src>
TL_DEVICE void ptx_stmatrix_x2(void* smem_ptr, const Src* local_ptr) {
  TL_STMATRIX_ARCH_CHECK(Dst);
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" ::"r"(addr),
               "r"(stmatrix_pack<Dst>(local_ptr)), "r"(stmatrix_pack<Dst>(local_ptr + 2))
               : "memory");
}

template <typename Dst, typename Src>
TL_DEVICE void ptx_stmatrix_x4(void* smem_ptr, const Src* local_ptr) {
  TL_STMATRIX_ARCH_CHECK(Dst);
  const uint32_t addr = smem_ptr_to_uint(smem_ptr);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(stmatrix_pack<Dst>(local_ptr)), "r"(stmatrix_pack<Dst>(local_ptr + 2)),
               "r"(stmatrix_pack<Dst>(local_ptr + 4)), "r"(stmatrix_pack<Dst>(local_ptr + 6))
               : "memory");
}

template <typename Dst, typename Src>
TL_DEVICE void st_shared_pair(void* smem_ptr, const Src* local_ptr) {
  struct alignas(2 * sizeof(Dst)) Pair {
    Dst v[2];
  };
  *reinterpret_cast<Pair*>(smem_ptr) =
      Pair{{static_cast<Dst>(local_ptr[0]), static_cast<Dst>(local_ptr[1])}};
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_LDSM_H_

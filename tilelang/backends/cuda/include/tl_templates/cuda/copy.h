// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/copy.h -- vector copies, and asynchronous global -> shared copies
// (cp.async, sm_80+).
//
//   tl::copy_vec<N>(dst, src)                       copy N bytes (N = 2, 4, 8 or 16) with one
//                                                   load and one store (16 bytes: ld/st.v4)
//   tl::zero_vec<N>(dst)                            store N zero bytes with one store
//
// copy_vec/zero_vec work between any of global, shared and local memory (the compiler
// picks ld.global / ld.shared / registers from where the pointers come from); both
// pointers must be N-byte aligned (the CUDA lowering proves the offsets and checks the
// tensor base pointers with tl::is_aligned, common.h, before taking the vector path).
//
//   tl::cp_async_gs<N>(smem, gmem)                  copy N bytes (N = 4, 8 or 16)
//   tl::cp_async_gs_conditional<N>(smem, gmem, p)   same, but when `p` is false nothing is
//                                                   read from `gmem` and the N shared bytes
//                                                   are filled with zeros
//   tl::cp_async_commit()                           close the current group of copies
//   tl::cp_async_wait<N>()                          wait until at most N groups are pending
//
// Both pointers must be aligned to N bytes; `smem` must point into shared memory and
// `gmem` into global memory. A copy is only visible to other threads after
// cp_async_wait plus a barrier (__syncthreads or equivalent).
#ifndef TL_TEMPLATES_CUDA_COPY_H_
#define TL_TEMPLATES_CUDA_COPY_H_

#include "common.h"

namespace tl {

// The unsigned type of N bytes that one vector load/store moves.
template <int N>
struct VecType;
template <>
struct VecType<2> {
  using type = uint16_t;
};
template <>
struct VecType<4> {
  using type = uint32_t;
};
template <>
struct VecType<8> {
  using type = uint2;
};
template <>
struct VecType<16> {
  using type = uint4;
};

// Copy N bytes from src to dst with a single N-byte load and store.
template <int N>
TL_DEVICE void copy_vec(void* dst, const void* src) {
  using V = typename VecType<N>::type;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}

// Store N zero bytes to dst with a single N-byte store.
template <int N>
TL_DEVICE void zero_vec(void* dst) {
  using V = typename VecType<N>::type;
  *reinterpret_cast<V*>(dst) = V{};
}

// Copy N bytes from global to shared memory asynchronously. 16-byte copies bypass L1
// (.cg); 4- and 8-byte copies can only use the .ca variant.
template <int N>
TL_DEVICE void cp_async_gs(void* smem_ptr, const void* gmem_ptr) {
  static_assert(N == 4 || N == 8 || N == 16, "cp_async_gs: N must be 4, 8 or 16 bytes");
  const uint32_t smem_addr = smem_ptr_to_uint(smem_ptr);
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr), "l"(gmem_ptr),
                 "n"(N)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_addr), "l"(gmem_ptr),
                 "n"(N)
                 : "memory");
  }
}

// Predicated copy: when `predicate` is false the source size operand is 0, so no global
// byte is read (gmem_ptr may then be out of bounds) and the N destination bytes are
// zero-filled.
template <int N>
TL_DEVICE void cp_async_gs_conditional(void* smem_ptr, const void* gmem_ptr, bool predicate) {
  static_assert(N == 4 || N == 8 || N == 16,
                "cp_async_gs_conditional: N must be 4, 8 or 16 bytes");
  const uint32_t smem_addr = smem_ptr_to_uint(smem_ptr);
  const int src_bytes = predicate ? N : 0;
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr),
                 "l"(gmem_ptr), "n"(N), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr),
                 "l"(gmem_ptr), "n"(N), "r"(src_bytes)
                 : "memory");
  }
}

// Commit all previously issued, uncommitted cp.async operations as one group.
TL_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N committed groups are still in flight (N = 0: wait for all).
template <int N>
TL_DEVICE void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait: N must be non-negative");
  if constexpr (N == 0) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  } else {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
  }
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_COPY_H_

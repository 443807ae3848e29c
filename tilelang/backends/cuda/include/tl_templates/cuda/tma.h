// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/tma.h -- bulk tensor copies (TMA, sm_90+) completing on mbarriers.
//
//   tl::mbarrier_init(bar, count)             mbarrier.init: `count` arrivals per phase
//   tl::mbarrier_init_fence()                 fence.mbarrier_init (before the barrier that
//                                             publishes the initialised mbarriers)
//   tl::mbarrier_arrive_expect_tx(bar, n)     arrive once and expect n more transaction bytes
//                                             in the current phase
//   tl::mbarrier_wait(bar, parity)            spin (mbarrier.try_wait.parity) until the phase
//                                             of parity `parity` (0/1) has completed
//   tl::tma_load_<R>d(smem, map, bar, c...)   cp.async.bulk.tensor.<R>d global -> shared of one
//                                             box of the tensor map `map` at coordinates c
//                                             (innermost first, in elements; out-of-bounds
//                                             parts of the box are zero-filled), counted on
//                                             `bar` as complete_tx bytes
//   tl::tma_prefetch_descriptor(map)          prefetch.tensormap (optional warm-up)
//   tl::tma_store_<R>d(map, smem, c...)       cp.async.bulk.tensor.<R>d shared -> global of one
//                                             box at coordinates c (parts of the box outside
//                                             the tensor are not written), in the calling
//                                             thread's bulk async-group
//   tl::tma_store_add_<R>d(map, smem, c...)   cp.reduce.async.bulk.tensor.<R>d .add shared -> global:
//                                             the box is added element by element (atomically)
//                                             into the tensor, in the element type of the map
//                                             (T.atomic_add(..., use_tma=True),
//                                             passes/tma_reduce.py); bulk async-group as stores
//   tl::tma_store_commit()                    cp.async.bulk.commit_group
//   tl::tma_store_wait_read<N>()              cp.async.bulk.wait_group.read N: at most N groups
//                                             still read their shared source
//
// `bar` points to a 64-bit mbarrier in shared memory (8-byte aligned), `smem` to the box's
// destination (128-byte aligned; a multiple of the swizzle period -- 256/512/1024 bytes for
// 32B/64B/128B -- when the map swizzles), `map` is the address of a `const __grid_constant__
// CUtensorMap` kernel parameter encoded on the host (cuTensorMapEncodeTiled). The pipeline
// lowering (tilelang/backends/cuda/passes/tma_lowering.py) lets one thread of the block
// arrive with expect_tx and issue the copies; every thread waits on the barrier's phase.
// Data written by a TMA load is visible to a thread once its mbarrier_wait returned.
#ifndef TL_TEMPLATES_CUDA_TMA_H_
#define TL_TEMPLATES_CUDA_TMA_H_

#include "common.h"

namespace tl {

TL_DEVICE uint32_t tma_smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

TL_DEVICE void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(tma_smem_addr(bar)), "r"(count)
               : "memory");
}

TL_DEVICE void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

TL_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   tma_smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

TL_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      "  .reg .pred done;\n"
      "TL_MBAR_WAIT:\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "  @!done bra TL_MBAR_WAIT;\n"
      "}\n" ::"r"(tma_smem_addr(bar)),
      "r"(parity)
      : "memory");
}

TL_DEVICE void tma_prefetch_descriptor(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// The map argument is the generic address of the grid-constant parameter; the lowering
// passes it as an integer (TIRx's address_of of a tensor-map variable).
#define TL_TMA_PTRS                                                        \
  uint32_t dst = tma_smem_addr(smem);                                      \
  uint32_t mbar = tma_smem_addr(bar);                                      \
  uint64_t desc = static_cast<uint64_t>(map)

TL_DEVICE void tma_load_1d(void* smem, unsigned long long map, uint64_t* bar, int c0) {
  TL_TMA_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3}], [%2];" ::"r"(dst),
      "l"(desc), "r"(mbar), "r"(c0)
      : "memory");
}

TL_DEVICE void tma_load_2d(void* smem, unsigned long long map, uint64_t* bar, int c0, int c1) {
  TL_TMA_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(desc), "r"(mbar), "r"(c0), "r"(c1)
      : "memory");
}

TL_DEVICE void tma_load_3d(void* smem, unsigned long long map, uint64_t* bar, int c0, int c1,
                           int c2) {
  TL_TMA_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(desc), "r"(mbar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

TL_DEVICE void tma_load_4d(void* smem, unsigned long long map, uint64_t* bar, int c0, int c1,
                           int c2, int c3) {
  TL_TMA_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
      "l"(desc), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

TL_DEVICE void tma_load_5d(void* smem, unsigned long long map, uint64_t* bar, int c0, int c1,
                           int c2, int c3, int c4) {
  TL_TMA_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(dst),
      "l"(desc), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

#undef TL_TMA_PTRS

// Shared -> global bulk tensor operations, one elected thread each, issued after
// fence.proxy.async.shared::cta and a barrier by every thread that wrote the box's shared
// source; committed and waited for (wait_group.read) like any bulk group:
//   tl::tma_store_<R>d      cp.async.bulk.tensor (TMA stores: passes/tma_store.py)
//   tl::tma_store_add_<R>d  cp.reduce.async.bulk.tensor .add (T.atomic_add(global, shared,
//                           use_tma=True): passes/tma_reduce.py)
#define TL_TMA_TO_GLOBAL(OP, R, TAIL, COORDS, ...)                                                \
  asm volatile(OP "." #R "d.global.shared::cta" TAIL " [%0, " COORDS "], [%1];"                   \
               ::"l"(static_cast<uint64_t>(map)), "r"(tma_smem_addr(smem)), __VA_ARGS__           \
               : "memory")

#define TL_TMA_TO_GLOBAL_FUNCS(OP, TAIL, N1, N2, N3, N4, N5)                                      \
  TL_DEVICE void N1(unsigned long long map, const void* smem, int c0) {                           \
    TL_TMA_TO_GLOBAL(OP, 1, TAIL, "{%2}", "r"(c0));                                               \
  }                                                                                               \
  TL_DEVICE void N2(unsigned long long map, const void* smem, int c0, int c1) {                   \
    TL_TMA_TO_GLOBAL(OP, 2, TAIL, "{%2, %3}", "r"(c0), "r"(c1));                                  \
  }                                                                                               \
  TL_DEVICE void N3(unsigned long long map, const void* smem, int c0, int c1,                     \
                           int c2) {                                                              \
    TL_TMA_TO_GLOBAL(OP, 3, TAIL, "{%2, %3, %4}", "r"(c0), "r"(c1), "r"(c2));                     \
  }                                                                                               \
  TL_DEVICE void N4(unsigned long long map, const void* smem, int c0, int c1, int c2,             \
                           int c3) {                                                              \
    TL_TMA_TO_GLOBAL(OP, 4, TAIL, "{%2, %3, %4, %5}", "r"(c0), "r"(c1), "r"(c2), "r"(c3));        \
  }                                                                                               \
  TL_DEVICE void N5(unsigned long long map, const void* smem, int c0, int c1, int c2,             \
                           int c3, int c4) {                                                      \
    TL_TMA_TO_GLOBAL(OP, 5, TAIL, "{%2, %3, %4, %5, %6}", "r"(c0), "r"(c1), "r"(c2), "r"(c3),     \
                     "r"(c4));                                                                    \
  }

// (the names spelled out: headers.select_headers pastes a header for the tl:: names it spells)
TL_TMA_TO_GLOBAL_FUNCS("cp.async.bulk.tensor", ".bulk_group", tma_store_1d, tma_store_2d,
                       tma_store_3d, tma_store_4d, tma_store_5d)
TL_TMA_TO_GLOBAL_FUNCS("cp.reduce.async.bulk.tensor", ".add.tile.bulk_group", tma_store_add_1d,
                       tma_store_add_2d, tma_store_add_3d, tma_store_add_4d, tma_store_add_5d)

#undef TL_TMA_TO_GLOBAL_FUNCS
#undef TL_TMA_TO_GLOBAL

TL_DEVICE void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

template <int N>
TL_DEVICE void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// The same wait, naming the shared tile whose bulk reads it waits for (a deferred wait of
// passes/tma_reduce.py: the compiler's barrier analysis sees the tile read up to here).
template <int N>
TL_DEVICE void tma_store_wait_read(const void* /*tile*/) {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_TMA_H_

// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/cluster.h -- thread-block clusters (sm_90): TMA multicast and remote
// mbarrier arrivals (tilelang/backends/cuda/cluster.py, passes/warp_specialize_auto.py).
//
//   tl::cluster_dims<X, Y, Z>()              no code: marks the kernel; the CUDA source
//                                            fix-up (hopper_source.with_cluster_dims) puts
//                                            __cluster_dims__(X, Y, Z) on its definition
//   tl::tma_load_multicast_<R>d(smem, map, bar, mask, c...)
//                                            cp.async.bulk.tensor.<R>d ... .multicast::cluster:
//                                            one box written at the CTA-relative address of
//                                            `smem` in every CTA of the cluster whose bit is
//                                            set in `mask`, its bytes counted on the mbarrier
//                                            at the CTA-relative address of `bar` in each
//   tl::mbarrier_arrive_cluster(bar, cta)    mbarrier.arrive on the barrier at the address of
//                                            `bar` in CTA `cta` of the cluster (mapa)
//   tl::st_cluster(ptr, value, cta)          st.shared::cluster of `value` at the address of
//                                            `ptr` in CTA `cta` of the cluster (mapa;
//                                            T.copy_cluster(..., dst_block=...))
//   tl::mbarrier_wait_cluster(bar, parity)   mbarrier_wait with cluster-scope acquire (the phase
//                                            completed by other blocks' releases)
//   tl::mbarrier_arrive_cluster_warp<N>(bar) one arrival of this warp on `bar` in each of the
//                                            CTAs 0..N-1 of the cluster: lane r arrives on
//                                            CTA r (after __syncwarp: every lane's earlier
//                                            work is done when the arrivals are made), with
//                                            the default .release.cta semantics (CUTLASS's
//                                            ClusterBarrier::arrive(cta_id, pred)): it hands
//                                            back a pipeline stage the warp only read, and
//                                            compiles to one SYNCS.ARRIVE (no fence)
//   tl::mbarrier_arrive_cluster_warp_release<N>(bar)
//                                            the same arrivals with .release.cluster (each
//                                            is preceded by MEMBAR.ALL.GPU in SASS: the
//                                            pass config tl.cluster_multicast_sync="cluster")
#ifndef TL_TEMPLATES_CUDA_CLUSTER_H_
#define TL_TEMPLATES_CUDA_CLUSTER_H_

#include "common.h"
#include "tma.h"

namespace tl {

template <int X, int Y, int Z>
TL_DEVICE void cluster_dims() {}

TL_DEVICE uint32_t cluster_smem_addr(const void* ptr, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(tma_smem_addr(ptr)), "r"(cta));
  return remote;
}

template <typename T>
TL_DEVICE void st_cluster(T* ptr, T value, uint32_t cta) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "st_cluster: 1-, 2-, 4- or 8-byte elements");
  uint32_t remote = cluster_smem_addr(ptr, cta);
  if constexpr (sizeof(T) == 8) {
    uint64_t bits;
    memcpy(&bits, &value, 8);
    asm volatile("st.shared::cluster.b64 [%0], %1;" ::"r"(remote), "l"(bits) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    asm volatile("st.shared::cluster.b32 [%0], %1;" ::"r"(remote), "r"(bits) : "memory");
  } else if constexpr (sizeof(T) == 2) {
    uint16_t bits;
    memcpy(&bits, &value, 2);
    asm volatile("st.shared::cluster.b16 [%0], %1;" ::"r"(remote), "h"(bits) : "memory");
  } else {
    uint8_t bits;
    memcpy(&bits, &value, 1);
    asm volatile("st.shared::cluster.b8 [%0], %1;" ::"r"(remote), "r"(static_cast<uint32_t>(bits))
                 : "memory");
  }
}

TL_DEVICE void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(
                   cluster_smem_addr(bar, cta))
               : "memory");
}

TL_DEVICE void mbarrier_wait_cluster(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      "  .reg .pred done;\n"
      "TL_MBAR_WAIT_CLUSTER:\n"
      "  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "  @!done bra TL_MBAR_WAIT_CLUSTER;\n"
      "}\n" ::"r"(tma_smem_addr(bar)),
      "r"(parity)
      : "memory");
}

template <int N>
TL_DEVICE void mbarrier_arrive_cluster_warp(uint64_t* bar) {
  __syncwarp();
  uint32_t lane = threadIdx.x % 32;
  if (lane < N) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(
                     cluster_smem_addr(bar, lane))
                 : "memory");
  }
}

template <int N>
TL_DEVICE void mbarrier_arrive_cluster_warp_release(uint64_t* bar) {
  __syncwarp();
  uint32_t lane = threadIdx.x % 32;
  if (lane < N) {
    mbarrier_arrive_cluster(bar, lane);
  }
}

#define TL_TMA_MC_PTRS                                                     \
  uint32_t dst = tma_smem_addr(smem);                                      \
  uint32_t mbar = tma_smem_addr(bar);                                      \
  uint64_t desc = static_cast<uint64_t>(map);                              \
  uint16_t cta_mask = static_cast<uint16_t>(mask)

TL_DEVICE void tma_load_multicast_2d(void* smem, unsigned long long map, uint64_t* bar,
                                     uint32_t mask, int c0, int c1) {
  TL_TMA_MC_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;" ::"r"(dst),
      "l"(desc), "r"(mbar), "h"(cta_mask), "r"(c0), "r"(c1)
      : "memory");
}

TL_DEVICE void tma_load_multicast_3d(void* smem, unsigned long long map, uint64_t* bar,
                                     uint32_t mask, int c0, int c1, int c2) {
  TL_TMA_MC_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;" ::"r"(dst),
      "l"(desc), "r"(mbar), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

TL_DEVICE void tma_load_multicast_4d(void* smem, unsigned long long map, uint64_t* bar,
                                     uint32_t mask, int c0, int c1, int c2, int c3) {
  TL_TMA_MC_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;" ::"r"(dst),
      "l"(desc), "r"(mbar), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

TL_DEVICE void tma_load_multicast_5d(void* smem, unsigned long long map, uint64_t* bar,
                                     uint32_t mask, int c0, int c1, int c2, int c3, int c4) {
  TL_TMA_MC_PTRS;
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%4, %5, %6, %7, %8}], [%2], %3;" ::"r"(dst),
      "l"(desc), "r"(mbar), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

#undef TL_TMA_MC_PTRS

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_CLUSTER_H_

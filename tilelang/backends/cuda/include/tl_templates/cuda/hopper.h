// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/hopper.h -- the explicit Hopper (sm_90) synchronisation API that
// hand-written warp-specialized schedules call (tilelang/language/hopper.py,
// tilelang/ops/hopper). mbarrier_init / _init_fence / _arrive_expect_tx / _wait come from
// tma.h; this header adds:
//
//   tl::mbarrier_arrive(bar)              mbarrier.arrive: one arrival of this thread
//   tl::mbarrier_arrive_warp(bar)         one arrival of this warp (lane 0 after __syncwarp:
//                                         every lane's earlier work is done; the warp-
//                                         specialized consumers' stage release with
//                                         tl.ws_release_per_warp)
//   tl::mbarrier_expect_tx(bar, n)        mbarrier.expect_tx: n more transaction bytes in the
//                                         current phase (no arrival)
//   tl::fence_proxy_async()               fence.proxy.async.shared::cta
//   tl::set_max_nreg<N, INC>()            setmaxnreg.{inc,dec}.sync.aligned.u32 N (sm_90a; the
//                                         kernel needs a register cap at entry:
//                                         __launch_bounds__(threads, 1))
//   tl::cluster_arrive[_relaxed]()        barrier.cluster.arrive[.relaxed].aligned
//   tl::cluster_wait()                    barrier.cluster.wait.aligned
//   tl::cluster_sync()                    arrive + wait
//   tl::block_rank_in_cluster()           %cluster_ctarank
//   tl::named_barrier_arrive(id, n)       bar.arrive id, n
//   tl::named_barrier_sync(id, n)         bar.sync id, n
//   tl::ws_turn_wait / ws_turn_arrive     bar.sync / bar.arrive (ping-pong turns, no data)
#ifndef TL_TEMPLATES_CUDA_HOPPER_H_
#define TL_TEMPLATES_CUDA_HOPPER_H_

#include "common.h"
#include "tma.h"

namespace tl {

TL_DEVICE void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(tma_smem_addr(bar)) : "memory");
}

TL_DEVICE void mbarrier_arrive_warp(uint64_t* bar) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(tma_smem_addr(bar)) : "memory");
  }
}

TL_DEVICE void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(
                   tma_smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

TL_DEVICE void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <int N, int INC>
TL_DEVICE void set_max_nreg() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (INC) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
  }
#elif defined(__CUDA_ARCH__)
  static_assert(N < 0, "tl::set_max_nreg needs the sm_90a target (setmaxnreg)");
#endif
}

TL_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.aligned;" ::: "memory"); }

TL_DEVICE void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

TL_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

TL_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

TL_DEVICE uint32_t block_rank_in_cluster() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

TL_DEVICE void named_barrier_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

TL_DEVICE void named_barrier_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Ping-pong turns of the consumer warpgroups (warp_specialize_auto._ordered_turns): the
// same instructions as the named barriers, under their own names because they order only
// when each warpgroup issues its gemms, never data (a wgmma wait may move past them).
TL_DEVICE void ws_turn_wait(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

TL_DEVICE void ws_turn_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_HOPPER_H_

// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/warp.h -- warp all-reductions that reduce.h does not have.
//
//   tl::warp_reduce_bitand<kLanes, kStride>(x)   bitwise AND over the lane group
//   tl::warp_reduce_bitor<kLanes, kStride>(x)    bitwise OR over the lane group
//   tl::match_all_sync(mask, x)                  __match_all_sync without `pred`
//
// Same lane groups and requirements as tl::warp_allreduce in reduce.h; integer types only.
#ifndef TL_TEMPLATES_CUDA_WARP_H_
#define TL_TEMPLATES_CUDA_WARP_H_

#include "common.h"
#include "reduce.h"

namespace tl {

struct BitAndOp {
  template <typename T>
  TL_DEVICE T operator()(const T& a, const T& b) const {
    return a & b;
  }
};

struct BitOrOp {
  template <typename T>
  TL_DEVICE T operator()(const T& a, const T& b) const {
    return a | b;
  }
};

template <int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_reduce_bitand(T value, unsigned mask = 0xffffffffu) {
  return warp_allreduce<BitAndOp, kLanes, kStride>(value, mask);
}

template <int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_reduce_bitor(T value, unsigned mask = 0xffffffffu) {
  return warp_allreduce<BitOrOp, kLanes, kStride>(value, mask);
}

// __match_all_sync without the predicate output: `mask` when every lane of `mask` holds the
// same value, else 0 (T.match_all_sync). sm_70+.
template <typename T>
TL_DEVICE unsigned match_all_sync(unsigned mask, T value) {
  int pred;
  return __match_all_sync(mask, value, &pred);
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_WARP_H_

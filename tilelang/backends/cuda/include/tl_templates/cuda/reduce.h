// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/reduce.h -- warp-level all-reduce through __shfl_xor_sync.
//
//   tl::warp_allreduce<Op, kLanes, kStride>(x)   generic, Op is a functor below
//   tl::warp_reduce_sum<kLanes, kStride>(x)
//   tl::warp_reduce_max<kLanes, kStride>(x)
//   tl::warp_reduce_min<kLanes, kStride>(x)
//
// Lanes are grouped: a group is the kLanes lanes {base, base + kStride, ...,
// base + (kLanes - 1) * kStride}. Every lane of a group gets the reduction over its group
// (butterfly: the result is bit-identical on all lanes of the group). Examples:
//   <32, 1>: whole warp;  <4, 1>: lanes 0-3, 4-7, ...;  <8, 4>: lanes {0,4,..,28}, {1,5,..}.
// Requirements: kLanes and kStride are powers of two and kLanes * kStride <= 32.
// Every lane in `mask` (default: all 32) must call it with the same template arguments.
// Works for float, double, int, unsigned, long long, half_t and bfloat16_t.
// Max/Min use `a > b ? a : b`, so a NaN operand is dropped rather than propagated.
#ifndef TL_TEMPLATES_CUDA_REDUCE_H_
#define TL_TEMPLATES_CUDA_REDUCE_H_

#include "common.h"

namespace tl {

struct SumOp {
  template <typename T>
  TL_DEVICE T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

struct MaxOp {
  template <typename T>
  TL_DEVICE T operator()(const T& a, const T& b) const {
    return a > b ? a : b;
  }
};

struct MinOp {
  template <typename T>
  TL_DEVICE T operator()(const T& a, const T& b) const {
    return a < b ? a : b;
  }
};

template <class Op, int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_allreduce(T value, unsigned mask = 0xffffffffu) {
  static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0,
                "warp_allreduce: kLanes must be a power of two");
  static_assert(kStride > 0 && (kStride & (kStride - 1)) == 0,
                "warp_allreduce: kStride must be a power of two");
  static_assert(kLanes * kStride <= 32, "warp_allreduce: kLanes * kStride must be <= 32");
  Op op;
#pragma unroll
  for (int offset = (kLanes / 2) * kStride; offset >= kStride; offset /= 2) {
    value = op(value, __shfl_xor_sync(mask, value, offset));
  }
  return value;
}

template <int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_reduce_sum(T value, unsigned mask = 0xffffffffu) {
  return warp_allreduce<SumOp, kLanes, kStride>(value, mask);
}

template <int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_reduce_max(T value, unsigned mask = 0xffffffffu) {
  return warp_allreduce<MaxOp, kLanes, kStride>(value, mask);
}

template <int kLanes, int kStride = 1, typename T>
TL_DEVICE T warp_reduce_min(T value, unsigned mask = 0xffffffffu) {
  return warp_allreduce<MinOp, kLanes, kStride>(value, mask);
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_REDUCE_H_

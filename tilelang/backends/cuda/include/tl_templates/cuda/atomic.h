// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/atomic.h -- atomic read-modify-write on global or shared memory.
//
//   tl::AtomicAdd(address, value)   *address += value
//   tl::AtomicMax(address, value)   *address = max(*address, value)
//   tl::AtomicMin(address, value)   *address = min(*address, value)
//   tl::AtomicAddx2(address, a, b)  a float pair, one vector atomic on sm_90+ (no return value)
//   tl::AtomicAddx2Ret / AtomicAddx4Ret(address, lanes..., prev)  the same, old values to prev
//
// Each returns the value stored at `address` before the operation (like CUDA's atomic*).
// Supported element types: float, double (Add only), half_t, bfloat16_t, int, unsigned
// int, long long (Max/Min), unsigned long long. A `value` of another arithmetic type is
// converted to the element type first (e.g. AtomicAdd(half_ptr, 1.0f)).
//
// Implementation: Add uses the native atomicAdd everywhere (half: sm_70+, bf16: sm_80+).
// Integer Max/Min are native. Float, half and bf16 Max/Min are compare-and-swap loops
// on the value's bit pattern (32-bit CAS for float, 16-bit CAS for half/bf16, sm_70+);
// the loop exits without writing once the stored value already wins, and a NaN
// `value` never replaces the stored one.
#ifndef TL_TEMPLATES_CUDA_ATOMIC_H_
#define TL_TEMPLATES_CUDA_ATOMIC_H_

#include "common.h"

namespace tl {

// ---------------------------------------------------------------- AtomicAdd
TL_DEVICE float AtomicAdd(float* address, float value) { return atomicAdd(address, value); }
TL_DEVICE double AtomicAdd(double* address, double value) { return atomicAdd(address, value); }
TL_DEVICE int AtomicAdd(int* address, int value) { return atomicAdd(address, value); }
TL_DEVICE unsigned int AtomicAdd(unsigned int* address, unsigned int value) {
  return atomicAdd(address, value);
}
TL_DEVICE unsigned long long AtomicAdd(unsigned long long* address, unsigned long long value) {
  return atomicAdd(address, value);
}
TL_DEVICE half_t AtomicAdd(half_t* address, half_t value) { return atomicAdd(address, value); }
TL_DEVICE bfloat16_t AtomicAdd(bfloat16_t* address, bfloat16_t value) {
  return atomicAdd(address, value);
}

// tl::AtomicAddx2(address, a, b): address[0] += a, address[1] += b for an 8-byte aligned
// float pair in global memory; one vector reduction (red.global.add.v2.f32) on sm_90+, two
// scalar atomics before.
TL_DEVICE void AtomicAddx2(float* address, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(address), make_float2(a, b));
#else
  atomicAdd(address, a);
  atomicAdd(address + 1, b);
#endif
}

// tl::AtomicAddx2Ret(address, a, b, prev) / tl::AtomicAddx4Ret(address, a, b, c, d, prev):
// address[k] += lane k, prev[k] = the value address[k] held before (T.atomic_addx2/x4 with
// return_prev=True). One atomic for the whole group where the hardware has it: a float
// group in global memory, 8/16-byte aligned, on sm_90+ (atomicAdd(float2*/float4*) returns
// the old vector); a 4-byte aligned half/bfloat16 pair (atomicAdd(half2*/bfloat162*)).
// Otherwise (older archs, shared memory, misaligned groups, the second pair of a 16-bit x4)
// each lane is its own atomic: every lane's add and old value are exact, but another
// thread may update the group between two lanes.
TL_DEVICE void AtomicAddx2Ret(float* address, float a, float b, float* prev) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (__isGlobal(address) && is_aligned(address, 8)) {
    float2 old = atomicAdd(reinterpret_cast<float2*>(address), make_float2(a, b));
    prev[0] = old.x;
    prev[1] = old.y;
    return;
  }
#endif
  prev[0] = atomicAdd(address, a);
  prev[1] = atomicAdd(address + 1, b);
}

TL_DEVICE void AtomicAddx4Ret(float* address, float a, float b, float c, float d, float* prev) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (__isGlobal(address) && is_aligned(address, 16)) {
    float4 old = atomicAdd(reinterpret_cast<float4*>(address), make_float4(a, b, c, d));
    prev[0] = old.x;
    prev[1] = old.y;
    prev[2] = old.z;
    prev[3] = old.w;
    return;
  }
#endif
  prev[0] = atomicAdd(address, a);
  prev[1] = atomicAdd(address + 1, b);
  prev[2] = atomicAdd(address + 2, c);
  prev[3] = atomicAdd(address + 3, d);
}

TL_DEVICE void AtomicAddx2Ret(half_t* address, half_t a, half_t b, half_t* prev) {
  if (is_aligned(address, 4)) {
    __half2 old = atomicAdd(reinterpret_cast<__half2*>(address), __halves2half2(a, b));
    prev[0] = __low2half(old);
    prev[1] = __high2half(old);
    return;
  }
  prev[0] = atomicAdd(address, a);
  prev[1] = atomicAdd(address + 1, b);
}

TL_DEVICE void AtomicAddx2Ret(bfloat16_t* address, bfloat16_t a, bfloat16_t b, bfloat16_t* prev) {
  if (is_aligned(address, 4)) {
    __nv_bfloat162 old =
        atomicAdd(reinterpret_cast<__nv_bfloat162*>(address), __halves2bfloat162(a, b));
    prev[0] = __low2bfloat16(old);
    prev[1] = __high2bfloat16(old);
    return;
  }
  prev[0] = atomicAdd(address, a);
  prev[1] = atomicAdd(address + 1, b);
}

template <typename T>
TL_DEVICE void AtomicAddx4Ret(T* address, T a, T b, T c, T d, T* prev) {  // half / bfloat16
  AtomicAddx2Ret(address, a, b, prev);
  AtomicAddx2Ret(address + 2, c, d, prev + 2);
}

// ---------------------------------------------------------------- integer Max / Min
TL_DEVICE int AtomicMax(int* address, int value) { return atomicMax(address, value); }
TL_DEVICE unsigned int AtomicMax(unsigned int* address, unsigned int value) {
  return atomicMax(address, value);
}
TL_DEVICE long long AtomicMax(long long* address, long long value) {
  return atomicMax(address, value);
}
TL_DEVICE unsigned long long AtomicMax(unsigned long long* address, unsigned long long value) {
  return atomicMax(address, value);
}
TL_DEVICE int AtomicMin(int* address, int value) { return atomicMin(address, value); }
TL_DEVICE unsigned int AtomicMin(unsigned int* address, unsigned int value) {
  return atomicMin(address, value);
}
TL_DEVICE long long AtomicMin(long long* address, long long value) {
  return atomicMin(address, value);
}
TL_DEVICE unsigned long long AtomicMin(unsigned long long* address, unsigned long long value) {
  return atomicMin(address, value);
}

// ---------------------------------------------------------------- floating Max / Min (CAS)
namespace detail {

template <typename A, typename B>
struct is_same_type {
  static constexpr bool value = false;
};
template <typename A>
struct is_same_type<A, A> {
  static constexpr bool value = true;
};

TL_DEVICE float to_float(half_t x) { return __half2float(x); }
TL_DEVICE float to_float(bfloat16_t x) { return __bfloat162float(x); }

// Replace *address by `value` while `value` beats the stored value (larger for
// kWantMax, smaller otherwise); returns the value seen before the last attempt.
template <bool kWantMax>
TL_DEVICE float atomic_extremum_f32(float* address, float value) {
  unsigned int* word = reinterpret_cast<unsigned int*>(address);
  unsigned int old = *reinterpret_cast<volatile unsigned int*>(word);
  while (true) {
    const float current = __uint_as_float(old);
    const bool better = kWantMax ? (value > current) : (value < current);
    if (!better) break;
    const unsigned int assumed = old;
    old = atomicCAS(word, assumed, __float_as_uint(value));
    if (old == assumed) break;
  }
  return __uint_as_float(old);
}

// Same for a 16-bit float type T (half_t or bfloat16_t), compared in float.
template <bool kWantMax, typename T>
TL_DEVICE T atomic_extremum_16(T* address, T value) {
  unsigned short* word = reinterpret_cast<unsigned short*>(address);
  unsigned short old = *reinterpret_cast<volatile unsigned short*>(word);
  const float v = to_float(value);
  const unsigned short value_bits = *reinterpret_cast<const unsigned short*>(&value);
  while (true) {
    const unsigned short old_bits = old;
    const float current = to_float(*reinterpret_cast<const T*>(&old_bits));
    const bool better = kWantMax ? (v > current) : (v < current);
    if (!better) break;
    old = atomicCAS(word, old_bits, value_bits);
    if (old == old_bits) break;
  }
  const unsigned short result_bits = old;
  return *reinterpret_cast<const T*>(&result_bits);
}

}  // namespace detail

TL_DEVICE float AtomicMax(float* address, float value) {
  return detail::atomic_extremum_f32<true>(address, value);
}
TL_DEVICE float AtomicMin(float* address, float value) {
  return detail::atomic_extremum_f32<false>(address, value);
}
TL_DEVICE half_t AtomicMax(half_t* address, half_t value) {
  return detail::atomic_extremum_16<true>(address, value);
}
TL_DEVICE half_t AtomicMin(half_t* address, half_t value) {
  return detail::atomic_extremum_16<false>(address, value);
}
TL_DEVICE bfloat16_t AtomicMax(bfloat16_t* address, bfloat16_t value) {
  return detail::atomic_extremum_16<true>(address, value);
}
TL_DEVICE bfloat16_t AtomicMin(bfloat16_t* address, bfloat16_t value) {
  return detail::atomic_extremum_16<false>(address, value);
}

// ---------------------------------------------------------------- mixed value types
// AtomicAdd(half_ptr, 1.0f) etc.: convert the value to the element type, then dispatch to
// the exact overload above (a non-template overload wins when the types already match).
template <typename T, typename V>
TL_DEVICE T AtomicAdd(T* address, V value) {
  static_assert(!detail::is_same_type<T, V>::value, "AtomicAdd: unsupported element type");
  return AtomicAdd(address, static_cast<T>(value));
}
template <typename T, typename V>
TL_DEVICE T AtomicMax(T* address, V value) {
  static_assert(!detail::is_same_type<T, V>::value, "AtomicMax: unsupported element type");
  return AtomicMax(address, static_cast<T>(value));
}
template <typename T, typename V>
TL_DEVICE T AtomicMin(T* address, V value) {
  static_assert(!detail::is_same_type<T, V>::value, "AtomicMin: unsupported element type");
  return AtomicMin(address, static_cast<T>(value));
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_ATOMIC_H_

// tilelang device helpers for HIP (ROCm, CDNA gfx90a / gfx94x), prepended to every kernel.
//
// The ROCm backend reuses TIRx's CUDA C++ printer and replaces its CUDA prelude with this
// file, so it supplies what the printed code and the tile-op rules refer to:
//
//   half / nv_bfloat16 / uint / uchar / ushort   element and shorthand types
//   tl::copy_vec<N>(dst, src), tl::zero_vec<N>(dst), tl::is_aligned(p, n),
//   tl::load_vec<N>(regs, global), tl::stage_copy<N>(lds, regs)
//                                                N-byte vector moves (N = 2, 4, 8, 16)
//   tl::AtomicAdd / AtomicMax / AtomicMin        as the CUDA helpers (return the old value)
//   __shfl_xor(half|bf16, mask, width)           HIP only has 32/64-bit shuffles
//   tl::mfma_*(c, a, b)                          one 16x16xK MFMA: c (4 accumulators of this
//                                                lane) += a (k_per_lane A elements) x b
//   __trap()                                     __builtin_trap (device asserts)
#pragma once
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

#define uint unsigned int
#define uchar unsigned char
#define ushort unsigned short
typedef hip_bfloat16 nv_bfloat16;

// the CUDA printer spells float infinities / NaNs with CUDA's math_constants.h names
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")

#ifndef __trap
#define __trap() __builtin_trap()
#endif

// bfloat16 conversions under their CUDA names (hip_bfloat16's float constructor rounds to
// nearest even)
__device__ __forceinline__ hip_bfloat16 __float2bfloat16_rn(float x) { return hip_bfloat16(x); }
__device__ __forceinline__ hip_bfloat16 __float2bfloat16(float x) { return hip_bfloat16(x); }
__device__ __forceinline__ float __bfloat162float(hip_bfloat16 x) { return float(x); }

__device__ __forceinline__ half max(half a, half b) { return __hgt(a, b) ? a : b; }
__device__ __forceinline__ half min(half a, half b) { return __hlt(a, b) ? a : b; }

__device__ __forceinline__ half __shfl_xor(half v, int mask, int width) {
  unsigned short bits = __builtin_bit_cast(unsigned short, v);
  int moved = __shfl_xor(static_cast<int>(bits), mask, width);
  return __builtin_bit_cast(half, static_cast<unsigned short>(moved));
}
__device__ __forceinline__ hip_bfloat16 __shfl_xor(hip_bfloat16 v, int mask, int width) {
  int moved = __shfl_xor(static_cast<int>(v.data), mask, width);
  hip_bfloat16 out;
  out.data = static_cast<unsigned short>(moved);
  return out;
}

namespace tl {

template <int N> struct VecBytes;
template <> struct VecBytes<1> { using type = unsigned char; };
template <> struct VecBytes<2> { using type = unsigned short; };
template <> struct VecBytes<4> { using type = unsigned int; };
template <> struct VecBytes<8> { using type = uint2; };
template <> struct VecBytes<16> { using type = uint4; };

// Copy N bytes with one load and one store (both pointers N-byte aligned).
template <int N> __device__ __forceinline__ void copy_vec(void* dst, const void* src) {
  using V = typename VecBytes<N>::type;
  *reinterpret_cast<V*>(dst) = *reinterpret_cast<const V*>(src);
}

// Store N zero bytes with one store.
template <int N> __device__ __forceinline__ void zero_vec(void* dst) {
  using V = typename VecBytes<N>::type;
  *reinterpret_cast<V*>(dst) = V{};
}

// N bytes from a global address of any alignment (software pipelining's register loads):
// memcpy is one global_load_dwordx4 for N = 16 (unaligned dword access on CDNA).
template <int N> __device__ __forceinline__ void load_vec(void* dst, const void* src) {
  __builtin_memcpy(dst, src, N);
}

// A register -> LDS store into a software-pipeline stage (backends/rocm/pipelining.py):
// copy_vec under the name the barrier analysis reads as a pipeline-stage write.
template <int N> __device__ __forceinline__ void stage_copy(void* dst, const void* src) {
  copy_vec<N>(dst, src);
}

__device__ __forceinline__ bool is_aligned(const void* ptr, int n) {
  return (reinterpret_cast<unsigned long long>(ptr) & static_cast<unsigned long long>(n - 1)) == 0;
}

// ----------------------------------------------------------------------------- atomics
__device__ __forceinline__ float AtomicAdd(float* p, float v) { return atomicAdd(p, v); }
__device__ __forceinline__ double AtomicAdd(double* p, double v) { return atomicAdd(p, v); }
__device__ __forceinline__ int AtomicAdd(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ unsigned AtomicAdd(unsigned* p, unsigned v) { return atomicAdd(p, v); }
__device__ __forceinline__ unsigned long long AtomicAdd(unsigned long long* p, unsigned long long v) {
  return atomicAdd(p, v);
}
__device__ __forceinline__ int AtomicMax(int* p, int v) { return atomicMax(p, v); }
__device__ __forceinline__ unsigned AtomicMax(unsigned* p, unsigned v) { return atomicMax(p, v); }
__device__ __forceinline__ int AtomicMin(int* p, int v) { return atomicMin(p, v); }
__device__ __forceinline__ unsigned AtomicMin(unsigned* p, unsigned v) { return atomicMin(p, v); }

// 16-bit values: a compare-and-swap loop on the aligned 32-bit word holding them.
template <typename T, typename F> __device__ T atomic16(T* p, F update) {
  unsigned long long addr = reinterpret_cast<unsigned long long>(p);
  unsigned* word = reinterpret_cast<unsigned*>(addr & ~3ull);
  unsigned shift = (addr & 2ull) ? 16u : 0u;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    unsigned short bits = static_cast<unsigned short>(assumed >> shift);
    T now = __builtin_bit_cast(T, bits);
    unsigned short next = __builtin_bit_cast(unsigned short, update(now));
    unsigned replaced = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned>(next) << shift);
    old = atomicCAS(word, assumed, replaced);
  } while (old != assumed);
  return __builtin_bit_cast(T, static_cast<unsigned short>(old >> shift));
}
__device__ __forceinline__ half AtomicAdd(half* p, half v) {
  return atomic16(p, [v](half x) { return __float2half(__half2float(x) + __half2float(v)); });
}
__device__ __forceinline__ hip_bfloat16 AtomicAdd(hip_bfloat16* p, hip_bfloat16 v) {
  return atomic16(p, [v](hip_bfloat16 x) { return hip_bfloat16(float(x) + float(v)); });
}

// float/double max and min: compare-and-swap loops that stop once the stored value wins
// (a NaN value never replaces it).
template <typename T, typename Bits, typename Better>
__device__ T atomic_select(T* p, T v, Better better) {
  Bits* word = reinterpret_cast<Bits*>(p);
  Bits old = *word, assumed;
  do {
    assumed = old;
    T now = __builtin_bit_cast(T, assumed);
    if (!better(v, now)) return now;
    old = atomicCAS(word, assumed, __builtin_bit_cast(Bits, v));
  } while (old != assumed);
  return __builtin_bit_cast(T, old);
}
__device__ __forceinline__ float AtomicMax(float* p, float v) {
  return atomic_select<float, unsigned>(p, v, [](float a, float b) { return a > b; });
}
__device__ __forceinline__ float AtomicMin(float* p, float v) {
  return atomic_select<float, unsigned>(p, v, [](float a, float b) { return a < b; });
}
__device__ __forceinline__ double AtomicMax(double* p, double v) {
  return atomic_select<double, unsigned long long>(p, v, [](double a, double b) { return a > b; });
}
__device__ __forceinline__ double AtomicMin(double* p, double v) {
  return atomic_select<double, unsigned long long>(p, v, [](double a, double b) { return a < b; });
}
template <typename T, typename V> __device__ __forceinline__ T AtomicAdd(T* p, V v) {
  return AtomicAdd(p, static_cast<T>(v));
}

// ------------------------------------------------------------------------------- MFMA
typedef _Float16 mfma_f16x4 __attribute__((ext_vector_type(4)));
typedef short mfma_bf16x4 __attribute__((ext_vector_type(4)));
typedef float mfma_f32x4 __attribute__((ext_vector_type(4)));
typedef int mfma_i32x4 __attribute__((ext_vector_type(4)));

template <typename V> __device__ __forceinline__ V load_regs(const void* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V> __device__ __forceinline__ void store_regs(void* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

// c[0..3] += A(16x16 f16) x B(16x16 f16): lane l holds A[l%16][4(l/16)+0..3], B[4(l/16)+0..3][l%16],
// and C[4(l/16)+r][l%16] in c[r].
__device__ __forceinline__ void mfma_f32_16x16x16_f16(void* c, const void* a, const void* b) {
  mfma_f32x4 acc = load_regs<mfma_f32x4>(c);
  acc = __builtin_amdgcn_mfma_f32_16x16x16f16(load_regs<mfma_f16x4>(a), load_regs<mfma_f16x4>(b),
                                              acc, 0, 0, 0);
  store_regs(c, acc);
}

// The same with bf16 operands (the "_1k" form of gfx90a and later).
__device__ __forceinline__ void mfma_f32_16x16x16_bf16(void* c, const void* a, const void* b) {
  mfma_f32x4 acc = load_regs<mfma_f32x4>(c);
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(load_regs<mfma_bf16x4>(a),
                                                  load_regs<mfma_bf16x4>(b), acc, 0, 0, 0);
  store_regs(c, acc);
}

#if defined(__gfx908__) || defined(__gfx90a__)
// int8 (gfx908/gfx90a): 4 k elements per lane packed in one 32-bit register.
__device__ __forceinline__ void mfma_i32_16x16x16_i8(void* c, const void* a, const void* b) {
  mfma_i32x4 acc = load_regs<mfma_i32x4>(c);
  acc = __builtin_amdgcn_mfma_i32_16x16x16i8(load_regs<int>(a), load_regs<int>(b), acc, 0, 0, 0);
  store_regs(c, acc);
}
#endif

#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
// int8 (gfx94x): 8 k elements per lane packed in one 64-bit register pair.
__device__ __forceinline__ void mfma_i32_16x16x32_i8(void* c, const void* a, const void* b) {
  mfma_i32x4 acc = load_regs<mfma_i32x4>(c);
  acc = __builtin_amdgcn_mfma_i32_16x16x32_i8(load_regs<long>(a), load_regs<long>(b), acc, 0, 0, 0);
  store_regs(c, acc);
}

// fp8 (FNUZ encodings, stored as bytes): 8 k elements per lane in one 64-bit register pair.
__device__ __forceinline__ void mfma_f32_16x16x32_fp8(void* c, const void* a, const void* b) {
  mfma_f32x4 acc = load_regs<mfma_f32x4>(c);
  acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(load_regs<long>(a), load_regs<long>(b), acc, 0, 0, 0);
  store_regs(c, acc);
}
__device__ __forceinline__ void mfma_f32_16x16x32_bf8(void* c, const void* a, const void* b) {
  mfma_f32x4 acc = load_regs<mfma_f32x4>(c);
  acc = __builtin_amdgcn_mfma_f32_16x16x32_bf8_bf8(load_regs<long>(a), load_regs<long>(b), acc, 0, 0, 0);
  store_regs(c, acc);
}
#endif

}  // namespace tl

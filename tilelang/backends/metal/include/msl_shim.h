// Just enough of <metal_stdlib> to parse tilelang's generated MSL as C++17 with clang
// (codegen.syntax_check). A syntax and call-shape check only: address spaces are erased,
// SIMD-group functions are declared with MSL's signatures but do nothing.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#define kernel
#define device
#define threadgroup
#define constant
#define thread

typedef unsigned int uint;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned long ulong;
typedef _Float16 half;
// MSL half literals (0.5h)
constexpr half operator""h(long double v) { return (half)v; }
constexpr half operator""h(unsigned long long v) { return (half)v; }

namespace metal {
template <typename T> using remove_cv_t = std::remove_cv_t<T>;
template <typename T> using remove_reference_t = std::remove_reference_t<T>;

struct uint2 { uint x, y; };
struct uint3 { uint x, y, z; };
struct ulong2 { ulong x, y; ulong2(ulong a, ulong b) : x(a), y(b) {} };

enum class mem_flags { mem_none, mem_device, mem_threadgroup };
inline void threadgroup_barrier(mem_flags) {}

template <typename T> T simd_shuffle_xor(T value, ushort mask);
template <typename T> T simd_sum(T value);
template <typename T> T simd_max(T value);
template <typename T> T simd_min(T value);
template <typename T> T simd_and(T value);
template <typename T> T simd_or(T value);
template <typename T> T simd_xor(T value);

template <typename T, int Rows, int Cols> struct simdgroup_matrix {
  struct elements { T v[2]; T& operator[](int i) { return v[i]; } };
  elements e;
  elements& thread_elements() { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
template <typename T, typename P>
void simdgroup_load(simdgroup_matrix<T, 8, 8>& m, P src, ulong elements_per_row, ulong2 origin, bool transpose);
template <typename T>
void simdgroup_multiply_accumulate(simdgroup_matrix<float, 8, 8>& d, const simdgroup_matrix<T, 8, 8>& a,
                                   const simdgroup_matrix<T, 8, 8>& b, const simdgroup_matrix<float, 8, 8>& c);

enum memory_order { memory_order_relaxed };
template <typename T> struct atomic { T value; };
template <typename T> T atomic_fetch_add_explicit(atomic<T>* object, T operand, memory_order order);
template <typename T> T atomic_fetch_max_explicit(atomic<T>* object, T operand, memory_order order);
template <typename T> T atomic_fetch_min_explicit(atomic<T>* object, T operand, memory_order order);

using std::exp;
using std::exp2;
using std::fabs;
using std::log;
using std::log2;
using std::max;
using std::min;
using std::sqrt;
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
}  // namespace metal

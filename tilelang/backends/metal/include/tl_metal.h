// tilelang device helpers for Metal (MSL 3.0+), pasted after TIRx's Metal prelude.
//
// What the shared tile-op rules and the Metal rules call:
//   __syncthreads()                        threadgroup_barrier(mem_flags::mem_threadgroup)
//   tl::copy_vec<N>(dst, src), tl::zero_vec<N>(dst), tl::is_aligned(p, n)
//                                          N-byte moves, element by element (any address
//                                          spaces: the pointer types are deduced)
//   tl::AtomicAdd/AtomicMax/AtomicMin      device atomics (relaxed), return the old value
//   tl::simdgroup_mma_8x8(c, a, lda, b, ldb, trans_a, trans_b)
//                                          one simdgroup_multiply_accumulate on 8x8 tiles:
//                                          c holds this lane's two accumulators (thread_elements)
#define __syncthreads() threadgroup_barrier(mem_flags::mem_threadgroup)

namespace tl {

template <int N, typename D, typename S> inline void copy_vec(D dst, S src) {
  for (int i = 0; i < int(N / sizeof(dst[0])); ++i) dst[i] = src[i];
}

template <int N, typename D> inline void zero_vec(D dst) {
  for (int i = 0; i < int(N / sizeof(dst[0])); ++i) dst[i] = 0;
}

// copy_vec/zero_vec move elements one by one, so any alignment is fine
template <typename P> inline bool is_aligned(P, int) { return true; }

template <typename T> inline T AtomicAdd(device T* p, T v) {
  return atomic_fetch_add_explicit((device atomic<T>*)p, v, memory_order_relaxed);
}
template <typename T> inline T AtomicMax(device T* p, T v) {
  return atomic_fetch_max_explicit((device atomic<T>*)p, v, memory_order_relaxed);
}
template <typename T> inline T AtomicMin(device T* p, T v) {
  return atomic_fetch_min_explicit((device atomic<T>*)p, v, memory_order_relaxed);
}

// c[0..1] (this lane's elements of an 8x8 float accumulator) += A(8x8) x B(8x8); A and B
// are read from threadgroup memory with row strides lda / ldb (transposed when asked).
template <typename C, typename A, typename B>
inline void simdgroup_mma_8x8(C c, A a, uint lda, B b, uint ldb, bool trans_a, bool trans_b) {
  simdgroup_float8x8 acc;
  acc.thread_elements()[0] = c[0];
  acc.thread_elements()[1] = c[1];
  simdgroup_matrix<metal::remove_cv_t<metal::remove_reference_t<decltype(a[0])>>, 8, 8> ma;
  simdgroup_matrix<metal::remove_cv_t<metal::remove_reference_t<decltype(b[0])>>, 8, 8> mb;
  simdgroup_load(ma, a, lda, ulong2(0, 0), trans_a);
  simdgroup_load(mb, b, ldb, ulong2(0, 0), trans_b);
  simdgroup_multiply_accumulate(acc, ma, mb, acc);
  c[0] = acc.thread_elements()[0];
  c[1] = acc.thread_elements()[1];
}

}  // namespace tl

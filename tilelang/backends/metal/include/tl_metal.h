// tilelang device helpers for Metal (MSL 3.0+), pasted after TIRx's Metal prelude.
//
// What the shared tile-op rules and the Metal rules call:
//   __syncthreads()                        threadgroup_barrier(mem_flags::mem_threadgroup)
//   tl::copy_vec<N>(dst, src), tl::zero_vec<N>(dst), tl::is_aligned(p, n)
//                                          N-byte moves, element by element (any address
//                                          spaces: the pointer types are deduced)
//   tl::AtomicAdd/AtomicMax/AtomicMin      device atomics (relaxed), return the old value
//   tl::simdgroup_gemm_8x8<TM, TN>(c, a, lda, b, ldb, trans_a, trans_b)
//                                          a SIMD-group's TM x TN 8x8 atoms for one k step
//                                          (simdgroup_load + simdgroup_multiply_accumulate;
//                                          c holds the lane's accumulators, thread_elements())
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

// A SIMD-group's whole TM x TN tile of 8x8 atoms for one k step of 8: the TM A atoms and the
// TN B atoms are loaded once each, then TM * TN multiply-accumulates; c holds the lane's
// accumulators of atom (i, j) at c[(i * TN + j) * 2 + 0..1]. a / b point at atom (0, 0).
template <int TM, int TN, typename C, typename A, typename B>
inline void simdgroup_gemm_8x8(C c, A a, uint lda, B b, uint ldb, bool trans_a, bool trans_b) {
  simdgroup_matrix<metal::remove_cv_t<metal::remove_reference_t<decltype(a[0])>>, 8, 8> ma[TM];
  simdgroup_matrix<metal::remove_cv_t<metal::remove_reference_t<decltype(b[0])>>, 8, 8> mb[TN];
  for (int i = 0; i < TM; ++i) {
    simdgroup_load(ma[i], a + (trans_a ? i * 8 : i * 8 * lda), lda, ulong2(0, 0), trans_a);
  }
  for (int j = 0; j < TN; ++j) {
    simdgroup_load(mb[j], b + (trans_b ? j * 8 * ldb : j * 8), ldb, ulong2(0, 0), trans_b);
  }
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      simdgroup_float8x8 acc;
      acc.thread_elements()[0] = c[(i * TN + j) * 2];
      acc.thread_elements()[1] = c[(i * TN + j) * 2 + 1];
      simdgroup_multiply_accumulate(acc, ma[i], mb[j], acc);
      c[(i * TN + j) * 2] = acc.thread_elements()[0];
      c[(i * TN + j) * 2 + 1] = acc.thread_elements()[1];
    }
  }
}

}  // namespace tl

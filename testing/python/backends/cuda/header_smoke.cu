// Calls every function of tilelang/backends/cuda/include/tl_templates/cuda/*.h once; test_build.py compiles it with
// nvcc (sm_80, sm_90a) and NVRTC and checks the ptxas report and the emitted PTX.
#include "tl_templates/cuda/common.h"
#include "tl_templates/cuda/copy.h"
#include "tl_templates/cuda/ldsm.h"
#include "tl_templates/cuda/mma.h"
#include "tl_templates/cuda/reduce.h"
#include "tl_templates/cuda/atomic.h"
#include "tl_templates/cuda/threadblock_swizzle.h"

extern "C" __global__ void header_smoke(float* out, half_t* h, bfloat16_t* b, int* i,
                                        long long* ll, unsigned int* u) {
  __shared__ alignas(16) half_t s[1024];
  const int t = threadIdx.x;
  tl::cp_async_gs<16>(s + t * 8, h + t * 8);
  tl::cp_async_gs<8>(s + 512 + t * 4, h + t * 4);
  tl::cp_async_gs<4>(s + 768 + t * 2, h + t * 2);
  tl::cp_async_commit();
  tl::cp_async_gs_conditional<16>(s + 256 + t * 8, h + t * 8, t < 3);
  tl::cp_async_gs_conditional<8>(s + 640 + t * 4, h, t < 3);
  tl::cp_async_gs_conditional<4>(s + 896 + t * 2, h, t < 3);
  tl::cp_async_commit();
  tl::cp_async_wait<1>();
  tl::cp_async_wait<0>();
  __syncthreads();
  uint32_t r[4];
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  int iacc[4] = {0, 0, 0, 0};
  tl::ptx_ldmatrix_x1(s + t * 8, r);
  tl::ptx_ldmatrix_x2(s + t * 8, r);
  tl::ptx_ldmatrix_x4(s + t * 8, r);
  tl::ptx_ldmatrix_x1_trans(s + t * 8, r);
  tl::ptx_ldmatrix_x2_trans(s + t * 8, r);
  tl::ptx_ldmatrix_x4_trans(s + t * 8, r);
  tl::mma_m16n8k16_f16f16f32(acc, r, r + 2, acc);
  tl::mma_m16n8k16_bf16bf16f32(acc, r, r + 2, acc);
  tl::mma_m16n8k32_s8s8s32(iacc, r, r + 2, iacc);
  tl::mma_m16n8k8_tf32tf32f32(acc, r, r + 2, acc);
  acc[0] = tl::float_to_tf32(acc[0]);
  float x = tl::warp_reduce_sum<32>(acc[0]) + tl::warp_reduce_max<8, 4>(acc[1]) +
            tl::warp_reduce_min<4, 1>(acc[2]) + tl::warp_allreduce<tl::SumOp, 2, 16>(acc[3]);
  x += __half2float(tl::warp_reduce_sum<16, 2>(h[t]));
  x += __bfloat162float(tl::warp_reduce_max<32>(b[t]));
  iacc[0] = tl::warp_reduce_sum<32>(iacc[0]) + tl::warp_reduce_min<2, 16>(i[t]);
  tl::AtomicAdd(out, x); tl::AtomicMax(out + 1, x); tl::AtomicMin(out + 2, x);
  tl::AtomicAdd(h, h[1]); tl::AtomicMax(h + 2, h[1]); tl::AtomicMin(h + 3, h[1]);
  tl::AtomicAdd(b, b[1]); tl::AtomicMax(b + 2, b[1]); tl::AtomicMin(b + 3, b[1]);
  tl::AtomicAdd(i, iacc[0]); tl::AtomicMax(i + 1, iacc[0]); tl::AtomicMin(i + 2, iacc[0]);
  tl::AtomicAdd(u, 1u); tl::AtomicMax(u + 1, 5u); tl::AtomicMin(ll, 3LL);
  tl::AtomicAdd(h + 4, 1.0f); tl::AtomicMax(b + 5, 2.0f); tl::AtomicAdd(out + 3, 1);
  dim3 rb = tl::rasterization2DRow<4>();
  dim3 cb = tl::rasterization2DColumn<3>();
  out[4 + t] = rb.x + rb.y + cb.x + cb.y + tl::ceildiv(7, 4) + tl::rasterization2DRowX<2>() +
               tl::rasterization2DRowY<2>() + tl::rasterization2DColumnX<2>() +
               tl::rasterization2DColumnY<2>();
}

"""2-D convolution as an implicit GEMM with ``T.im2col`` (upstream's
``examples/convolution/example_convolution_autotune.py``).

NHWC input, (KH, KW, C, F) filter. Each k-step gathers a ``block_M x block_K`` im2col tile
of the input with ``T.im2col`` (padding reads as zero) and multiplies it with the matching
rows of the flattened filter. The kernel is an eager ``@tilelang.jit`` body under
``@tilelang.autotune``: ``convolution.compile(N=..., C=..., ..., **config)`` binds the
``T.const`` shape names by keyword and, given a config, compiles it without tuning.
"""

import argparse
import itertools

import torch

import tilelang
import tilelang.language as T


def ref_program(stride, padding, dilation):
    def main(A, B):
        out = torch.conv2d(
            A.permute(0, 3, 1, 2),
            B.permute(3, 2, 0, 1),
            stride=stride,
            padding=padding,
            dilation=dilation,
        )
        return out.permute(0, 2, 3, 1)

    return main


def get_configs():
    return [
        {
            "block_M": m,
            "block_N": n,
            "block_K": k,
            "num_stages": s,
            "thread_num": t,
            "enable_rasteration": r,
        }
        for m, n, k, s, t, r in itertools.product(
            [64, 128], [64, 128], [32, 64], [2, 3], [128, 256], [True, False]
        )
    ]


def get_heuristic_config():
    """Upstream's per-architecture default (sm_90: 128 x 256 x 64, 3 stages, 256 threads)."""
    major = torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 9
    if major == 8:
        return {
            "block_M": 128,
            "block_N": 256,
            "block_K": 32,
            "num_stages": 2,
            "thread_num": 128,
            "enable_rasteration": True,
        }
    return {
        "block_M": 128,
        "block_N": 256,
        "block_K": 64,
        "num_stages": 3,
        "thread_num": 256,
        "enable_rasteration": True,
    }


@tilelang.autotune(configs=get_configs())
@tilelang.jit
def convolution(
    data,
    kernel,
    S,
    D,
    P,
    block_M,
    block_N,
    block_K,
    num_stages,
    thread_num,
    enable_rasteration,
    dtype=T.float16,
    accum_dtype=T.float32,
):
    N, C, H, W, F, K = T.const("N, C, H, W, F, K")
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    data: T.Tensor((N, H, W, C), dtype)
    kernel: T.Tensor((K, K, C, F), dtype)
    out = T.empty((N, OH, OW, F), dtype)

    with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=thread_num) as (
        bx,
        by,
    ):
        data_shared = T.alloc_shared((block_M, block_K), dtype)
        kernel_shared = T.alloc_shared((block_K, block_N), dtype)
        out_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        out_shared = T.alloc_shared((block_M, block_N), dtype)

        kernel_flat = T.Tensor((K * K * C, F), dtype, kernel.data)
        out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)

        T.use_swizzle(panel_size=10, enable=enable_rasteration)
        T.clear(out_local)
        for k_iter in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=num_stages):
            T.im2col(data, data_shared, by, k_iter, K, S, D, P)
            T.copy(kernel_flat[k_iter * block_K, bx * block_N], kernel_shared)
            T.gemm(data_shared, kernel_shared, out_local)

        T.copy(out_local, out_shared)
        T.copy(out_shared, out_flat[by * block_M, bx * block_N])

    return out


def run(n, c, h, w, f, k, s, d, p, config=None, device=None):
    """One convolution on random inputs; returns (output, float64 reference)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = config or get_heuristic_config()
    kernel = convolution.compile(N=n, C=c, H=h, W=w, F=f, K=k, S=s, D=d, P=p, **config)
    a = torch.randn(n, h, w, c, dtype=torch.float16, device=device)
    b = torch.randn(k, k, c, f, dtype=torch.float16, device=device)
    out = kernel(a, b)
    return out, ref_program(s, p, d)(a.cpu().double(), b.cpu().double())


def main(n=128, c=128, h=64, w=64, f=128, k=3, s=1, d=1, p=1, use_autotune=False):
    if use_autotune:
        kernel = convolution.compile(N=n, C=c, H=h, W=w, F=f, K=k, S=s, D=d, P=p)
    else:
        kernel = convolution.compile(
            N=n, C=c, H=h, W=w, F=f, K=k, S=s, D=d, P=p, **get_heuristic_config()
        )
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Auto)
    profiler.assert_allclose(ref_program(s, p, d), atol=1e-2, rtol=1e-2)
    print("convolution: matches torch")
    if torch.cuda.is_available():
        print(f"TileLang latency: {profiler.do_bench():.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name, default in (
        ("n", 128),
        ("c", 128),
        ("h", 64),
        ("w", 64),
        ("f", 128),
        ("k", 3),
        ("s", 1),
        ("d", 1),
        ("p", 1),
    ):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--use_autotune", action="store_true")
    args = parser.parse_args()
    main(args.n, args.c, args.h, args.w, args.f, args.k, args.s, args.d, args.p, args.use_autotune)

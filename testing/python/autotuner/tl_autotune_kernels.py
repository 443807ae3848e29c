"""A kernel with a cost knob, for the autotuner tests (importable by subprocesses)."""

from __future__ import annotations

import tilelang
import tilelang.language as T


def repeated_sum(n: int = 16384, work: int = 1, bias: float = 0.0, block: int = 256):
    """``B = (A added up ``work`` times) / work + bias``: ``work`` only costs time."""

    @T.prim_func
    def repeated_sum_kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            acc = T.alloc_fragment((block,), "float32")
            T.clear(acc)
            for _ in T.serial(work):
                for i in T.Parallel(block):
                    acc[i] = acc[i] + A[bx * block + i]
            for i in T.Parallel(block):
                B[bx * block + i] = acc[i] / work + bias

    return repeated_sum_kernel


def tuned(configs, **autotune_options):
    """``repeated_sum`` under ``@autotune(configs=...)`` over ``@jit(out_idx=[-1], target="cpu")``."""
    options = dict(warmup=2, rep=7, skip_check=True)
    options.update(autotune_options)
    return tilelang.autotune(configs=configs, **options)(
        tilelang.jit(out_idx=[-1], target="cpu")(repeated_sum)
    )

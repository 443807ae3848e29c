"""Chunk-local cumulative sum of gated-delta-rule gates (upstream TileLang's API, unchanged).

``G`` is ``(B, S, H)`` (or ``(B, H, S)`` with ``head_first``); every chunk of ``chunk_size``
steps along ``S`` gets its own running sum (forwards, or from the chunk's end with
``reverse``). One block per (chunk, batch*head); the chunk is staged in a static shared tile
(``scope="shared"``) and summed by ``T.cumsum``. A ragged last chunk reads zeros past ``S``.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1], pass_configs={tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True})
def chunk_local_cumsum(B, S, H, chunk_size=64, reverse=False, head_first=False,
                       input_dtype=T.float32, output_dtype=T.float32, threads=128):  # fmt: skip
    assert chunk_size & (chunk_size - 1) == 0, "chunk_size must be a power of two"
    shape = (B, H, S) if head_first else (B, S, H)

    @T.prim_func
    def kernel(G: T.Tensor(shape, dtype=input_dtype), G_out: T.Tensor(shape, dtype=output_dtype)):
        with T.Kernel(T.ceildiv(S, chunk_size), B * H, threads=threads) as (cs, bh):
            b, h = bh // H, bh % H
            tile = T.alloc_shared((1, chunk_size), dtype=output_dtype, scope="shared")
            if head_first:
                T.copy(G[b, h, cs * chunk_size : (cs + 1) * chunk_size], tile)
            else:
                T.copy(G[b, cs * chunk_size : (cs + 1) * chunk_size, h], tile)
            T.cumsum(tile, dim=1, reverse=reverse)
            if head_first:
                T.copy(tile, G_out[b, h, cs * chunk_size : (cs + 1) * chunk_size])
            else:
                T.copy(tile, G_out[b, cs * chunk_size : (cs + 1) * chunk_size, h])

    return kernel


def ref_program(g, chunk_size, reverse=False, head_first=False):
    """float64 chunk-local cumsum along the sequence axis."""
    x = g.double() if head_first else g.double().transpose(1, 2)  # (B, H, S)
    out = torch.empty_like(x)
    for lo in range(0, x.shape[-1], chunk_size):
        part = x[..., lo : lo + chunk_size]
        out[..., lo : lo + chunk_size] = (
            part.flip(-1).cumsum(-1).flip(-1) if reverse else part.cumsum(-1)
        )
    return out if head_first else out.transpose(1, 2)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--S", type=int, default=32768)
    parser.add_argument("--H", type=int, default=32)
    parser.add_argument("--chunk_size", type=int, default=64)
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--head_first", action="store_true")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = (args.B, args.H, args.S) if args.head_first else (args.B, args.S, args.H)
    g = torch.randn(shape, device=device)
    kernel = chunk_local_cumsum(
        args.B, args.S, args.H, args.chunk_size, args.reverse, args.head_first
    )
    out = kernel(g)
    ref = ref_program(g, args.chunk_size, args.reverse, args.head_first)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
    print("All checks pass.")


if __name__ == "__main__":
    main()

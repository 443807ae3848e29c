"""``T.im2col``: gather a convolution's im2col tile from an NHWC image.

Upstream lowers ``T.im2col`` to the Hopper TMA im2col copy. Here it is the same gather
written as a ``T.Parallel`` loop (every target runs it; on CUDA the copy is an ordinary
guarded load per element): ``col[m, k]`` is the image element under output pixel
``p = nhw_step * block_M + m`` (row-major over ``(n, oh, ow)``) and filter tap
``q = c_step * block_K + k`` (row-major over ``(kh, kw, c)``), zero in the padding and
past the last pixel or tap.
"""

from __future__ import annotations

from .. import errors
from . import builder
from .entry import macro
from .loops import Parallel
from .math import if_then_else


def im2col(
    img,
    col,
    nhw_step,
    c_step,
    kernel,
    stride,
    dilation,
    pad,
    eviction_policy=None,
    annotations=None,
):
    """Fill ``col`` (block_M x block_K) with the im2col tile (see the module doc) of the
    NHWC ``img`` for a square ``kernel`` with ``stride``, ``dilation`` and ``pad``."""
    img, col = builder.unwrap(img), builder.unwrap(col)
    img_shape, col_shape = getattr(img.ty, "shape", None), getattr(col.ty, "shape", None)
    if img_shape is None or len(img_shape) != 4:
        raise errors.TraceError(f"T.im2col: img must be a 4-D NHWC tensor, got {img.ty}")
    if col_shape is None or len(col_shape) != 2:
        raise errors.TraceError(f"T.im2col: col must be a 2-D tile, got {col.ty}")
    if str(img.ty.dtype) != str(col.ty.dtype):
        raise errors.TraceError(
            f"T.im2col: img ({img.ty.dtype}) and col ({col.ty.dtype}) must have one dtype"
        )
    for name, value in (("kernel", kernel), ("stride", stride), ("dilation", dilation)):
        if not isinstance(value, int) or value < 1:
            raise errors.TraceError(f"T.im2col: {name} must be a positive int, got {value!r}")
    if not isinstance(pad, int) or pad < 0:
        raise errors.TraceError(f"T.im2col: pad must be a non-negative int, got {pad!r}")
    n, h, w, c = img_shape
    oh = (h + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    _gather(img, col, nhw_step, c_step, kernel, stride, dilation, pad, n, h, w, c, oh, ow)


@macro
def _gather(img, col, nhw_step, c_step, kernel, stride, dilation, pad, n, h, w, c, oh, ow):
    block_m, block_k = col.shape
    for m, k in Parallel(block_m, block_k):
        pixel = nhw_step * block_m + m
        tap = c_step * block_k + k
        kh = tap // (c * kernel)
        ih = (pixel // ow) % oh * stride + kh * dilation - pad
        iw = pixel % ow * stride + tap // c % kernel * dilation - pad
        inside = pixel < n * oh * ow and kh < kernel and 0 <= ih < h and 0 <= iw < w
        col[m, k] = if_then_else(inside, img[pixel // (oh * ow), ih, iw, tap % c], 0)

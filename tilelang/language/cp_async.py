"""Upstream's explicit asynchronous-copy API: ``T.ptx_cp_async``, ``T.ptx_commit_group``,
``T.ptx_wait_group``, ``T.cp_async_barrier_noinc`` and ``T.async_copy``.

tilelang performs these copies **synchronously**: ``T.ptx_cp_async(dst, src, n)`` stores the
``n`` elements when it is issued (on every target), so a copy is complete before any later
statement of the issuing thread. Upstream's contract only lets a program read the data after
``T.ptx_wait_group`` (or the mbarrier a ``T.cp_async_barrier_noinc`` arms), so every
correctly synchronized upstream program computes the same result; the overlap of the copy
with later work is what is given up. Accordingly:

- ``T.ptx_commit_group()`` / ``T.ptx_wait_group(n)``: nothing is pending, so they are no-ops
  (``n`` is still checked).
- ``T.cp_async_barrier_noinc(bar)``: the thread's copies are complete, so it is one arrival
  on ``bar`` (``T.mbarrier_arrive``: CUDA sm_90+, refused elsewhere at the user's line).
- ``T.async_copy(src, dst)``: ``T.copy(src, dst)`` of a global region into shared memory.

Inside a kernel, ``T.ptx_cp_async`` is per-thread code like an element store: the CUDA
backend gives each thread its own copy (the compiler vectorizes the element stores).
"""

from __future__ import annotations

from tvm_tirx import ir

from .. import errors
from ..lowering.region import is_tensor
from . import builder
from .hopper import mbarrier_arrive
from .tileop import copy


def _element(pointer, name: str, what: str) -> ir.TensorLoad:
    """The element ``A[i]`` of ``T.access_ptr(A[i], ...)`` (or of a plain ``A[i]``)."""
    value = builder.unwrap(pointer)
    if isinstance(value, ir.Call) and getattr(value.op, "name", "") == "tirx.address_of":
        value = value.args[0]
    if not isinstance(value, ir.TensorLoad):
        raise errors.TraceError(
            f"T.{name}: {what} must be T.access_ptr(A[i], ...) of a tensor element, got {pointer!r}"
        )
    return value


def _static_count(value, name: str) -> int:
    count = builder.static_value(builder.unwrap(value))
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise errors.TraceError(
            f"T.{name}: the element count must be a positive int known when tracing, got {value!r}"
        )
    return count


def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems, predicate=None):
    """Copy ``num_elems`` consecutive elements from ``src_access_ptr`` (global) to
    ``dst_access_ptr`` (shared); both are ``T.access_ptr(X[...], ...)`` (or elements
    ``X[...]``). Where ``predicate`` is false nothing is copied."""
    builder.state()
    d = _element(dst_access_ptr, "ptx_cp_async", "dst")
    s = _element(src_access_ptr, "ptx_cp_async", "src")
    n = _static_count(num_elems, "ptx_cp_async")
    d_type, s_type = str(d.source.ty.dtype), str(s.source.ty.dtype)
    if d_type != s_type:
        raise errors.TraceError(
            f"T.ptx_cp_async: dst {d.source.name} is {d_type} but src {s.source.name} is {s_type}"
        )
    with builder.if_(True if predicate is None else predicate) as frame, frame.then() as taken:
        if taken:
            for k in range(n):
                d_idx = [*d.indices[:-1], d.indices[-1] + k if k else d.indices[-1]]
                s_idx = [*s.indices[:-1], s.indices[-1] + k if k else s.indices[-1]]
                builder.store(d.source, d_idx, ir.TensorLoad(s.source, s_idx))


def ptx_commit_group():
    """Close the current group of asynchronous copies (nothing is pending here)."""
    builder.state()


def ptx_wait_group(num=0):
    """Wait until at most ``num`` groups are pending (none ever is here)."""
    builder.state()
    count = builder.static_value(builder.unwrap(num))
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise errors.TraceError(
            f"T.ptx_wait_group: num must be a non-negative int known when tracing, got {num!r}"
        )


def cp_async_barrier_noinc(barrier):
    """Arrive on ``barrier`` once this thread's copies are done (they are: one arrival)."""
    mbarrier_arrive(barrier)


def async_copy(src, dst, coalesced_width=None, annotations=None, loop_layout=None):
    """``T.copy(src, dst)`` of a global region into shared memory (upstream: cp.async
    without a wait)."""
    builder.state()
    for operand, what in ((src, "src"), (dst, "dst")):
        value = builder.unwrap(operand)
        if isinstance(value, ir.TensorLoad | ir.TensorRegion):
            value = value.source
        if not is_tensor(value):
            raise errors.TraceError(
                f"T.async_copy: {what} must be a tensor, a slice or an element, got {operand!r}"
            )
        scope = str(value.ty.scope)
        ok = scope in ("", "global") if what == "src" else scope.startswith("shared")
        if not ok:
            raise errors.TraceError(
                f"T.async_copy: {what} {value.name} is in {scope or 'global'} memory; "
                "async_copy copies global memory into shared memory"
            )
    copy(
        src, dst, coalesced_width=coalesced_width, loop_layout=loop_layout, annotations=annotations
    )

"""``T.alloc_buffer``, ``T.access_ptr`` and ``T.dp4a`` (upstream TileLang's names).

* ``T.alloc_buffer(shape, dtype, scope=...)``: TVMScript's general allocation; dispatched on
  ``scope`` to ``T.alloc_shared`` (``shared`` / ``shared.dyn``), ``T.alloc_fragment``
  (``local.fragment``), ``T.alloc_local`` (``local``), ``T.alloc_var`` (``local.var``) or
  ``T.alloc_global`` (``global``, outside ``T.Kernel``).
* ``T.access_ptr(base, access_type="r", *extents, offset=0, extent=None)``: the address of
  ``base``'s first element (``A[i, j]``, a slice ``A[i, j:j+8]`` or a whole tensor) plus
  ``offset`` elements, for ``T.call_extern``. The access type and extents are checked; they
  are hints only here (upstream's synchronisation analysis reads them).
* ``T.dp4a(A, B, C)``: ``C[0] += sum(A[k] * B[k] for k in 0..3)`` over int8 ``A``/``B`` and an
  int32 ``C`` (element starts or tensors); plain integer arithmetic on every backend.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import dtypes, errors
from ..lowering.region import is_tensor
from . import allocate, builder

_SCOPES = {
    "shared": allocate.alloc_shared,
    "shared.dyn": allocate.alloc_shared,
    "local.fragment": allocate.alloc_fragment,
    "local": allocate.alloc_local,
}


def alloc_buffer(shape, dtype="float32", data=None, strides=None, scope="global", **kwargs):
    """A tensor of ``shape`` and ``dtype`` in ``scope`` (module docstring)."""
    if data is not None or strides is not None:
        raise errors.TraceError(
            "T.alloc_buffer: data= and strides= are not supported (use T.make_tensor to view "
            "an address as a tensor)"
        )
    unknown = {k: v for k, v in kwargs.items() if v not in (None, -1, 0, "default")}
    if unknown:
        raise errors.TraceError(f"T.alloc_buffer: unsupported arguments {sorted(unknown)}")
    if scope == "local.var":
        if shape not in (1, (1,), [1]):
            raise errors.TraceError(f"T.alloc_buffer: a local.var holds one value, got {shape}")
        return allocate._alloc((1,), dtype, "local.var")
    if scope == "global":
        return allocate.alloc_global(shape, dtype)
    if scope not in _SCOPES:
        raise errors.TraceError(
            f"T.alloc_buffer: scope must be one of {['global', *_SCOPES, 'local.var']}, "
            f"got {scope!r}"
        )
    return _SCOPES[scope](shape, dtype, scope=scope)


def _start(base, name: str, what: str = "base"):
    """``base`` as the load of its first element."""
    base = builder.unwrap(base)
    if isinstance(base, ir.TensorLoad):
        return base
    if isinstance(base, ir.TensorRegion):
        return ir.TensorLoad(base.source, [r.begin for r in base.region])
    if is_tensor(base):
        return ir.TensorLoad(base, [ir.const(0, "int32")] * len(base.ty.shape))
    raise errors.TraceError(
        f"T.{name}: {what} must be a tensor, a slice or an element such as A[i], got "
        f"{type(base).__name__} {base!r}"
    )


_ACCESS = {"r": 1, "w": 2, "rw": 3, "wr": 3}


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0):
    """The address of ``base``'s first element plus ``offset`` elements (module docstring)."""
    builder.state()
    if access_type not in _ACCESS and access_type not in (1, 2, 3):
        raise errors.TraceError(
            f"T.access_ptr: access_type must be 'r', 'w', 'rw' or 1/2/3, got {access_type!r}"
        )
    if ignore_last_ndim:
        raise errors.TraceError("T.access_ptr: ignore_last_ndim is not supported")
    for e in (*extents, *([] if extent is None else [extent])):
        value = builder.static_value(builder.unwrap(e)) if not isinstance(e, int) else e
        if value is not None and value < 0:
            raise errors.TraceError(f"T.access_ptr: extents must be non-negative, got {e}")
    load = _start(base, "access_ptr")
    if not isinstance(offset, int) or offset:
        # row-major: &A[i, j + off] is the element `off` past A[i, j] in flat order
        offset = builder.unwrap(offset)
        if not isinstance(offset, int) and not str(offset.ty).startswith(("int", "uint")):
            raise errors.TraceError(f"T.access_ptr: offset must be an integer, got {offset!r}")
        indices = list(load.indices)
        indices[-1] = indices[-1] + offset
        load = ir.TensorLoad(load.source, indices)
    return _tirx.address_of(load)


def _shifted(load, k):
    indices = list(load.indices)
    indices[-1] = indices[-1] + k if k else indices[-1]
    return ir.TensorLoad(load.source, indices)


def dp4a(A, B, C):
    """``C[0] += A[0]*B[0] + ... + A[3]*B[3]`` in int32 over int8 ``A``, ``B`` (element starts,
    slices or tensors; the four values lie along the last axis)."""

    builder.state()
    a, b, c = (_start(x, "dp4a", w) for x, w in ((A, "A"), (B, "B"), (C, "C")))
    for x, w, want in ((a, "A", "int8"), (b, "B", "int8"), (c, "C", "int32")):
        dt = str(x.source.ty.dtype)
        if dt != want:
            raise errors.TraceError(f"T.dp4a: {w} must be {want}, got {dt}")
    total = c
    for k in range(4):
        prod = dtypes.convert(_shifted(a, k), "int32") * dtypes.convert(_shifted(b, k), "int32")
        total = total + prod
    builder.store(c.source, list(c.indices), total)


#: ``T.tfloat32``: tensor-float-32 operands. Stored as float32 (4 bytes, torch.float32), as
#: upstream does; ``T.gemm`` on 32-bit float tiles runs the tf32 ``mma.m16n8k8`` on CUDA (a
#: 10-bit mantissa product) and exact float32 arithmetic on CPU.
tfloat32 = dtypes.dtype("float32")


def tvm_storage_sync(scope="shared", *args):
    """A barrier for ``scope``: ``"shared"`` / ``"shared.dyn"`` -> ``T.sync_threads()``,
    ``"warp"`` -> ``T.sync_warp()``; any other scope is an error."""
    from .misc import sync_threads
    from .warp import sync_warp

    if args:
        raise errors.TraceError(
            "T.tvm_storage_sync: barrier id / thread-count arguments are not supported"
        )
    if scope in ("shared", "shared.dyn"):
        return sync_threads()
    if scope == "warp":
        return sync_warp()
    raise errors.TraceError(
        f"T.tvm_storage_sync: scope must be 'shared', 'shared.dyn' or 'warp', got {scope!r}"
    )


_AXES = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}


def thread_binding(start, stop=None, thread=None, *, annotations=None):
    """Inside ``T.Kernel``: the thread index of axis ``thread`` (``"threadIdx.x"``, ``.y``,
    ``.z``), as upstream's ``tx = T.thread_binding(0, threads, thread="threadIdx.x")``. The
    range ``[start, stop)`` must cover the kernel's threads on that axis, starting at 0."""
    from . import kernel

    if thread is None and isinstance(stop, str):
        start, stop, thread = 0, start, stop
    elif stop is None:
        start, stop = 0, start
    if thread not in _AXES:
        raise errors.TraceError(
            f"T.thread_binding: thread must be one of {list(_AXES)}, got {thread!r}"
        )
    builder.state()
    frame = kernel._current()
    axis = _AXES[thread]
    if axis >= len(frame.thread_vars):
        raise errors.TraceError(
            f"T.thread_binding: {thread} is not launched by the enclosing T.Kernel "
            f"(threads={list(frame.threads)})"
        )
    begin = builder.static_value(builder.unwrap(start))
    if begin != 0:
        raise errors.TraceError(f"T.thread_binding: start must be 0, got {start}")
    extent = builder.static_value(builder.unwrap(stop))
    launched = builder.static_value(builder.unwrap(frame.threads[axis]))
    if extent is not None and launched is not None and extent != launched:
        raise errors.TraceError(
            f"T.thread_binding: {thread} spans {extent} threads but the enclosing T.Kernel "
            f"launches {launched} on that axis"
        )
    return frame.thread_vars[axis]

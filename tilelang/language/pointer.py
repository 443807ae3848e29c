"""Raw pointers: ``T.ptr`` and ``T.make_tensor(ptr, shape, dtype)`` (upstream's names).

``T.ptr`` is a 64-bit address. As a parameter annotation (``a_ptr: T.ptr``) the kernel takes
an integer (``tensor.data_ptr()``); as an element type (``T.Tensor([G], T.ptr)``) it is a
table of addresses (a torch int64 tensor of ``data_ptr()`` values). ``T.make_tensor``
declares a tensor over such an address — a parameter, an element of a pointer table or any
64-bit integer expression — and the result is indexed, copied and passed to tile ops like a
``T.Tensor`` parameter. The memory must be of the kernel's device and stay alive for the
call; nothing checks the address.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from . import builder
from .proxy import TensorAnnotation


class PointerDType(dtypes.dtype):
    """``T.ptr``: the int64 element/parameter type of an address; calling it makes a fresh
    address variable (``T.ptr()``, upstream's form)."""

    def __new__(cls):
        return super().__new__(cls, "int64")

    def __call__(self, dtype=None, storage_scope="global", *, is_size_var=False):
        if storage_scope != "global":
            raise errors.TraceError(
                f"T.ptr: only global pointers are supported, got storage_scope={storage_scope!r}"
            )
        return ir.Var("ptr", "int64")


ptr = PointerDType()


def make_tensor(ptr, shape, dtype="float32", strides=None):
    """A ``shape`` tensor of ``dtype`` stored at the address ``ptr`` (row-major unless
    ``strides``, in elements, are given)."""
    builder.state()
    address = builder.unwrap(ptr)
    if isinstance(address, int):
        raise errors.TraceError(
            "T.make_tensor: the address must be a kernel parameter or a value read in the "
            "kernel (a T.ptr parameter or an element of a T.Tensor(..., T.ptr) table), not a "
            "Python int"
        )
    if not (builder.is_expr(address) or isinstance(getattr(address, "ty", None), ir.PtrType)):
        raise errors.TraceError(
            f"T.make_tensor: expected a T.ptr address, got {type(address).__name__} {address!r}"
        )
    kind = str(address.ty)
    if kind not in ("int64", "uint64") and "Ptr" not in kind and kind != "handle":
        raise errors.TraceError(
            f"T.make_tensor: the address must be a 64-bit integer (T.ptr), got a {kind} value"
        )
    if isinstance(shape, int) or builder.is_expr(shape):
        shape = (shape,)
    shape = tuple(builder.unwrap(s) for s in shape)
    for s in shape:
        value = builder.static_value(s)
        if value is not None and value <= 0:
            raise errors.TraceError(f"T.make_tensor: extents must be positive, got {shape}")
    dtype = dtypes.canonical(dtype)
    if strides is not None:
        strides = tuple(builder.unwrap(s) for s in strides)
        if len(strides) != len(shape):
            raise errors.TraceError(
                f"T.make_tensor: {len(strides)} strides for a rank-{len(shape)} shape"
            )
    ty = TensorAnnotation(shape, dtype, strides).ir_type()
    if kind in ("int64", "uint64"):
        address = _tirx.reinterpret(address, ty="handle")
    var = ir.Var("tensor_view", ty)
    call = ir.Call("tirx.decl_tensor", [address], ty_args=[ty], ty=ty)
    bind = ir.Bind(var, call, loc=builder.user_loc())
    st = builder.state()
    if st.kernels:
        _T.emit_(bind)
    else:  # before T.Kernel (upstream's usual place): declared first thing inside it
        pending = getattr(st, "pending_views", None)
        if pending is None:
            pending = st.pending_views = []
        pending.append(bind)
    return var


def emit_pending_views():
    """Emit the views declared before the kernel's launch (called by ``T.Kernel``)."""
    st = builder.state()
    for bind in getattr(st, "pending_views", None) or ():
        _T.emit_(bind)
    st.pending_views = []

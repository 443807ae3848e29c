"""Parameter annotations: ``T.Tensor``/``T.Buffer``/``T.StridedTensor`` and scalars."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors


def _shape(shape) -> tuple:
    if isinstance(shape, int) or (isinstance(shape, ir.Expr) and ir.is_prim_expr(shape)):
        return (shape,)
    return tuple(shape)


@dataclass(frozen=True)
class TensorAnnotation:
    """The declared shape, dtype and (optional) strides of a tensor parameter."""

    shape: tuple
    dtype: str
    strides: tuple | None = None
    scope: str = "global"

    def ir_type(self):
        """The TIRx TensorType of a parameter with this annotation."""
        layout = None
        if self.strides is not None:
            from tvm_tirx.tirx.layout import S, TileLayout

            layout = TileLayout(S[tuple(self.shape) : tuple(self.strides)])
        # Element alignment only, so that views such as a[1:] are accepted.
        align = max(1, dtypes.bits(self.dtype) // 8)
        from ..transform.wide_index import wide_shape

        shape = wide_shape(self.shape)  # 2**31 elements or more: 64-bit extents and offsets
        return _T.Tensor(shape, self.dtype, scope=self.scope, align=align, layout=layout)

    def __getitem__(self, key):  # T.Tensor[(M, N), "float16"] form
        raise TypeError("write T.Tensor((M, N), dtype), not T.Tensor[...]")


class _Subscriptable:
    """A ``T.Tensor``-style annotation factory that also takes upstream's subscript form:
    ``T.Tensor[(M, K), T.float16]`` is ``T.Tensor((M, K), T.float16)``."""

    def __init__(self, fn):
        self._fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __getitem__(self, key):
        return self._fn(*key) if isinstance(key, tuple) else self._fn(key)

    def __repr__(self):
        return f"T.{self.__name__}"


def Tensor(shape, dtype="float32", data=None, strides=None, scope="global"):  # noqa: N802
    """Annotation of a tensor parameter: ``A: T.Tensor((M, K), "float16")``.

    Inside a kernel, ``T.Tensor(shape, dtype, A.data)`` (upstream's signature) is a view
    of ``A``'s memory with another shape, e.g. ``(KH * KW * C, F)`` over a 4-D weight.
    """
    annotation = TensorAnnotation(
        _shape(shape), dtypes.canonical(dtype), None if strides is None else _shape(strides), scope
    )
    return annotation if data is None else _view(annotation, data)


def _view(annotation, data):
    from . import builder

    if not isinstance(data, ir.Expr):
        raise TypeError(
            f"T.Tensor(shape, dtype, data): data must be a tensor's pointer (A.data), got "
            f"{data!r}; pass strides by keyword (strides=...)"
        )
    builder.state()
    ty = annotation.ir_type()
    var = ir.Var("v", ty)  # 'v': renamed to the user's name by the assignment
    _T.emit_(ir.Bind(var, _T.decl_tensor(data, ty_args=[ty]), loc=builder.user_loc()))
    return var


def Buffer(shape, dtype="float32", data=None, strides=None, scope="global"):  # noqa: N802
    """Alias of :func:`Tensor` (upstream's older spelling)."""
    return Tensor(shape, dtype, data, strides, scope)


def StridedTensor(shape, strides, dtype="float32"):  # noqa: N802
    """A tensor parameter with explicit element strides (a non-contiguous view)."""
    return Tensor(shape, dtype, strides=strides)


Tensor = _Subscriptable(Tensor)
Buffer = _Subscriptable(Buffer)
StridedTensor = _Subscriptable(StridedTensor)


def dynamic(name: str, dtype: str = "int32"):
    """A symbolic dimension (``M = T.dynamic("m")``), bound from the arguments at call time.

    Several names separated by commas or spaces (``B, S = T.dynamic("batch, seq_len")``)
    give a tuple of dimensions, as upstream's ``T.dynamic`` does.
    """
    dtype = dtypes.canonical(dtype)
    names = [n for n in re.split(r"[\s,]+", name.strip()) if n] if isinstance(name, str) else []
    if not names:
        raise errors.TraceError(f"T.dynamic({name!r}): give at least one name")
    for n in names:
        if not n.isidentifier():
            raise errors.TraceError(f"T.dynamic({name!r}): {n!r} is not a valid name")
    if len(names) == 1 and not re.search(r"[\s,]", name.strip()):
        return ir.Var(names[0], dtype)
    return tuple(ir.Var(n, dtype) for n in names)


symbolic = dynamic


def SharedBuffer(shape, dtype="float32"):  # noqa: N802 - upstream API (macro parameter annotations)
    """Annotation of a shared-memory tile parameter of a ``T.macro``."""
    return TensorAnnotation(_shape(shape), dtypes.canonical(dtype), None, "shared.dyn")


def FragmentBuffer(shape, dtype="float32"):  # noqa: N802
    """Annotation of a fragment parameter of a ``T.macro``."""
    return TensorAnnotation(_shape(shape), dtypes.canonical(dtype), None, "local.fragment")


def LocalBuffer(shape, dtype="float32"):  # noqa: N802
    """Annotation of a per-thread local tile parameter of a ``T.macro``."""
    return TensorAnnotation(_shape(shape), dtypes.canonical(dtype), None, "local")

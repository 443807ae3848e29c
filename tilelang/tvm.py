"""``from tilelang import tvm``: the compiler foundation under the name upstream programs use.

Upstream TileLang bundles a fork of Apache TVM and exposes it as ``tilelang.tvm``. tilelang is
built on TIRx (``tvm_tirx``) instead, so this module forwards to it where TIRx has the same
thing, under upstream's name:

- ``tvm.tirx.const``, ``tvm.tirx.Var``, the ``tvm.tirx`` math ops (``floordiv``, ``exp`` ...),
  ``tvm.tirx.PrimExpr`` (= ``tvm_tirx.tirx.Expr``), ``tvm.tirx.PrimFunc`` (= the traced
  ``tvm_tirx.tirx.Function``), ``tvm.tirx.IntImm`` / ``FloatImm`` / ``Range`` ... (TIRx's ``ir``)
- ``tvm.IRModule``, ``tvm.ir``, ``tvm.target`` (``tvm.target.Target``), ``tvm.runtime``,
  ``tvm.transform``, ``tvm.cpu`` / ``tvm.cuda`` (devices)
- ``tvm.DataType``: ``tvm_ffi.dtype`` (``DataType("float16").bits == 16``)

Anything else (``tvm.arith``, ``tvm.te``, ``tvm.relax``, ``tvm.tirx.stmt_functor`` ...) raises
AttributeError saying so: TIRx has no such module, and programs needing it must change.
"""

from __future__ import annotations

import types

import tvm_tirx as _tirx
from tvm_ffi import dtype as DataType  # noqa: N812 - upstream's name
from tvm_tirx import IRModule, ir, runtime, target, transform  # noqa: F401
from tvm_tirx import tirx as _tirx_tirx

from . import dtypes as _dtypes

__all__ = ["DataType", "IRModule", "ir", "runtime", "target", "tirx", "transform"]

_WHY = (
    "tilelang is built on TIRx (tvm_tirx), not on upstream TileLang's TVM fork; "
    "{what} has no TIRx counterpart, so `tilelang.tvm` cannot provide it"
)


def _reinterpret(dtype, value, span=None):
    """``tvm.tirx.reinterpret(dtype, value)``: TVM's argument order (TIRx's is
    ``reinterpret(value, ty=...)``); the bits of ``value`` read as ``dtype``."""
    if isinstance(value, str) and not isinstance(dtype, str):
        dtype, value = value, dtype
    if isinstance(value, int | float):
        raise TypeError(
            f"tvm.tirx.reinterpret({dtype!r}, {value!r}): the value must be an expression "
            "(a Python number has no bit width; wrap it in tvm.tirx.const(value, dtype))"
        )
    return _tirx_tirx.reinterpret(value, ty=_dtypes.canonical(dtype))


# upstream tvm.tirx names whose TIRx object lives elsewhere, under another name, or takes
# its arguments in another order
_TIRX_ALIASES = {
    "PrimExpr": lambda: _tirx_tirx.Expr,
    "PrimFunc": lambda: _tirx_tirx.Function,
    "reinterpret": lambda: _reinterpret,
}


class _TirxNamespace(types.ModuleType):
    """``tvm.tirx``: TIRx's ``tirx`` module, plus expression classes TIRx keeps in ``ir``."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _TIRX_ALIASES:
            return _TIRX_ALIASES[name]()
        for mod in (_tirx_tirx, _tirx.ir):
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(_WHY.format(what=f"tvm.tirx.{name}"))

    def __dir__(self):
        return sorted(set(dir(_tirx_tirx)) | set(_TIRX_ALIASES))


tirx = _TirxNamespace("tilelang.tvm.tirx", "TIRx's tirx module under upstream's name.")
tir = tirx  # older upstream programs write tvm.tir


def __getattr__(name: str):
    if not name.startswith("__") and hasattr(_tirx, name):
        return getattr(_tirx, name)
    raise AttributeError(_WHY.format(what=f"tvm.{name}"))

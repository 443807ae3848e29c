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

__all__ = ["DataType", "IRModule", "ir", "runtime", "target", "tirx", "transform"]

_WHY = (
    "tilelang is built on TIRx (tvm_tirx), not on upstream TileLang's TVM fork; "
    "{what} has no TIRx counterpart, so `tilelang.tvm` cannot provide it"
)

# upstream tvm.tirx names whose TIRx object lives elsewhere or under another name
_TIRX_ALIASES = {
    "PrimExpr": lambda: _tirx_tirx.Expr,
    "PrimFunc": lambda: _tirx_tirx.Function,
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

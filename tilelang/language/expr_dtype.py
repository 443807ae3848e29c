"""``expr.dtype`` on scalar expressions, as upstream's ``PrimExpr.dtype``.

Upstream programs test element types of expressions they are handed, e.g. a dequantize
helper asserting ``val.dtype == T.uint8`` on ``B_local[i, j]``. TIRx spells this
``expr.ty`` (a ``PrimType``); its tensors already answer ``.dtype``. Importing this module
declares ``dtype`` as an expression property of ``PrimType`` (TIRx's type-directed
attribute lookup), returning the tilelang ``T.dtype`` (a ``str``: it compares equal to
``"uint8"`` and to ``T.uint8``).
"""

from __future__ import annotations

from tvm_tirx.ir.type import PrimType

from .. import dtypes


def _prim_dtype(ty, _expr):
    return dtypes.dtype(str(ty))


def _install():
    props = PrimType.__dict__.get("__expr_properties__")
    if props is not None and "dtype" in props:
        return
    # PrimType's own table (the inherited one is shared by every type)
    PrimType.__expr_properties__ = {**PrimType.__expr_properties__, "dtype": _prim_dtype}


_install()

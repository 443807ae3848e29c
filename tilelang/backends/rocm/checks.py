"""Element types the ROCm backend refuses, before or after lowering (never in hipcc).

* OCP fp8/fp6/fp4 formats (``float8_e4m3fn``, ``float8_e5m2``, ...): CDNA3 has the FNUZ
  encodings instead; refused wherever they appear (parameters, tiles, tile-op operands).
* FNUZ fp8 (``float8_e4m3fnuz``, ``float8_e5m2fnuz``): the HIP source holds them as raw bytes,
  so they may only be moved (``T.copy``) and multiplied by the MFMA gemm; any conversion or
  arithmetic on them is refused after lowering, at the user's line of the statement.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.ir.prim import expr as prim

from ... import errors
from ...ops import tile_op_of

FNUZ = ("float8_e4m3fnuz", "float8_e5m2fnuz")
_ARITH = (prim.Add, prim.Sub, prim.Mul, prim.Div, prim.Max, prim.Min, prim.Cast)


def _is_other_small_float(dtype: str) -> bool:
    return dtype.startswith(("float8", "float6", "float4")) and dtype not in FNUZ


def refuse_ocp_small_floats(func) -> None:
    """CompileError for an fp8/fp6/fp4 type other than the FNUZ ones anywhere in ``func``."""

    def fail(dtype, what, loc):
        raise errors.compile_error(
            f"{dtype} ({what}) is not supported on the rocm target (gfx94x MFMAs take the FNUZ "
            "formats float8_e4m3fnuz / float8_e5m2fnuz)",
            loc,
        )

    for param in func.params:
        dtype = str(getattr(param.ty, "dtype", ""))
        if _is_other_small_float(dtype):
            fail(dtype, f"tensor {param.name}", None)

    found = []  # raised after the walk: an exception inside a callback loses its type

    def bind(node):
        dtype = str(getattr(node.var.ty, "dtype", ""))
        if _is_other_small_float(dtype):
            found.append((dtype, f"tile {node.var.name}", node.loc))
        return node

    def evaluate(node):
        hit = tile_op_of(node)
        if hit is not None:
            for arg in hit[1].args:
                text = str(getattr(arg, "ty", "")).replace('"', " ").replace(",", " ")
                bad = [t for t in text.split() if _is_other_small_float(t)]
                if bad:
                    found.append((bad[0], f"T.{hit[0].name} operand", hit[1].loc))
        return node

    tvm_ffi.structural_map(func.body, [(ir.Bind, bind), (ir.Evaluate, evaluate)])
    if found:
        fail(*found[0])


def refuse_fnuz_arithmetic(func) -> None:
    """CompileError for a conversion or arithmetic on FNUZ fp8 values in the lowered ``func``."""

    def involves(node) -> str | None:
        dtypes = [str(getattr(node, "ty", ""))]
        if isinstance(node, prim.Cast):
            dtypes.append(str(getattr(node.value, "ty", "")))
        else:
            dtypes += [str(getattr(getattr(node, x, None), "ty", "")) for x in ("a", "b")]
        return next((d for d in dtypes if d in FNUZ), None)

    found = []  # (dtype, loc), raised after the walk

    def store(node):
        hits = []

        def arith(expr):
            dtype = involves(expr)
            if dtype is not None:
                hits.append(dtype)
            return expr

        tvm_ffi.structural_map(node.value, [(_ARITH, arith)])
        if hits and not found:
            found.append((hits[0], node.loc))
        return node

    tvm_ffi.structural_map(func.body, [(ir.TensorStore, store)])
    if found:
        raise errors.compile_error(
            f"{found[0][0]} arithmetic or conversion is not supported on the rocm target "
            "(fp8 tiles may only be copied and multiplied by T.gemm)",
            found[0][1],
        )


def fold_fnuz_constants(body):
    """Constants converted to FNUZ fp8 (the zero fill of tail copies) become their byte
    pattern reinterpreted (TIRx's printer would emit a float-to-fp8 bit conversion of a
    literal's address, which is not C++)."""
    import ml_dtypes
    import numpy as np
    from tvm_tirx import tirx as _tirx

    def as_bytes(number, dtype):
        bits = int(np.array([number], dtype=getattr(ml_dtypes, dtype)).view(np.uint8)[0])
        return _tirx.reinterpret(ir.const(bits, "uint8"), ty=dtype)

    def cast(node):
        dtype = str(getattr(node, "ty", ""))
        if dtype in FNUZ and isinstance(node.value, ir.FloatImm | ir.IntImm):
            return as_bytes(float(node.value.value), dtype)
        return node

    def literal(node):
        dtype = str(getattr(node, "ty", ""))
        return as_bytes(float(node.value), dtype) if dtype in FNUZ else node

    return tvm_ffi.structural_map(body, [(prim.Cast, cast), (ir.FloatImm, literal)])

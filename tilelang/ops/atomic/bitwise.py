"""``T.atomic_or(dst, value)``: atomically ``dst |= value`` on one integer element.

IR: ``tl.atomic_or(dst_region, value)`` (``dst`` one element of a global or shared tensor of
int32 or uint32: the element types whose CUDA and HIP ``atomicOr`` overloads match the
generated pointer types).

- CPU: a plain read-modify-write (the CPU backend runs the blocks of a kernel that uses
  atomics one after another, and a block's threads in turn).
- CUDA / ROCm: ``atomicOr(&dst, value)`` by every thread that reaches it. OR is idempotent,
  so a thread-independent update done by every thread equals one done once. ``atomicOr`` is
  relaxed; a stronger ``memory_order`` adds ``__threadfence()`` before it (release), after it
  (acquire) or both (acq_rel, seq_cst).
- Metal has no rule: "T.atomic_or is not supported on the metal target" at the user's line.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...lowering import irb
from ...lowering.bounds import in_bounds
from ...lowering.region import RegionView
from ...lowering.thread_utils import extern_stmt, is_fragment, physical
from ..registry import TileOpDef, lower_rule

ATOMIC_OR = TileOpDef("atomic_or", ("dst", "value"), {"memory_order": ""})
DTYPES = ("int32", "uint32")


@lower_rule("atomic_or", "cpu")
def lower_atomic_or_cpu(v, ctx):
    """``dst = dst | value``."""
    dst = RegionView.of(v.dst)
    old = ir.TensorLoad(dst.tensor, dst.begins)
    return irb.store(dst.tensor, dst.begins, old | v.value.astype(dst.dtype), loc=v.loc)


def _lower_atomic_or_gpu(v, ctx):
    dst = RegionView.of(v.dst)
    if is_fragment(dst.tensor) or str(dst.scope).startswith("local"):
        raise errors.compile_error(
            f"T.atomic_or: {dst.name} is thread-local; atomics need a global or shared dst",
            v.loc,
        )
    idx = physical(dst.tensor, dst.begins, ctx)
    address = _tirx.address_of(ir.TensorLoad(dst.tensor, list(idx)))
    call = _tirx.call_extern("atomicOr", address, v.value.astype(dst.dtype), ty=dst.dtype)
    fence = extern_stmt("__threadfence")
    before = [fence] if v.memory_order in ("release", "acq_rel", "seq_cst") else []
    after = [fence] if v.memory_order in ("acquire", "acq_rel", "seq_cst") else []
    stmts = [*before, ir.Evaluate(call), *after]
    stmt = stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)
    pred = in_bounds(dst.tensor, idx, ctx, {})
    return stmt if pred is None else ir.If(pred, stmt, None)


lower_rule("atomic_or", "cuda")(_lower_atomic_or_gpu)
lower_rule("atomic_or", "rocm")(_lower_atomic_or_gpu)

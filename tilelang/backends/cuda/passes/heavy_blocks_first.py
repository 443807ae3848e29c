"""HeavyBlocksFirst: launch the blocks with the most work first (pass config
``tl.heavy_blocks_first``, default on).

In causal attention the grid is ``(ceildiv(seq, block_M), heads, batch)`` and block ``bx``
runs ``min(ceildiv(seq, block_N), ceildiv((bx + 1) * block_M, block_N))`` iterations: work
grows with ``blockIdx.x``, so in launch order the heaviest blocks of the last
``(head, batch)`` group start last and the kernel ends in a tail where few SMs work.
FlashAttention 2/3 take ``m_block = num_m_blocks - 1 - blockIdx.x``; this pass does the
same for any kernel where it can prove the pattern.

**Detection.** For each block index ``b`` (``blockIdx.x/y/z``, extent ``g`` not 1) every
loop of the kernel (``T.Pipelined``, ``T.serial``, nested or not) whose extent mentions
``b`` is examined, with the values of scalar ``Bind``s inlined and loads of global tensors
at indices free of ``b`` taken as opaque values. The analyzer is asked, with ``b`` in
``[0, g - 1)``, whether ``extent(b + 1) >= extent(b)`` (its rewrite rules, not Z3; else a
structural check that the extent is built from ``b`` by +, -, * / floordiv by constants,
min and max in a monotone way) and whether ``extent(b + 1) == extent(b)``. ``b`` is reversed when every such extent is
non-decreasing and one is not provably constant; a loop whose extent reads local or shared
memory (stream-K's ``end_iter[0] - start_iter[0]``) makes the work data-dependent, and no
index is reversed. ``if`` conditions are not weighed (this is a scheduling heuristic: a
wrong guess costs time, never correctness).

**Remap.** Every use of ``b`` in the kernel body reads ``g - 1 - b`` (substituted as an
expression, so later range analyses still see ``b``'s bounds). The map is a bijection of
the grid, so a kernel whose blocks are independent computes the same result.

**Safety.** CUDA does not specify the block order, but some programs rely on launch order
in practice. The kernel is left as it is (and the note says why) when it has atomics (on
global memory: split-K / stream-K fix-ups; ``T.atomic_*``, ``T.atomic_load/store``), a
``while`` loop (spin waits on flags written by other blocks, data-dependent work), a
thread-block cluster launch (``cluster_dims``, ``tl.cluster_multicast``) or a
``T.use_swizzle`` rasterization (its panels are a block order of their own).

Assumes: a traced kernel (tile level), before ``rasterize_blocks`` (whose hint it reads)
and after ``cluster_launch`` (whose shape it reads). Guarantees: the function carries
``tl.block_order``, one line per decision, when the kernel has a block index of extent
other than 1.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, sym
from tvm_tirx.ir.prim import expr as P

from .... import errors
from ....layout import expr as E
from ....lowering.stmt import launches_of, substitute, with_launch_body
from ....lowering.thread_utils import extern_name, is_global
from ....ops.registry import tile_op_of

#: the function attribute listing the pass's decisions
ATTR = "tl.block_order"
_INT_MAX = 2**31 - 1


def heavy_blocks_first(func, cluster_dims=(1, 1, 1), multicast: int = 1, enabled: bool = True):
    """``func`` with each block index whose loops' work provably grows with it reversed
    (see the module docstring); ``cluster_dims``/``multicast``: the kernel's cluster launch."""
    launches, inner = launches_of(func.body)
    blocks = [(tag, g, b) for tag, g, b in launches if tag.startswith("blockIdx")]
    blocks = [(tag, g, b) for tag, g, b in blocks if E.as_const_int(g) != 1]
    if not blocks:
        return func
    if not enabled:
        return func.with_attr(ATTR, ["kept in launch order: tl.heavy_blocks_first = False"])
    loops = _loop_extents(inner)
    if isinstance(loops, str):
        return func.with_attr(ATTR, [f"kept in launch order: {loops}"])
    shape_vars = _shape_vars(func) if loops else []
    grows, notes = [], []
    for tag, g, b in blocks:
        others = [x for x in blocks if x[2] is not b]
        heavier, why = _classify(b, g, loops, others, shape_vars)
        if heavier:
            grows.append((tag, g, b, why))
        else:
            notes.append(f"{tag} kept: {why}")
    if grows:
        unsafe = _unsafe_reasons(inner, cluster_dims, multicast)
        if unsafe:
            names = ", ".join(tag for tag, *_ in grows)
            return func.with_attr(
                ATTR, [f"{names} kept in launch order although the work grows: {'; '.join(unsafe)}"]
            )
    mapping = {b: g - 1 - b for _, g, b, _ in grows}
    lines = [f"{tag} reversed (heaviest blocks first): {why}" for tag, _, _, why in grows]
    if mapping:
        func = func.with_body(with_launch_body(func.body, substitute(inner, mapping)))
    return func.with_attr(ATTR, lines + notes)


# ------------------------------------------------------------------------------ detection
def _loop_extents(body):
    """``[(loop var name, extent)]`` of every For in ``body`` with scalar Binds inlined, or a
    string saying why the work cannot be told (a while loop)."""
    binds, loops, whiles = {}, [], []

    def visit_bind(node):
        if isinstance(node.value, ir.Call) and getattr(node.value.op, "name", "") in (
            "tirx.alloc_tensor",
            "tirx.decl_tensor",
        ):
            return
        if isinstance(node.var, ir.Var) and "Tensor" not in type(node.var.ty).__name__:
            binds[node.var] = node.value

    def visit_for(node):  # T.Parallel nests and other static loops weigh the same everywhere
        if E.as_const_int(node.begin) is None or E.as_const_int(node.end) is None:
            loops.append((node.var.name, node.end - node.begin, node.loc))

    def visit_while(node):
        whiles.append(node)

    tvm_ffi.structural_walk(
        body, [(ir.Bind, visit_bind), (ir.For, visit_for), (ir.While, visit_while)]
    )
    if whiles:
        return f"a while loop (spin wait or data-dependent work){_at(whiles[0].loc)}"
    out = []
    for name, extent, loc in loops:
        for _ in range(8):  # Binds of Binds
            inlined = substitute(extent, binds)
            if inlined.same_as(extent):
                break
            extent = inlined
        out.append((name, extent, loc))
    return out


def _classify(b, g, loops, other_blocks, shape_vars):
    """(True, why) when the loops' work is non-decreasing in ``b`` and not constant;
    (False, why) otherwise."""
    analyzer = _analyzer(b, g, other_blocks, shape_vars)
    growing = None
    for name, extent, loc in loops:
        extent, local = _abstract_loads(extent, b)
        if local:
            return False, f"loop {name}'s extent reads {local} (data-dependent work){_at(loc)}"
        if not E.uses_var(extent, b):
            continue
        step = substitute(extent, {b: b + 1})
        # the analyzer's own rules only: its Z3 fallback (SYMBOLIC_BOUND) took 20-70 ms per
        # failed proof, and a wrong guess here costs time, never correctness
        if analyzer.can_prove(step == extent):
            continue
        if not (analyzer.can_prove(step >= extent) or _monotone(extent, b) == 1):
            return (
                False,
                f"loop {name}'s extent {extent} is not provably non-decreasing in {b.name}",
            )
        growing = growing or f"loop {name}'s extent {extent} grows with {b.name}{_at(loc)}"
    if growing is None:
        return False, "no loop extent grows with it"
    return True, growing


def _analyzer(b, g, other_blocks, shape_vars):
    context = sym.ConstraintContext()
    context.append(sym.RangeConstraint(b, ir.Range(0, E.as_expr(g) - 1)))
    for _, extent, var in other_blocks:
        context.append(sym.RangeConstraint(var, ir.Range(0, E.as_expr(extent))))
    for var in shape_vars:
        context.append(sym.RangeConstraint(var, ir.Range(0, ir.const(_INT_MAX, "int32"))))
    analyzer = sym.Analyzer()
    analyzer.sync_constraint_context(context)
    return analyzer


def _abstract_loads(extent, b):
    """(``extent`` with each load of a global tensor at indices free of ``b`` replaced by a
    fresh variable, a description of a load that cannot be, or None)."""
    bad = []

    def repl(node):
        if is_global(node.source) and not any(E.uses_var(i, b) for i in node.indices):
            return ir.Var(f"{node.source.name}_value", node.ty)
        bad.append(f"{node.source.name}[...]")
        return node

    out = tvm_ffi.structural_map(extent, [(ir.TensorLoad, repl)])
    return out, (bad[0] if bad else None)


def _monotone(e, v):
    """+1 / -1 when ``e`` is non-decreasing / non-increasing in ``v`` by its structure
    (+, -, * and floordiv by constants, min, max, casts), 0 when free of ``v``, else None."""
    if not E.uses_var(e, v):
        return 0
    if isinstance(e, ir.Var):
        return 1
    if isinstance(e, P.Cast):
        return _monotone(e.value, v)
    if isinstance(e, P.Add | P.Min | P.Max):
        return _combine(_monotone(e.a, v), _monotone(e.b, v))
    if isinstance(e, P.Sub):
        right = _monotone(e.b, v)
        return _combine(_monotone(e.a, v), None if right is None else -right)
    if isinstance(e, P.Mul | P.FloorDiv | P.Div):
        c = E.as_const_int(e.b)
        if c is None and isinstance(e, P.Mul):
            e, c = P.Mul(e.b, e.a), E.as_const_int(e.a)
        inner = _monotone(e.a, v)
        if c is None or c == 0 or inner is None:
            return None
        return inner if c > 0 else -inner
    return None


def _combine(x, y):
    if x is None or y is None:
        return None
    if x == 0 or x == y:
        return y
    return x if y == 0 else None


def _shape_vars(func):
    """The function's symbolic shape variables (non-negative)."""
    found = {}
    for param in func.params:
        for dim in getattr(param.ty, "shape", None) or []:
            if isinstance(dim, ir.IntImm):
                continue
            for var in E.free_vars(dim):
                found[var.__chandle__()] = var
        if isinstance(param, ir.Var) and not hasattr(param.ty, "shape"):
            found[param.__chandle__()] = param
    return list(found.values())


# ------------------------------------------------------------------------------ safety
def _unsafe_reasons(body, cluster_dims, multicast) -> list:
    """Why reordering the blocks of the kernel might change what it computes (empty: safe)."""
    from ....ops.hopper.op import CLUSTER_DIMS
    from ....ops.rasterize.op import USE_SWIZZLE

    reasons = []
    if tuple(int(d) for d in cluster_dims) != (1, 1, 1):
        reasons.append(f"a thread-block cluster launch (cluster_dims={list(cluster_dims)})")
    if int(multicast or 1) > 1:
        reasons.append(f"a thread-block cluster launch (tl.cluster_multicast={multicast})")
    found = []

    def visit_stmt(node):
        hit = tile_op_of(node)
        if hit is not None and hit[0] is USE_SWIZZLE and USE_SWIZZLE.view(hit[1]).enable:
            found.append(f"a T.use_swizzle rasterization{_at(hit[1].loc)}")
        elif hit is not None and hit[0] is CLUSTER_DIMS:
            found.append("a thread-block cluster launch (cluster_dims)")

    def visit_call(call):  # tile ops (tl.atomic, tl.atomic_or) and externs (tl.atomic_load)
        name = extern_name(call) or getattr(call.op, "name", "") or ""
        if "atomic" in name and _touches_global(call):
            found.append(f"a global-memory atomic ({name}){_at(call.loc)}")

    tvm_ffi.structural_walk(body, [(ir.Evaluate, visit_stmt), (ir.Call, visit_call)])
    for reason in found:
        if reason not in reasons:
            reasons.append(reason)
    return reasons


def _touches_global(node) -> bool:
    """Whether ``node`` names a global tensor (or a tensor of unknown scope)."""
    hit = []

    def visit(var):
        if "Tensor" in type(var.ty).__name__ and (is_global(var) or not str(var.ty.scope)):
            hit.append(var)

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return bool(hit)


def _at(loc) -> str:
    where = errors.where(loc) if loc is not None else ""
    return f" ({where})" if where else ""


__all__ = ["ATTR", "heavy_blocks_first"]

"""Drop ``fence.proxy.async`` calls that order nothing (CUDA sm_90a; ``tl.drop_proxy_fences``).

Every wgmma gemm starts with ``tl::fence_proxy_async_shared()`` unless pipelining marked it
fenced (``ops/gemm/wgmma_cuda.py``): the fence orders the thread's earlier generic-proxy
shared-memory accesses (``st.shared``, ``ldmatrix``, ``cp.async``) before later async-proxy
ones (wgmma operand reads, TMA). In SASS it is ``MEMBAR.ALL.CTA; FENCE.VIEW.ASYNC.S``: the
``MEMBAR`` waits for the thread's outstanding memory operations, e.g. the dQ atomics the
FlashAttention backward issued just before. Its loop had four per iteration; one orders a
generic write (``dsT_shared``) before a wgmma read, the others nothing.

Model (per thread, along every path of the structured program, loops to a fixpoint):
``dirty_w`` / ``dirty_r``: a generic shared write / read since the last fence. A wgmma or
TMA store (async read of shared memory) needs ``dirty_w`` clear; a release
(``mbarrier_arrive*``, after which a producer's TMA may overwrite the tile), a TMA load or
an unknown call taking a shared pointer needs both clear. The pass first checks that the
kernel as lowered satisfies these rules (otherwise it changes nothing: the model does not
cover something in it), puts one candidate fence before each loop that contains fences,
then tries the fences innermost/last first and drops each one whose removal keeps every
rule satisfied. Dropping a fence never adds a hazard the rules would not see: a path's
accesses are ordered by the fence that remains after them. Only the compiler's fences
(``tl::fence_proxy_async_shared``) are candidates: a ``T.fence_proxy_async`` the user wrote
(``tl::fence_proxy_async``) stays.

Cross-thread hand-offs are covered because the analysis is over paths, not threads: a
thread's write that another thread's wgmma reads after a barrier lies on a path reaching
that wgmma, so the fence after it stays.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir

from ....lowering.thread_utils import extern_stmt, is_shared

FENCES = ("tl::fence_proxy_async_shared", "tl::fence_proxy_async")
_ASYNC_READS = ("tl::wgmma_m64n", "tl::tma_store_1d", "tl::tma_store_2d", "tl::tma_store_3d",
                "tl::tma_store_4d", "tl::tma_store_5d", "tl::tma_store_add_")  # fmt: skip
_RELEASES = ("tl::mbarrier_arrive", "tl::tma_load_")
_NEUTRAL = ("tl::mbarrier_", "tl::wgmma_arrive", "tl::wgmma_commit", "tl::wgmma_wait",
            "tl::wgmma_fence_operand", "tl::named_barrier", "__syncthreads", "tl::set_max_nreg",
            "tl::tma_store_commit", "tl::tma_store_wait", "__shfl")  # fmt: skip
_GENERIC_READS = ("tl::ptx_ldmatrix",)
_GENERIC_WRITES = ("tl::ptx_stmatrix", "tl::cp_async")
_WRITE_FIRST = ("tl::copy_vec", "tl::zero_vec")


_ALL = frozenset({"*"})  # every shared buffer (an unknown call's operands)


@dataclass(frozen=True)
class _Effect:
    """What one leaf statement does, in the model of the module docstring (sets of shared
    buffer handles; ``_ALL`` for every buffer)."""

    reads: frozenset = frozenset()  # generic reads
    writes: frozenset = frozenset()  # generic writes
    async_reads: frozenset = frozenset()  # read by wgmma / TMA store: no unfenced write before
    async_writes: frozenset = frozenset()  # TMA load destinations (a release of a stage too)
    release: bool = False  # another thread may now write the async-written tiles


def _name(call) -> str:
    head = call.args[0] if call.args else None
    return str(head.value) if isinstance(head, ir.StringImm) else ""


def _shared(node) -> frozenset:
    out = set()
    tvm_ffi.structural_walk(
        node, [(ir.Var, lambda v: out.add(v.__chandle__()) if is_shared(v) else None)]
    )
    return frozenset(out)


def _pointers(node) -> frozenset:
    """Shared buffers ``node`` passes by address (not the ones it only loads values of)."""
    out = set()

    def call(x):
        if getattr(x.op, "name", "") == "tirx.address_of":
            out.update(_shared(x))
            return tvm_ffi.WalkResult.SKIP
        return None

    def var(v):
        if is_shared(v):
            out.add(v.__chandle__())

    skip = lambda x: tvm_ffi.WalkResult.SKIP  # noqa: E731 - a value load, not an address
    tvm_ffi.structural_walk(node, [(ir.TensorLoad, skip), (ir.Call, call), (ir.Var, var)],
                            order="pre")  # fmt: skip
    return frozenset(out)


def fence_call(stmt) -> bool:
    """Whether ``stmt`` is a ``tl::fence_proxy_async*`` call statement."""
    value = getattr(stmt, "value", None) if isinstance(stmt, ir.Evaluate) else None
    return isinstance(value, ir.Call) and _name(value) in FENCES


def effect(stmt) -> _Effect:
    """The generic/async shared-memory effect of a leaf statement."""
    reads, writes, async_reads, async_writes = set(), set(), set(), set()
    release = []

    def load(x):
        if is_shared(x.source):
            reads.add(x.source.__chandle__())

    def store(x):
        if is_shared(x.dest):
            writes.add(x.dest.__chandle__())

    def call(x):
        if getattr(x.op, "name", "") not in ("tirx.call_extern", "tirx.call_intrin"):
            return None
        name = _name(x)
        args = list(x.args[1:])
        if name.startswith(_ASYNC_READS):
            for a in args:
                async_reads.update(_shared(a))
        elif name.startswith("tl::tma_load_"):
            release.append(1)
            async_writes.update(_shared(args[0]) if args else _ALL)
        elif name.startswith("tl::mbarrier_arrive"):
            release.append(1)
        elif name.startswith(_NEUTRAL):
            pass
        elif name.startswith(_GENERIC_READS):
            for a in args:
                reads.update(_shared(a))
        elif name.startswith(_GENERIC_WRITES):
            for a in args:
                writes.update(_shared(a))
        elif name.startswith(_WRITE_FIRST) and args:
            writes.update(_pointers(args[0]))
            for a in args[1:]:
                reads.update(_pointers(a))
            return None  # value loads among the operands are reads (the walk goes on)
        elif any(_pointers(a) for a in args):  # unknown, given shared pointers: everything
            reads.update(_ALL)
            writes.update(_ALL)
            async_reads.update(_ALL)
            release.append(1)
        else:
            return None  # a math call: its operands' loads are plain reads
        return tvm_ffi.WalkResult.SKIP

    tvm_ffi.structural_walk(
        stmt, [(ir.TensorLoad, load), (ir.TensorStore, store), (ir.Call, call)], order="pre"
    )
    return _Effect(frozenset(reads), frozenset(writes), frozenset(async_reads),
                   frozenset(async_writes), bool(release))  # fmt: skip


def _meets(dirty, bufs) -> bool:
    return bool(dirty) and bool(bufs) and ("*" in dirty or "*" in bufs or bool(dirty & bufs))


class _Checker:
    """Forward may-analysis of the buffers with unfenced generic reads / writes;
    ``violations`` counts broken rules."""

    def __init__(self, dropped, effects, staged):
        self.dropped = dropped  # handles of fence statements treated as absent
        self.violations = 0
        self.record = True
        self.effects = effects
        self.staged = staged  # buffers some TMA load writes: a release hands them over

    def leaf(self, stmt, state):
        if fence_call(stmt):
            return state if stmt.__chandle__() in self.dropped else _CLEAN
        key = stmt.__chandle__()
        if key not in self.effects:
            self.effects[key] = effect(stmt)
        e = self.effects[key]
        dirty_r, dirty_w = state
        bad = _meets(dirty_w, e.async_reads) or (
            e.release and _meets(dirty_r | dirty_w, self.staged | e.async_writes)
        )
        if self.record and bad:
            self.violations += 1
        return (dirty_r | e.reads, dirty_w | e.writes)

    def visit(self, stmt, state):
        if isinstance(stmt, ir.SeqStmt):
            for s in stmt.seq:
                state = self.visit(s, state)
            return state
        if isinstance(stmt, ir.If):
            a = self.visit(stmt.then_case, state)
            b = self.visit(stmt.else_case, state) if stmt.else_case is not None else state
            return (a[0] | b[0], a[1] | b[1])
        if isinstance(stmt, ir.For | ir.While):
            record, self.record = self.record, False
            entry = state
            while True:  # the state at the top of an iteration, over all iteration counts
                out = self.visit(stmt.body, entry)
                merged = (entry[0] | out[0], entry[1] | out[1])
                if merged == entry:
                    break
                entry = merged
            self.record = record
            out = self.visit(stmt.body, entry)
            return (state[0] | out[0], state[1] | out[1])
        if isinstance(stmt, ir.RegionStmt):
            return self.visit(stmt.body, state)
        return self.leaf(stmt, state)


_CLEAN = (frozenset(), frozenset())


def _staged(body, effects) -> frozenset:
    out = set()

    def leaf(x):
        if isinstance(x, ir.Evaluate):
            key = x.__chandle__()
            known = effects.get(key)  # (computed once per statement: one check per fence)
            if known is None:
                known = effects[key] = effect(x)
            out.update(known.async_writes)

    tvm_ffi.structural_walk(body, [(ir.Evaluate, leaf)])
    return frozenset(out)


def _violations(body, dropped, effects) -> int:
    checker = _Checker(dropped, effects, _staged(body, effects))
    checker.visit(body, _CLEAN)
    return checker.violations


def _fences(body) -> list:
    out = []
    tvm_ffi.structural_walk(
        body, [(ir.Evaluate, lambda x: out.append(x) if fence_call(x) else None)]
    )
    return out


def _rebuild(stmt, drop, fence_before_loops):
    """``stmt`` without the statements in ``drop``; a fence before each loop whose body
    holds one when ``fence_before_loops`` (a fresh statement per loop)."""
    if stmt.__chandle__() in drop:
        return ir.Evaluate(ir.const(0, "int32"))
    if isinstance(stmt, ir.SeqStmt):
        parts = []
        for s in stmt.seq:
            if s.__chandle__() in drop:
                continue
            parts.extend(_rebuild_list(s, drop, fence_before_loops))
        if not parts:
            return ir.Evaluate(ir.const(0, "int32"))
        return parts[0] if len(parts) == 1 else ir.SeqStmt(parts)
    if isinstance(stmt, ir.If):
        other = stmt.else_case
        if other is not None:
            other = _rebuild(other, drop, fence_before_loops)
        return ir.If(stmt.condition, _rebuild(stmt.then_case, drop, fence_before_loops), other,
                     stmt.loc)  # fmt: skip
    if isinstance(stmt, ir.For):
        body = _rebuild(stmt.body, drop, fence_before_loops)
        return ir.For(stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body,
                      stmt.annotations, stmt.loc)  # fmt: skip
    if isinstance(stmt, ir.While):
        return ir.While(stmt.condition, _rebuild(stmt.body, drop, fence_before_loops), stmt.loc)
    if isinstance(stmt, ir.RegionStmt):
        body = _rebuild(stmt.body, drop, fence_before_loops)
        return ir.RegionStmt(stmt.op, stmt.args, stmt.body_params, stmt.attrs, body,
                             stmt.result_vars, stmt.loc)  # fmt: skip
    return stmt


def _rebuild_list(stmt, drop, fence_before_loops) -> list:
    new = _rebuild(stmt, drop, fence_before_loops)
    if fence_before_loops and isinstance(stmt, ir.For | ir.While) and _fences(stmt.body):
        return [_fence_stmt(), new]
    return [new]


def _fence_stmt():
    return extern_stmt(FENCES[0])


def drop_proxy_fences(body):
    """``body`` without the fences that order nothing (module docstring); unchanged when
    the kernel breaks the model's rules as lowered or no fence can go."""
    fences = _fences(body)
    # effects of the leaf statements by handle, shared by every check below: the rebuilt
    # body keeps the leaves, and `original` keeps the replaced nodes alive (no handle reuse)
    original, effects = body, {}
    if not fences or _violations(body, set(), effects) != 0:
        return body
    # one candidate before each loop with fences: an in-loop fence the back edge does not
    # need can then go even when the path entering the loop needs one
    body = _rebuild(body, set(), True)
    fences = _fences(body)
    dropped = set()
    for f in reversed(fences):  # innermost/last first: the loop candidates are tried last
        if _name(f.value) != FENCES[0]:  # a user's T.fence_proxy_async stays as written
            continue
        trial = dropped | {f.__chandle__()}
        if _violations(body, trial, effects) == 0:
            dropped = trial
    del original
    return _rebuild(body, dropped, False)

"""WgmmaPrefetchSharedReads (CUDA sm_90a): shared reads of an elementwise loop issued before
the wgmma wait that precedes it.

Assumes: thread-level code after ``wgmma_wait_sinking`` (each gemm's ``tl::wgmma_wait<n>``
sits right before the first statement needing its result, followed by its
``wgmma_fence_operand`` statements); elementwise loops vectorized by
``lowering/vectorize.py`` (a shared tile read as ``tl::copy_vec<B>(&vec[0], &S[idx])`` into a
``vec`` register array at the top of the loop body).

``tl::wgmma_wait`` is an asm with a ``memory`` clobber, so nvcc issues no shared load above it:
FlashAttention backward's ``P^T = exp2(S^T * scale - lse)`` waited on its ``lse`` loads after
the wait every iteration (the top stall of issue 13). This stage rewrites::

    wgmma_wait<n>; fence_operand(...)...
    for o in unroll(N):                       # the loop right after the wait block
        copy_vec<B>(&vec[0], &S[idx(o)])      # leading reads of shared tiles
        rest(vec)

into::

    for o in unroll(N):
        copy_vec<B>(&S_pf[o * V], &S[idx(o)])     # V = B / element bytes
    wgmma_wait<n>; fence_operand(...)...
    for o in unroll(N):
        rest(S_pf[o * V + .])

Guarantees: the rewrite happens only when it is provably the same program:

* only the wait and register operand fences lie between the new and the old position (no
  synchronisation, no store, no binding); a wgmma never writes shared memory;
* the loop is unrolled with a constant extent (the prefetch array stays in registers), the
  read indices name only the loop variable and values bound outside the loop;
* the rest of the loop body calls no extern, stores to no shared tile and takes no address
  (so reading iteration ``o``'s tile before iteration ``o - 1`` runs changes nothing), and
  never writes ``vec``; ``vec`` is used nowhere outside the loop;
* the prefetched values of one loop need at most :data:`MAX_PREFETCH_REGISTERS` 32-bit
  registers per thread.

Each decision (applied, or why a candidate loop was kept) is recorded on the function as
``tl.wgmma_prefetch`` (shown by ``TILELANG_DUMP_IR`` / ``tilelang.lower``). Pass config
``tl.wgmma_prefetch_shared_reads = False`` skips the stage.
"""

from __future__ import annotations

import itertools
import re

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.tirx.tensor import TensorType

from ....lowering import irb
from ....lowering.stmt import (
    StmtMutator,
    flatten_seq,
    launches_of,
    substitute,
    with_launch_body,
)
from ....lowering.thread_utils import (
    _bits,
    alloc,
    extern_calls,
    extern_name,
    extern_stmt,
    is_shared,
    scope_of,
)

#: Most 32-bit registers per thread one loop's prefetched values may take.
MAX_PREFETCH_REGISTERS = 32
#: Attribute naming the decisions on the function.
ATTR = "tl.wgmma_prefetch"

_WAIT = re.compile(r"tl::wgmma_wait<\d+>")
_COPY = re.compile(r"tl::copy_vec<(\d+)>")
_NAMES = itertools.count()


def _is_fence(stmt) -> bool:
    return (extern_name(stmt) or "").startswith("tl::wgmma_fence_operand<")


def _shared_read(stmt):
    """(vec, shared load, bytes) when ``stmt`` is ``copy_vec<B>(&vec[0], &S[idx])`` with
    ``vec`` a local array and ``S`` a shared tile, else None."""
    found = _COPY.fullmatch(extern_name(stmt) or "")
    if found is None or len(stmt.value.args) != 3:
        return None
    dst, src = stmt.value.args[1], stmt.value.args[2]
    if not all(
        isinstance(a, ir.Call) and str(getattr(a.op, "name", "")).endswith("address_of")
        for a in (dst, src)
    ):
        return None
    dst, src = dst.args[0], src.args[0]
    if not (isinstance(dst, ir.TensorLoad) and isinstance(src, ir.TensorLoad)):
        return None
    vec = dst.source
    if scope_of(vec) != "local" or not is_shared(src.source):
        return None
    if not all(isinstance(i, ir.IntImm) and int(i.value) == 0 for i in dst.indices):
        return None
    nbytes = int(found.group(1))
    if len(vec.ty.shape) != 1 or int(vec.ty.shape[0]) * _bits(vec) // 8 != nbytes:
        return None
    return vec, src, nbytes


def _handles(node, kind) -> list:
    out = []
    tvm_ffi.structural_walk(node, [(kind, out.append)])
    return out


def _var_counts(node) -> dict:
    counts: dict = {}

    def visit(v):
        counts[v.__chandle__()] = counts.get(v.__chandle__(), 0) + 1

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return counts


def _rest_problem(rest, vecs) -> str | None:
    """Why the loop body after its shared reads could not run after all of them, or None."""
    calls = _handles(rest, ir.Call)
    if any(extern_name(c) is not None for c in calls):
        return "the loop calls an extern"
    if any(str(getattr(c.op, "name", "")).endswith("address_of") for c in calls):
        return "the loop takes an address"
    for store in _handles(rest, ir.TensorStore):
        if is_shared(store.dest):
            return f"the loop writes {store.dest.name}"
        if store.dest.__chandle__() in vecs:
            return f"the loop writes {store.dest.name}"
    return None


def _prefetch(loop, counts, notes, where):
    """(prefetch loop, rewritten loop, new allocs) for ``loop`` right after a wait, or None."""
    body = flatten_seq(loop.body)
    reads = []
    for s in body:
        found = _shared_read(s)
        if found is None:
            break
        reads.append(found)
    if not reads or len(reads) == len(body):
        return None
    names = ", ".join(sorted({r[1].source.name for r in reads}))
    extent = loop.end - loop.begin
    step = loop.step
    from_zero = isinstance(loop.begin, ir.IntImm) and int(loop.begin.value) == 0
    unit = step is None or (isinstance(step, ir.IntImm) and int(step.value) == 1)
    if (
        loop.kind != ir.ForKind.UNROLLED
        or not isinstance(extent, ir.IntImm)
        or not from_zero
        or not unit
    ):
        notes.append(f"{where}: {names} kept (loop {loop.var.name} not unrolled)")
        return None
    n = int(extent.value)
    regs = sum(n * ((nbytes + 3) // 4) for _, _, nbytes in reads)
    if regs > MAX_PREFETCH_REGISTERS:
        notes.append(f"{where}: {names} kept ({regs} registers > {MAX_PREFETCH_REGISTERS})")
        return None
    rest = body[len(reads) :]
    vecs = {r[0].__chandle__(): r for r in reads}
    bound = {x.var.__chandle__() for x in _handles(loop.body, ir.Bind)}
    bound |= {x.var.__chandle__() for x in _handles(loop.body, ir.For)}
    problem = _rest_problem(irb.seq(rest), vecs)
    if problem is None and len(vecs) != len(reads):
        problem = "one register array read twice"
    if problem is None:
        loop_counts = _var_counts(loop.body)
        for vec, src, _ in reads:
            if any(v.__chandle__() in bound for v in _handles(src, ir.Var)):
                problem = f"{src.source.name}'s index is bound in the loop"
            loop_uses = loop_counts.get(vec.__chandle__(), 0)
            if counts.get(vec.__chandle__(), 0) - loop_uses > 1:  # more than its alloc
                problem = f"{vec.name} is used outside the loop"
    if problem is not None:
        notes.append(f"{where}: {names} kept ({problem})")
        return None
    pre, allocs, mapping = [], [], {}
    o = loop.var
    for vec, src, nbytes in reads:
        lanes = int(vec.ty.shape[0])
        name = f"{src.source.name}_pf{next(_NAMES)}"
        ty = TensorType([n * lanes], str(vec.ty.dtype), scope="local", align=max(nbytes, 4))
        pf = ir.Var(name, ty)
        allocs.append(pf)
        mapping[vec.__chandle__()] = (pf, lanes)
        dst = _tirx.address_of(ir.TensorLoad(pf, [o * lanes]))
        pre.append(extern_stmt(f"tl::copy_vec<{nbytes}>", dst, _tirx.address_of(src)))

    def load(x):
        hit = mapping.get(x.source.__chandle__())
        if hit is None:
            return x
        pf, lanes = hit
        return ir.TensorLoad(pf, [o * lanes + x.indices[0]])

    new_rest = tvm_ffi.structural_map(irb.seq(rest), [(ir.TensorLoad, load)])
    fetch = ir.For(o, loop.begin, loop.end, loop.step, loop.kind, irb.seq(pre),
                   loop.annotations, loop.loc)  # fmt: skip
    # the compute loop gets a fresh loop variable (a Var is bound once)
    o2 = ir.Var(o.name, o.ty)
    new_rest = substitute(new_rest, {o: o2})
    compute = ir.For(o2, loop.begin, loop.end, loop.step, loop.kind, new_rest,
                     loop.annotations, loop.loc)  # fmt: skip
    notes.append(f"{where}: {names} read before the wait ({n} x copy_vec, {regs} registers)")
    return fetch, compute, allocs


class _Prefetcher(StmtMutator):
    def __init__(self, counts):
        super().__init__("cuda")
        self.counts = counts
        self.notes: list = []
        self.allocs: list = []

    def visit_SeqStmt(self, stmt, ctx):
        flat = self.visit_flat(stmt, ctx)
        if not flat:
            return None
        i = 0
        while i < len(flat):
            wait = extern_name(flat[i]) or ""
            if not _WAIT.fullmatch(wait):
                i += 1
                continue
            j = i + 1
            while j < len(flat) and _is_fence(flat[j]):
                j += 1
            if j < len(flat) and isinstance(flat[j], ir.For):
                done = _prefetch(flat[j], self.counts, self.notes, f"after {wait}")
                if done is not None:
                    fetch, compute, allocs = done
                    self.allocs += allocs
                    flat[i : j + 1] = [fetch, *flat[i:j], compute]
                    j += 1
            i = j
        return irb.seq(flat)


def prefetch_shared_reads(body):
    """(``body`` with the shared reads of loops right after a wgmma wait issued before the
    wait, decision notes) (module doc)."""
    if not extern_calls(body, "tl::wgmma_wait<"):
        return body, []
    mutator = _Prefetcher(_var_counts(body))
    new = mutator(body)
    if mutator.allocs:
        _, inner = launches_of(new)
        inner_seq = flatten_seq(inner)
        new = with_launch_body(new, ir.SeqStmt([alloc(v) for v in mutator.allocs] + inner_seq))
    return new, mutator.notes


def stage_wgmma_prefetch_shared_reads(func, state):
    """Shared reads of an elementwise loop right after a ``wgmma.wait_group`` are issued
    before the wait, into registers (``passes/wgmma_prefetch.py``;
    ``tl.wgmma_prefetch_shared_reads``); the decisions go to ``tl.wgmma_prefetch``."""
    if not state.options.get("wgmma_prefetch_shared_reads", True):
        return func
    body, notes = prefetch_shared_reads(func.body)
    func = func.with_body(body)
    return func.with_attr(ATTR, notes) if notes else func


__all__ = ["MAX_PREFETCH_REGISTERS", "prefetch_shared_reads", "stage_wgmma_prefetch_shared_reads"]

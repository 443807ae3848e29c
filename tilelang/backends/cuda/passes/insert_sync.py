"""InsertSync (CUDA): ``__syncthreads()`` exactly where shared memory changes hands.

Assumes: thread-level code (tile ops and parallel nests lowered); shared tiles are still
separate Vars (run before ``plan_shared_memory``); any two statements may touch a shared
element from different threads.

Guarantees: walking the kernel in program order, a barrier precedes every statement that
reads a shared buffer written since the last barrier (RAW), writes one read or written
since then (WAR/WAW) — including across iterations of a loop (the body is checked with
the state its own end leaves). Barriers are only placed at block-uniform points: a
statement under a thread-dependent condition or loop is treated as one unit and the
barrier goes before it. Existing barriers (``T.sync_threads``) are respected.

A value is block-uniform when it depends only on block indices, constants, global loads
and *uniform locals*: per-thread scalars (``T.alloc_local``) that every thread stores with
the same uniform value at block-uniform points (``_uniform_locals``). So the body of a
``while start[0] < end:`` loop or a ``for k in T.Pipelined(end[0] - start[0])`` loop over
such scalars (the stream-K GEMM's loops) is analysed statement by statement, like any
loop; treated as one unit, a shared tile copied and read by a gemm inside it got no
barrier at all (a race on a GPU).

A loop annotated ``tl_async_stages`` (software pipelining's split mma.sync schedule,
``pipeline_planning._plan_split``; ROCm's register-staged schedule, whose
``tl::stage_copy`` stores count as such copies: ``backends/rocm/pipelining.py``) vouches that each of its cp.async copies writes a
pipeline stage that no statement of the loop reads or writes until the loop's own
``cp.async.wait_group`` + barrier, and that the stage was last read before the previous
such barrier: inside it (and for the loop as a whole against what precedes it) cp.async
writes are not counted as conflicting writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....lowering import shared_access as sa
from ....lowering.stmt import launch_of
from ....lowering.thread_range_marks import RANGE as RANGE_MARK
from ....lowering.thread_range_marks import range_of
from ....lowering.thread_utils import extern_name, extern_stmt, is_shared, is_sync, sync_threads

#: For-loop annotation: the loop's cp.async writes need no barrier (see the module doc).
ATTR_ASYNC_STAGES = "tl_async_stages"


@dataclass
class _State:
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)
    async_writes: set = field(default_factory=set)  # (buffer, leaf) pairs written by cp.async

    def merge(self, other):
        return _State(
            self.reads | other.reads,
            self.writes | other.writes,
            self.async_writes | other.async_writes,
        )

    def copy(self):
        return _State(set(self.reads), set(self.writes), set(self.async_writes))


def _on_call(async_writes):
    """The barrier model of a helper call's shared operands (``lowering.shared_access`` roles):
    mbarrier words are no data; ldmatrix, wgmma and TMA stores only read theirs (wgmma reads
    its A/B tiles through the descriptors; the elected thread's TMA store is waited for at
    once); a vector copy writes its first operand; cp.async, TMA loads and ROCm's stage
    stores write theirs asynchronously (copies of one tile op never overlap); any other
    call reads and writes every shared tensor it names."""

    def on_call(role, call, reads, writes):
        operands = call.args[1:]
        if role in (sa.BARRIER_WORD, sa.RELEASE):
            pass
        elif role in (sa.READ, sa.ASYNC_READ):
            for arg in operands:
                reads.update(sa.shared_handles(arg))
        elif role == sa.WRITE_FIRST and len(operands) >= 1:
            writes.update(sa.shared_handles(operands[0]))
            for arg in operands[1:]:
                reads.update(sa.shared_handles(arg))
        elif role in (sa.CP_ASYNC, sa.TMA_LOAD, sa.STAGE_COPY) and len(operands) >= 2:
            async_writes.update(sa.shared_handles(operands[0]))
            for arg in operands[1:]:
                reads.update(sa.shared_handles(arg))
        else:
            for arg in call.args:
                for v in sa.shared_handles(arg):
                    reads.add(v)
                    writes.add(v)
        return True  # pointer operands are classified here: taking an address is no read

    return on_call


def _accesses(stmt):
    """(reads, writes, async_writes): handles of the shared tensors a statement touches."""
    async_writes = set()
    reads, writes = sa.shared_accesses(stmt, _on_call(async_writes))
    return reads, writes | async_writes, async_writes


def _tag(bufs, leaf):
    return {(b, leaf) for b in bufs}


def _conflict(reads, writes, state, leaf, async_writes=frozenset()) -> bool:
    """Whether accesses of ``leaf`` race with another statement's since the last barrier.

    Asynchronous tile copies (cp.async, emitted only by software pipelining) neither
    conflict with each other (each partitions its tile over the threads) nor make later
    reads wait here: their data is consumed only after the pipeline's own
    ``cp.async.wait_group`` + barrier. A later write over a buffer they read still does.
    """
    own = leaf if isinstance(leaf, frozenset) else frozenset(() if leaf is None else (leaf,))
    w_prev = {b for b, who in state.writes if who not in own}
    r_prev = {b for b, who in state.reads if who not in own}
    sync_w_prev = {
        b for b, who in state.writes if who not in own and (b, who) not in state.async_writes
    }
    plain_writes = writes - async_writes
    waw = (plain_writes & w_prev) or (async_writes & sync_w_prev)
    return bool((reads & sync_w_prev) or (writes & r_prev) or waw)


def _is_local(var) -> bool:
    scope = getattr(getattr(var, "ty", None), "scope", None)
    return isinstance(var, ir.Var) and scope is not None and str(scope).startswith("local")


def _uniform_locals(body, thread_var) -> set:
    """Handles of the local tensors that hold block-uniform values.

    Starts from every local tensor and drops, until nothing changes, each one that is
    stored a non-uniform value or at a non-uniform index, stored under a thread-dependent
    condition or loop, or passed by address to a call (which may write anything there).
    """
    locals_ = set()

    def note(x):
        if _is_local(x.var):
            locals_.add(x.var.__chandle__())

    tvm_ffi.structural_walk(body, [(ir.Bind, note)])
    while True:
        checker = _Uniformity({thread_var.__chandle__()}, locals_)
        bad = checker.non_uniform_locals(body)
        if not bad & locals_:
            return locals_
        locals_ -= bad


class _Uniformity:
    """Whether expressions are block-uniform, given the varying Vars and uniform locals."""

    def __init__(self, varying, uniform_locals):
        self.varying = set(varying)
        self.uniform_locals = uniform_locals

    def uniform(self, expr) -> bool:
        bad = []

        def visit(v):
            if v.__chandle__() in self.varying:
                bad.append(v)

        def load(x):
            scope = str(x.source.ty.scope)
            if scope != "global" and x.source.__chandle__() not in self.uniform_locals:
                bad.append(x)

        tvm_ffi.structural_walk(expr, [(ir.Var, visit), (ir.TensorLoad, load)])
        return not bad

    def non_uniform_locals(self, body) -> set:
        """Local tensors written in a way that may differ between threads (one pass)."""
        bad = set()

        def addressed(node):
            def visit(x):
                if getattr(x.op, "name", "") == "tirx.address_of":
                    for arg in x.args:
                        if isinstance(arg, ir.TensorLoad) and _is_local(arg.source):
                            bad.add(arg.source.__chandle__())

            tvm_ffi.structural_walk(node, [(ir.Call, visit)])

        def walk(stmt, divergent):
            if isinstance(stmt, ir.SeqStmt):
                for s in stmt.seq:
                    walk(s, divergent)
            elif isinstance(stmt, ir.For):
                ok = self.uniform(stmt.begin) and self.uniform(stmt.end)
                if not ok:
                    self.varying.add(stmt.var.__chandle__())
                walk(stmt.body, divergent or not ok)
            elif isinstance(stmt, ir.While):
                addressed(stmt.condition)
                walk(stmt.body, divergent or not self.uniform(stmt.condition))
            elif isinstance(stmt, ir.If):
                addressed(stmt.condition)
                inner = divergent or not self.uniform(stmt.condition)
                walk(stmt.then_case, inner)
                if stmt.else_case is not None:
                    walk(stmt.else_case, inner)
            elif isinstance(stmt, ir.RegionStmt) and launch_of(stmt) is not None:
                walk(stmt.body, divergent)
            elif isinstance(stmt, ir.TensorStore) and _is_local(stmt.dest):
                addressed(stmt.value)
                same = self.uniform(stmt.value) and all(self.uniform(i) for i in stmt.indices)
                if divergent or not same:
                    bad.add(stmt.dest.__chandle__())
            elif isinstance(stmt, ir.Bind):
                addressed(stmt.value)
                if divergent or not self.uniform(stmt.value):
                    self.varying.add(stmt.var.__chandle__())
            else:
                # any other statement (calls, stores to shared/global, nested regions):
                # a local it stores into or passes by address is not uniform
                addressed(stmt)

                def store(x):
                    if _is_local(x.dest):
                        bad.add(x.dest.__chandle__())

                tvm_ffi.structural_walk(stmt, [(ir.TensorStore, store)])

        walk(body, False)
        return bad


def shared_views(body) -> dict:
    """Handle of each shared tensor viewed through ``T.reshape``/``T.view`` -> the view
    Vars over its memory (``plan_shared_memory``: a tile read only through a view is live
    until the view's last use)."""
    roots = _view_roots(body)
    views = {}

    def visit(stmt):
        root = roots.get(stmt.var.__chandle__())
        if root is not None:
            views.setdefault(root, []).append(stmt.var)

    tvm_ffi.structural_walk(body, [(ir.Bind, visit)])
    return views


def _view_roots(body) -> dict:
    """Handle of each shared view (``T.reshape``/``T.view``: a ``decl_tensor`` over another
    shared tensor's data) -> handle of the tensor whose memory it is."""
    roots = {}

    def base_of(ptr):
        while isinstance(ptr, ir.Call) and ptr.op.name == "tirx.ptr_byte_offset":
            ptr = ptr.args[0]
        if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.tensor_data_ptr" and ptr.args:
            return ptr.args[0]
        return ptr if isinstance(ptr, ir.Var) and is_shared(ptr) else None

    def visit(stmt):
        value = stmt.value
        if not (isinstance(value, ir.Call) and value.op.name == "tirx.decl_tensor"):
            return
        base = base_of(value.args[0]) if value.args else None
        if base is not None and is_shared(stmt.var):
            key = base.__chandle__()
            roots[stmt.var.__chandle__()] = roots.get(key, key)

    tvm_ffi.structural_walk(body, [(ir.Bind, visit)])
    return roots


class _Inserter(_Uniformity):
    def __init__(self, thread_var, uniform_locals=frozenset(), views=None):
        super().__init__({thread_var.__chandle__()}, uniform_locals)
        self.count = 0
        self.trusted = 0  # inside loops annotated ATTR_ASYNC_STAGES
        self.views = views or {}
        self.range_ids: dict = {}  # (lo, hi) -> named barrier id (_range_branch)
        self.used_ids: set = set()  # named barrier ids the kernel uses already
        self.partial_barriers = True  # bar.sync id, n exists (CUDA; not HIP/MSL)

    def _accesses(self, stmt):
        """``_accesses`` with views counted as the tensors whose memory they are."""
        return tuple({self.views.get(h, h) for h in part} for part in _accesses(stmt))

    def _checked(self, r, w, aw):
        """The (reads, writes, async writes) to check for conflicts."""
        if self.trusted and aw:
            return r, w - aw, set()
        return r, w, aw

    def leaf(self, stmt, state):
        if isinstance(stmt, ir.Bind) and not self.uniform(stmt.value):
            self.varying.add(stmt.var.__chandle__())
        r, w, aw = self._accesses(stmt)
        me = stmt.__chandle__()
        cr, cw, caw = self._checked(r, w, aw)
        if _conflict(cr, cw, state, me, caw):
            self.count += 1
            return [sync_threads(), stmt], _State(_tag(r, me), _tag(w, me), _tag(aw, me))
        return [stmt], _State(
            state.reads | _tag(r, me),
            state.writes | _tag(w, me),
            state.async_writes | _tag(aw, me),
        )

    def visit(self, stmt, state):
        """(list of statements, state after)."""
        if is_sync(stmt):
            return [stmt], _State()
        if isinstance(stmt, ir.SeqStmt):
            out = []
            for s in stmt.seq:
                part, state = self.visit(s, state)
                out.extend(part)
            return out, state
        if isinstance(stmt, ir.For) and self.uniform(stmt.begin) and self.uniform(stmt.end):
            return self._loop(stmt, state)
        if isinstance(stmt, ir.While) and self.uniform(stmt.condition):
            return self._loop(stmt, state)
        if isinstance(stmt, ir.If) and not self.uniform(stmt.condition) and _ranged(stmt):
            then = self._range_branch(stmt.then_case, stmt.loc)
            other = None
            if stmt.else_case is not None:
                other = self._range_branch(stmt.else_case, stmt.loc)
            return self.leaf(ir.If(stmt.condition, then, other, stmt.loc), state)
        if isinstance(stmt, ir.If) and self.uniform(stmt.condition):
            then, s1 = self.visit(stmt.then_case, state.copy())
            other, s2 = (None, state)
            if stmt.else_case is not None:
                other, s2 = self.visit(stmt.else_case, state.copy())
                other = _seq(other)
            return [ir.If(stmt.condition, _seq(then), other, stmt.loc)], s1.merge(s2)
        if isinstance(stmt, ir.RegionStmt) and launch_of(stmt) is not None:
            body, state = self.visit(stmt.body, state)
            new = ir.RegionStmt(
                stmt.op,
                stmt.args,
                stmt.body_params,
                stmt.attrs,
                _seq(body),
                stmt.result_vars,
                stmt.loc,
            )
            return [new], state
        return self.leaf(stmt, state)

    def _range_branch(self, branch, loc):
        """A branch only threads ``[lo, hi)`` run (its tile work re-planned over them:
        ``lowering/thread_range_marks.py``), synchronised on its own: its barriers become
        ``bar.sync id, hi - lo`` (``__syncthreads`` would wait for the threads the ``if``
        leaves out). Such a barrier needs whole warps: a CompileError otherwise."""
        found = range_of(branch)
        if found is None:
            return branch
        lo, hi, rest, marked_at = found
        loc = marked_at if errors.where(marked_at) else loc
        sub = _Inserter.__new__(_Inserter)
        sub.__dict__.update(self.__dict__)
        sub.varying = set(self.varying)
        out, _ = sub.visit(rest, _State())
        self.count += sub.count
        body = _seq(out)
        if not _contains_sync(body):
            return body
        if not self.partial_barriers:
            raise errors.compile_error(
                f"tile work under an `if` keeping threads {lo}..{hi - 1} needs a barrier "
                "among those threads (shared memory changes hands between them), and this "
                "target has no barrier for part of a block (CUDA's bar.sync id, n); move the "
                "tile ops out of the `if`, or split them so no thread reads what another wrote",
                loc,
            )
        if lo % 32 or (hi - lo) % 32:
            raise errors.compile_error(
                f"tile work under an `if` keeping threads {lo}..{hi - 1} needs a barrier "
                "among those threads (shared memory changes hands between them), and a "
                "barrier of part of a block needs whole warps (a multiple of 32 threads, "
                "starting at a multiple of 32); make the condition warp-aligned or move the "
                "tile ops out of the `if`",
                loc,
            )
        named = self.range_barrier(lo, hi)
        return tvm_ffi.structural_map(body, [(ir.Evaluate, lambda e: named if is_sync(e) else e)])

    def range_barrier(self, lo, hi):
        """``bar.sync id, hi - lo`` with an id of its own for ``[lo, hi)`` (from 15 down,
        skipping the ids the kernel already uses)."""
        key = (lo, hi)
        if key not in self.range_ids:
            free = [i for i in range(15, 0, -1) if i not in self.used_ids]
            taken = set(self.range_ids.values())
            free = [i for i in free if i not in taken]
            if not free:
                raise errors.compile_error(
                    "too many thread ranges need barriers of their own (16 named barriers)"
                )
            self.range_ids[key] = free[0]
        return extern_stmt(
            "tl::named_barrier_sync",
            ir.const(self.range_ids[key], "uint32"),
            ir.const(hi - lo, "uint32"),
        )

    def _loop(self, stmt, state):
        """A ``For`` or ``While`` loop with block-uniform bounds / condition: its body is
        checked with the state its own end leaves (a later iteration's hazards)."""
        trusted = ATTR_ASYNC_STAGES in (getattr(stmt, "annotations", None) or {})
        self.trusted += trusted
        saved = self.count
        r, w, aw = self._checked(*self._accesses(stmt.body))
        pre = []
        # The loop's own statements, left in ``state`` by an earlier run of the loop
        # (an enclosing loop's previous iteration), are checked against ``end`` below.
        if _conflict(r, w, state, _statements(stmt.body), aw):
            pre, state = [sync_threads()], _State()
            saved += 1
        _, end = self.visit(stmt.body, _State())
        self.count = saved
        body, after = self.visit(stmt.body, end)
        self.trusted -= trusted
        return pre + [_rebuilt_loop(stmt, _seq(body))], state.merge(after)


def _rebuilt_loop(stmt, body):
    if isinstance(stmt, ir.While):
        return ir.While(stmt.condition, body, stmt.loc)
    return ir.For(
        stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body, stmt.annotations, stmt.loc
    )


def _statements(node) -> frozenset:
    """Handles of every statement inside ``node`` (the leaves ``_Inserter`` may tag)."""
    out = set()
    tvm_ffi.structural_walk(node, [(ir.Stmt, lambda x: out.add(x.__chandle__()))])
    return frozenset(out)


def _seq(stmts):
    return stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)


def insert_sync(body, thread_var, partial_barriers=True):
    """Insert the barriers (see the module docstring); returns the new body.

    A branch whose tile work was re-planned over threads ``[lo, hi)`` (``lowering/
    thread_range_marks.py``) is synchronised on its own with ``bar.sync id, hi - lo``;
    without ``partial_barriers`` (HIP, MSL) a barrier needed there is a CompileError."""
    inserter = _Inserter(thread_var, _uniform_locals(body, thread_var), _view_roots(body))
    inserter.partial_barriers = partial_barriers
    inserter.used_ids = _named_barrier_ids(body)
    out, _ = inserter.visit(body, _State())
    return strip_range_marks(_seq(out))


def _ranged(stmt) -> bool:
    """Whether a branch of the ``if`` holds tile work re-planned over its threads."""
    branches = [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    return any(range_of(b) is not None for b in branches)


def _contains_sync(stmt) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, lambda e: found.append(is_sync(e)))])
    return any(found)


def _named_barrier_ids(body) -> set:
    ids = set()

    def visit(e):
        if extern_name(e) in ("tl::named_barrier_sync", "tl::named_barrier_arrive"):
            arg = e.value.args[1]
            if isinstance(arg, ir.IntImm):
                ids.add(int(arg.value))

    tvm_ffi.structural_walk(body, [(ir.Evaluate, visit)])
    return ids


def strip_range_marks(body):
    """``body`` without range markers left where no branch analysis reached them."""

    def seq(x):
        kept = [s for s in x.seq if extern_name(s) != RANGE_MARK]
        if len(kept) == len(x.seq):
            return x
        return ir.SeqStmt(kept) if len(kept) != 1 else kept[0]

    return tvm_ffi.structural_map(body, [(ir.SeqStmt, seq)])

"""WgmmaWaitSinking (CUDA sm_90a): a wgmma gemm's completion wait moves to where it is needed.

Assumes: thread-level code after ``insert_sync`` (fragments are register arrays, barriers
are explicit). A ``T.gemm`` lowered to wgmma (``ops/gemm/wgmma_cuda.py``) ends with::

    wgmma.commit_group; wgmma.wait_group 0; wgmma_fence_operand(C) [; wgmma_fence_operand(A)]

Guarantees: that wait block (the wait and its operand fences) moves down the statement
sequence it belongs to (nested ``SeqStmt`` flattened) past every statement that

* names none of the gemm's registers (C, a register A) and writes none of its shared operand
  tiles (no store, no address taken outside a wgmma descriptor: other gemms may read
  them), nor
  the registers of groups that the wait also completes (older groups pending in the same
  sequence, and accumulators kept in flight across iterations by ``wgmma.wait_group 1``);
* does not synchronise (``__syncthreads``, named barriers, mbarrier arrives, fences other
  than ``fence.proxy.async``, ``setmaxnreg``, cp.async/TMA copies) and waits for no other
  wgmma group (an mbarrier *wait*, for a TMA load to land, releases nothing: passed);
* holds no wgmma instruction in a nested loop or branch.

A following gemm that only accumulates into this gemm's accumulator with the same wgmma
instructions (MLA's ``Q @ KV^T`` then ``Q_pe @ K_pe^T`` into one score tile) is passed as
well: PTX orders accumulator accesses across same-shape ``wgmma.mma_async`` by itself, so the
two are issued back to back, and a wait block that lands right before another
``wait_group 0`` fencing the same registers is dropped (that wait completes both groups).

Each ``wgmma.commit_group`` passed on the way (another gemm issued while this one runs)
raises the wait's count by one (``wgmma.wait_group n`` leaves the ``n`` newest groups in
flight, so this gemm's group is complete). The block stops before the first statement that
fails the test, or at the end of its sequence (a loop body's end: the loop boundary). So
the softmax of one tile, the rescale of ``acc_o`` or the next gemm's issue overlap a gemm in
flight. Pass config ``tl.wgmma_wait_sinking = False`` keeps every wait where the gemm put it.

With ``paired_barriers`` (pass config ``tl.wgmma_wait_paired_barriers``, off by default)
any wait block also passes a top-level ``tl::named_barrier_sync(id, n)`` followed later in
the same sequence by the same call with no statement between the two writing the gemm's
shared operand tiles and no other barrier (nested or not) there: the threads that could
overwrite the tiles after the first barrier do so only after the second one, which this
thread reaches after its wait (at the latest right before it, where the same test applies
again). The consumer code around the barrier is the same for every thread that takes part
in it (the warp-specialized consumer branch), so the statements seen here are those every
participant runs. Unlike the TMA-only rule it may carry the wait past another gemm's issue
(MLA with ``tl.wgmma_overlap``: ``P @ V`` of k-1 is issued after the ``S_shared`` barrier,
while the scores of k are in flight).

Before the waits sink, each gemm's whole issue (operand fences, ``wgmma_arrive``, the
instructions, the commit and its wait block) first moves *up* its sequence past statements
that are independent of it (:func:`_hoist_issues`, pass config ``tl.wgmma_issue_hoisting``):
statements that name none of its registers (C, a register A), write nothing it names (its
shared tiles, locals in its addresses), bind nothing, and neither synchronise nor touch
another wgmma, mbarrier, fence or async copy. A ``fence.proxy.async`` passed on the way
stays (later async reads may need it) and the gemm takes a copy along (``drop_proxy_fences``
later removes whichever orders nothing). So a gemm the program writes after elementwise
work it does not depend on (FlashAttention backward's ``dP^T = V dO^T`` after ``P^T =
exp2(S^T - lse)``) is issued right after the previous gemm's wait block, and that wait then
sinks below it: both gemms in flight, the elementwise work overlapping the second.
"""

from __future__ import annotations

import re

import tvm_ffi
from tvm_tirx import ir, tirx

from ....lowering.stmt import StmtMutator, flatten_seq
from ....lowering.thread_utils import extern_calls, extern_name, tensor_handles
from .insert_sync import _view_roots

_WAIT = re.compile(r"tl::wgmma_wait<(\d+)>")
#: Calls that synchronise threads or memory: a wait block never passes them.
_SYNC_PREFIXES = (
    "__syncthreads",
    "tl::named_barrier",
    "tl::mbarrier_arrive",  # hands a stage back: its readers must be complete
    "tl::mbarrier_init",
    "tl::mbarrier_expect",
    "tl::set_max_nreg",
    "tl::tma_",
    "tl::cp_async",
    "tl::wgmma_wait",
)


def _names(node) -> list:
    """Names of every extern called inside ``node``."""
    return [extern_name(c) for c in extern_calls(node)]


def _fenced_local(stmt):
    """The register array handle a ``wgmma_fence_operand<n>(&x[0])`` statement names."""
    name = extern_name(stmt)
    if name is None or not name.startswith("tl::wgmma_fence_operand<"):
        return None
    handles = tensor_handles(stmt.value)
    return next(iter(handles)) if len(handles) == 1 else None


def _wait_count(name):
    m = _WAIT.fullmatch(name or "")
    return None if m is None else int(m.group(1))


class _Group:
    """One committed wgmma group of a flattened sequence and the handles it protects."""

    def __init__(self, regs, tiles, ops=(), accs=()):
        self.regs = set(regs)
        self.tiles = set(tiles)
        self.ops = set(ops)  # wgmma instruction names (shape, operand form, types)
        self.accs = set(accs)  # accumulator register handles


def _issue_operands(stmts, commit_at):
    """(register handles, shared tile handles, instruction names, accumulator handles) of
    the group committed at ``commit_at``: the statements back to its ``wgmma_arrive``."""
    regs, tiles, ops, accs = set(), set(), set(), set()
    i = commit_at - 1
    while i >= 0:
        name = extern_name(stmts[i])
        if name is None:
            break
        local = _fenced_local(stmts[i])
        if local is not None:
            regs.add(local)
        elif name.startswith("tl::wgmma_m64n"):
            call = stmts[i].value
            # args: [name, A (descriptor or &A_regs[i]), B descriptor, &C[i], scale]
            for arg in call.args[1:3]:
                if "tl::wgmma_desc" in " ".join(_names(arg)):
                    tiles |= tensor_handles(arg)
                else:
                    regs |= tensor_handles(arg)
            regs |= tensor_handles(call.args[3])
            accs |= tensor_handles(call.args[3])
            ops.add(name)
        elif name != "tl::wgmma_arrive" and not name.startswith("tl::fence"):
            break
        if name == "tl::wgmma_arrive":
            break
        i -= 1
    return regs, tiles, ops, accs


def _chained_issue(stmts, start, mine) -> int:
    """End (exclusive, after its ``wgmma_commit``) of the gemm issue starting at
    ``stmts[start]`` when that gemm only accumulates into ``mine``'s accumulators with the
    same instruction shape (the SS or RS form of it; a register A is fenced with the issue)
    and reads no other register ``mine`` writes; else ``start``.

    PTX orders accumulator accesses across ``wgmma.mma_async`` instructions of the same
    shape by itself (``wgmma.fence`` is needed only between other register accesses and a
    wgmma): MLA's ``Q @ KV^T`` then ``Q_pe @ K_pe^T`` into one score tile may be issued
    back to back, one wait after both."""
    if not mine.ops or not mine.accs:
        return start
    j = start  # the issue: operand fences, wgmma_arrive, wgmma instructions, then the commit
    while j < len(stmts) and extern_name(stmts[j]) != "tl::wgmma_commit":
        name = extern_name(stmts[j]) or ""
        if name != "tl::wgmma_arrive" and not name.startswith(_ISSUE_PREFIXES):
            return start
        j += 1
    if j == len(stmts):
        return start
    regs, _tiles, ops, accs = _issue_operands(stmts, j)
    reg_a = regs - accs
    fenced = {_fenced_local(s) for s in stmts[start:j]} - {None} - reg_a
    shapes = {_instr_shape(op) for op in ops}
    if not ops or shapes - {_instr_shape(op) for op in mine.ops} or not accs:
        return start
    if (accs | fenced) - mine.accs:
        return start
    if reg_a & mine.regs:  # a register A that mine writes
        return start
    return j + 1


_SHAPE = re.compile(r"tl::wgmma_(m64n\d+k16)_(?:ss|rs)<([^,>]+)")


def _instr_shape(name: str) -> str:
    """What PTX's same-shape ordering of accumulator accesses compares: a 16-bit wgmma's
    shape and input type (its SS and RS forms alike: ``m64n32k16/false`` for both
    ``wgmma_m64n32k16_ss<false, 0, 0>`` and ``wgmma_m64n32k16_rs<false, 0>``); other
    instructions by their whole name."""
    found = _SHAPE.match(name)
    return f"{found.group(1)}/{found.group(2).strip()}" if found else name


#: Statements of a gemm's issue besides ``wgmma_arrive`` (:func:`_chained_issue`).
_ISSUE_PREFIXES = ("tl::wgmma_fence_operand<", "tl::wgmma_m64n")


def _wait_block(stmts, at):
    """(end, fenced register handles) when ``stmts[at]`` is ``wgmma_wait<0>`` right after a
    ``wgmma_commit``, followed by its operand fences; else None.

    Only fences of the committed group's registers belong to the block: a next gemm's
    operand fences (``wgmma_fence_operand(C')`` before its ``wgmma_arrive``) may follow
    right after them, and taking those along would stop the wait at that gemm's first
    instruction (it names C'), so the two gemms could never be in flight together."""
    if _wait_count(extern_name(stmts[at])) != 0 or at == 0:
        return None
    if extern_name(stmts[at - 1]) != "tl::wgmma_commit":
        return None
    group_regs = _issue_operands(stmts, at - 1)[0]
    end, regs = at + 1, set()
    while end < len(stmts):
        local = _fenced_local(stmts[end])
        if local is None or (group_regs and local not in group_regs):
            break
        regs.add(local)
        end += 1
    return (end, regs) if regs else None


def _written_tiles(stmt) -> set:
    """Handles of the tensors ``stmt`` may write: stored to, or whose address it takes
    anywhere but in a wgmma descriptor (which only reads)."""
    in_desc = set()

    def desc(call):
        if _is_desc(call):
            tvm_ffi.structural_walk(call, [(ir.Call, lambda c: in_desc.add(c.__chandle__()))])

    tvm_ffi.structural_walk(stmt, [(ir.Call, desc)])
    found = set()

    def addr(call):
        if (
            getattr(call.op, "name", "").endswith("address_of")
            and call.__chandle__() not in in_desc
        ):
            found.update(tensor_handles(call))

    def store(x):
        if isinstance(x.dest, ir.Var):
            found.add(x.dest.__chandle__())

    tvm_ffi.structural_walk(stmt, [(ir.Call, addr), (ir.TensorStore, store)])
    return found


def _is_desc(call) -> bool:
    return (extern_name(call) or "").startswith("tl::wgmma_desc")


def _generic_written(body) -> set:
    """Handles of the tensors ``body`` may write other than by a TMA load: stored to, or
    whose address a call other than a wgmma descriptor or a ``tl::tma_load`` takes."""
    skip = set()

    def skipped(call):
        if (extern_name(call) or "").startswith(("tl::tma_load", "tl::wgmma_desc")):
            tvm_ffi.structural_walk(call, [(ir.Call, lambda c: skip.add(c.__chandle__()))])

    tvm_ffi.structural_walk(body, [(ir.Call, skipped)])
    found = set()

    def addr(call):
        if getattr(call.op, "name", "").endswith("address_of") and call.__chandle__() not in skip:
            found.update(tensor_handles(call))

    def store(x):
        if isinstance(x.dest, ir.Var):
            found.add(x.dest.__chandle__())

    tvm_ffi.structural_walk(body, [(ir.Call, addr), (ir.TensorStore, store)])
    return found


_BARRIERS = ("tl::named_barrier_sync", "__syncthreads")


def _passable(stmt, protected, tiles, barrier_ok=False) -> bool:
    """Whether a wait block may move below ``stmt``: ``protected`` register handles must
    not be named, ``tiles`` (the gemms' shared operands) not written. ``barrier_ok``: the
    tiles are written by TMA loads only (their stage comes back through an mbarrier arrive,
    which no wait passes), so a thread barrier, which orders only generic accesses, may be
    passed."""
    if barrier_ok and extern_name(stmt) in _BARRIERS:
        return True
    if tensor_handles(stmt) & protected or _written_tiles(stmt) & tiles:
        return False
    # a proxy fence orders this thread's earlier shared writes before later async reads:
    # nothing the gemm in flight depends on (other fences, e.g. of mbarrier setup, stop)
    names = [n for n in _names(stmt) if not n.startswith("tl::fence_proxy_async")]
    if any(n.startswith("tl::fence") for n in names):
        return False
    if any(n.startswith(_SYNC_PREFIXES) for n in names):
        return False
    top = extern_name(stmt)
    if top is not None and top.startswith("tl::wgmma_"):
        return True  # another gemm's issue (fence, arrive, mma, commit) at this level
    return not any(n.startswith("tl::wgmma_") for n in names)


def _barrier_passable(stmts, at, tiles) -> bool:
    """Whether a wait block may pass the named barrier ``stmts[at]`` by the paired-barrier
    rule (``paired_barriers``, module doc): the same barrier call follows in ``stmts`` and
    nothing between the two writes ``tiles`` or synchronises inside a nested statement."""
    barrier = stmts[at]
    if extern_name(barrier) != "tl::named_barrier_sync":
        return False
    key = str(barrier)
    for stmt in stmts[at + 1 :]:
        if extern_name(stmt) == "tl::named_barrier_sync" and str(stmt) == key:
            return True
        if _written_tiles(stmt) & tiles:
            return False
        top = extern_name(stmt)
        names = _names(stmt)
        nested = names if top is None else [n for n in names if n != top]
        if any(n.startswith(("__syncthreads", "tl::named_barrier")) for n in nested + [top or ""]):
            return False  # another barrier (or this one in a branch): not the same pairing
    return False


def _pending_before(stmts, at) -> list:
    """The groups committed in ``stmts[:at]`` that no wait there completed, oldest first."""
    pending = []
    for i in range(at):
        name = extern_name(stmts[i])
        if name == "tl::wgmma_commit":
            pending.append(_Group(*_issue_operands(stmts, i)))
            continue
        count = _wait_count(name)
        if count is not None:
            pending = pending[len(pending) - count :] if count else []
    return pending


def _sink_seq(stmts, in_flight, generic=None, paired=False) -> list:
    """The flattened sequence ``stmts`` with its wait blocks moved down (module doc).
    ``generic``: handles written other than by TMA loads (:func:`_generic_written`) when a
    wait may pass thread barriers, else None; ``paired``: any wait may pass a named barrier
    by the paired-barrier rule (:func:`_barrier_passable`).

    Blocks are moved last first: a later gemm's wait goes as far as its own uses allow
    before an earlier gemm's wait (which stops at any other wait) follows it down, so
    ``QK; PV; softmax(QK)`` waits for QK alone before the softmax and for PV later."""
    stmts = list(stmts)
    starts = [i for i in range(len(stmts)) if _wait_block(stmts, i) is not None]
    for at in reversed(starts):
        end, regs = _wait_block(stmts, at)
        pending = _pending_before(stmts, at)
        known = bool(pending)  # the group's operands are known (else: no barrier passing)
        mine = pending.pop() if pending else _Group(regs, ())
        protected, tiles = set(regs) | mine.regs | in_flight, set(mine.tiles)
        for older in pending:  # the wait completes them too
            protected |= older.regs
            tiles |= older.tiles
        barrier_ok = (
            generic is not None and known and not in_flight and bool(tiles) and not tiles & generic
        )
        j, passed, crossed = end, 0, False
        while j < len(stmts):
            chained = _chained_issue(stmts, j, mine) if not pending else j
            if chained > j:  # a same-shape gemm into the same accumulator: issued unwaited
                passed += 1
                j = chained
                continue
            by_pair = False
            if not _passable(stmts[j], protected, tiles, barrier_ok):
                if not (paired and known and not in_flight and _barrier_passable(stmts, j, tiles)):
                    break
                by_pair = True  # MLA: P @ V of k-1 is issued after the S_shared barrier
            # past a barrier, not past another gemm's issue as well: more accumulators in
            # flight at once made ptxas serialize every wgmma (C7512) at head dim 256
            crossed = crossed or (extern_name(stmts[j]) in _BARRIERS and not by_pair)
            if crossed and (extern_name(stmts[j]) or "").startswith("tl::wgmma_"):
                break
            if extern_name(stmts[j]) == "tl::wgmma_commit":
                passed += 1
            j += 1
        if j == end:
            continue
        wait_stmts = stmts[at:end]
        if j < len(stmts) and _wait_count(extern_name(stmts[j])) == 0:
            if regs <= _fences_after(stmts, j):
                stmts[at:j] = stmts[end:j]  # the next wait_group 0 completes this group too
                continue
        count = _wait_count(extern_name(stmts[j])) if j < len(stmts) else None
        if count is not None and count <= passed:  # that wait completes this group too
            k = j + 1
            while k < len(stmts) and _fenced_local(stmts[k]) is not None:
                k += 1
            stmts[at:k] = [*stmts[end:k], *stmts[at + 1 : end]]
            continue
        if passed:
            first = ir.Evaluate(tirx.call_extern(f"tl::wgmma_wait<{passed}>", ty="void"))
            wait_stmts = [first, *wait_stmts[1:]]
        stmts[at:j] = [*stmts[end:j], *wait_stmts]
    return stmts


def _fences_after(stmts, at) -> set:
    """Register handles fenced right after the wait ``stmts[at]``."""
    out, i = set(), at + 1
    while i < len(stmts) and _fenced_local(stmts[i]) is not None:
        out.add(_fenced_local(stmts[i]))
        i += 1
    return out


#: Impure externs a hoisted gemm issue may move above (vector copies, alignment tests, atomics, warp
#: shuffles, ldmatrix): every other ``call_extern`` stops it (barriers, ping-pong turns,
#: mbarriers, fences, TMA, cp.async, other wgmma statements, anything unknown).
_HOIST_PASSES = (
    "tl::copy_vec",
    "tl::zero_vec",
    "tl::is_aligned",
    "tl::Atomic",
    "__shfl",
    "tl::ptx_ldmatrix",
)
#: Substrings of other (intrinsic) call ops that stop it.
_HOIST_STOPS = ("sync", "barrier", "fence", "tma", "async", "wgmma", "wait", "commit", "arrive")


def _blocks_hoisting(call) -> bool:
    """Whether a gemm issue may not move above a statement containing ``call``."""
    name = extern_name(call)
    if name is not None:
        return not name.startswith(_HOIST_PASSES)
    op = str(getattr(call.op, "name", "")).lower()
    return any(k in op for k in _HOIST_STOPS)


def _issue_block(stmts, commit_at):
    """(start, end) of the gemm issue committed at ``stmts[commit_at]`` with its wait block
    (operand fences, ``wgmma_arrive``, instructions, commit, ``wait_group 0``, C/A fences),
    or None when the issue is not in that form (e.g. a barrier between arrive and the
    instructions, or no wait right after the commit)."""
    block = _wait_block(stmts, commit_at + 1) if commit_at + 1 < len(stmts) else None
    if block is None:
        return None
    regs = _issue_operands(stmts, commit_at)[0]
    start, seen_arrive = commit_at, False
    while start > 0:
        name = extern_name(stmts[start - 1]) or ""
        if seen_arrive and _fenced_local(stmts[start - 1]) not in regs:
            break  # not this gemm's operand fence (e.g. the previous gemm's wait block)
        if name == "tl::wgmma_arrive":
            seen_arrive = True
        elif not name.startswith(_ISSUE_PREFIXES):
            break
        start -= 1
    return (start, block[0]) if seen_arrive else None


def _hoistable(stmt, regs, handles) -> bool:
    """Whether a gemm issue naming ``handles`` (``regs``: its registers) may move above
    ``stmt`` (module doc)."""
    if isinstance(stmt, ir.Bind):  # binds nested in a loop or branch stay local to it
        return False
    calls = []
    tvm_ffi.structural_walk(stmt, [(ir.Call, calls.append)])
    if any(_blocks_hoisting(c) for c in calls):
        return False
    return not (tensor_handles(stmt) & regs or _written_tiles(stmt) & handles)


def _hoist_issues(stmts) -> list:
    """``stmts`` with each gemm issue (and its wait block) moved up past the statements
    before it that it does not depend on (module doc), first gemm first."""
    stmts = list(stmts)
    i = 0
    while i < len(stmts):
        if extern_name(stmts[i]) != "tl::wgmma_commit":
            i += 1
            continue
        found = _issue_block(stmts, i)
        if found is None:
            i += 1
            continue
        start, end = found
        block = stmts[start:end]
        regs, _tiles, _ops, _accs = _issue_operands(stmts, i)
        regs |= {_fenced_local(s) for s in block} - {None}
        handles = set().union(*(tensor_handles(s) for s in block))
        to = start
        while to > 0 and (
            _is_proxy_fence(stmts[to - 1]) or _hoistable(stmts[to - 1], regs, handles)
        ):
            to -= 1
        while to < start and _is_proxy_fence(stmts[to]):
            to += 1  # no use passing a fence alone
        if to < start:
            # a passed fence stays (later async reads may need it); the gemm takes a copy
            fences = [x for x in stmts[to:start] if _is_proxy_fence(x)][:1]
            stmts[to:end] = [*fences, *block, *stmts[to:start]]
            end += len(fences)
        i = end
    return stmts


def _is_proxy_fence(stmt) -> bool:
    return (extern_name(stmt) or "").startswith("tl::fence_proxy_async")


class _Sinker(StmtMutator):
    def __init__(self, in_flight, hoist_issues=True, generic=None, paired=False):
        super().__init__("cuda")
        self.in_flight = in_flight
        self.hoist_issues = hoist_issues
        self.generic = generic
        self.paired = paired

    def visit_SeqStmt(self, stmt, ctx):
        flat = self.visit_flat(stmt, ctx)
        if not flat:
            return None
        if any(extern_name(s) == "tl::wgmma_commit" for s in flat):
            if self.hoist_issues:
                flat = _hoist_issues(flat)
            flat = _sink_seq(flat, self.in_flight, self.generic, self.paired)
        return ir.SeqStmt(flat) if len(flat) > 1 else flat[0]


def _in_flight_registers(body) -> set:
    """Register handles fenced after a ``wgmma_wait<n>`` with ``n > 0`` (accumulators that
    the GEMM pipeline keeps in flight across iterations)."""
    stmts = []

    def visit(s):
        if isinstance(s, ir.SeqStmt):
            stmts.append(flatten_seq(s))

    tvm_ffi.structural_walk(body, [(ir.SeqStmt, visit)])
    regs = set()
    for flat in stmts:
        for i, s in enumerate(flat):
            if (_wait_count(extern_name(s)) or 0) > 0:
                j = i + 1
                while j < len(flat) and _fenced_local(flat[j]) is not None:
                    regs.add(_fenced_local(flat[j]))
                    j += 1
    return regs


def sink_wgmma_waits(body, hoist_issues=True, past_barriers=True, paired_barriers=False):
    """``body`` with each wgmma gemm's ``wait_group 0`` moved down to its first needed
    point, and (``hoist_issues``) each gemm's issue first moved up past independent
    statements; ``past_barriers``: the wait of a gemm whose shared operands only TMA
    loads write may pass thread barriers; ``paired_barriers``: any wait may pass a named
    barrier that comes again with no write of its shared operands between (module doc)."""
    if "tl::wgmma_commit" not in _names(body):
        return body
    # shared views (T.view / T.reshape) alias tiles under other Vars: neither a hoisted issue
    # nor a wait past a barrier could tell a write through a view, so both are off then
    views = bool(_view_roots(body))
    generic = _generic_written(body) if past_barriers and not views else None
    paired = paired_barriers and not views
    return _Sinker(_in_flight_registers(body), hoist_issues and not views, generic, paired)(body)


__all__ = ["sink_wgmma_waits"]

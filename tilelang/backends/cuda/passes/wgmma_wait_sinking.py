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
"""

from __future__ import annotations

import re

import tvm_ffi
from tvm_tirx import ir, tirx

from ....lowering.stmt import StmtMutator, flatten_seq
from ....lowering.thread_utils import extern_calls, extern_name, tensor_handles

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
    same instructions (shape and operand form) and reads no other register ``mine`` writes;
    else ``start``.

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
    fenced = {_fenced_local(s) for s in stmts[start:j]} - {None}
    if not ops or ops - mine.ops or not accs or (accs | fenced) - mine.accs:
        return start
    if (regs - accs) & mine.regs:  # a register A that mine writes
        return start
    return j + 1


#: Statements of a gemm's issue besides ``wgmma_arrive`` (:func:`_chained_issue`).
_ISSUE_PREFIXES = ("tl::wgmma_fence_operand<", "tl::wgmma_m64n")


def _wait_block(stmts, at):
    """(end, fenced register handles) when ``stmts[at]`` is ``wgmma_wait<0>`` right after a
    ``wgmma_commit``, followed by its operand fences; else None."""
    if _wait_count(extern_name(stmts[at])) != 0 or at == 0:
        return None
    if extern_name(stmts[at - 1]) != "tl::wgmma_commit":
        return None
    end, regs = at + 1, set()
    while end < len(stmts):
        local = _fenced_local(stmts[end])
        if local is None:
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


def _passable(stmt, protected, tiles) -> bool:
    """Whether a wait block may move below ``stmt``: ``protected`` register handles must
    not be named, ``tiles`` (the gemms' shared operands) not written."""
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


def _sink_seq(stmts, in_flight) -> list:
    """The flattened sequence ``stmts`` with its wait blocks moved down (module doc).

    Blocks are moved last first: a later gemm's wait goes as far as its own uses allow
    before an earlier gemm's wait (which stops at any other wait) follows it down, so
    ``QK; PV; softmax(QK)`` waits for QK alone before the softmax and for PV later."""
    stmts = list(stmts)
    starts = [i for i in range(len(stmts)) if _wait_block(stmts, i) is not None]
    for at in reversed(starts):
        end, regs = _wait_block(stmts, at)
        pending = _pending_before(stmts, at)
        mine = pending.pop() if pending else _Group(regs, ())
        protected, tiles = set(regs) | mine.regs | in_flight, set(mine.tiles)
        for older in pending:  # the wait completes them too
            protected |= older.regs
            tiles |= older.tiles
        j, passed = end, 0
        while j < len(stmts):
            chained = _chained_issue(stmts, j, mine) if not pending else j
            if chained > j:  # a same-shape gemm into the same accumulator: issued unwaited
                passed += 1
                j = chained
                continue
            if not _passable(stmts[j], protected, tiles):
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


class _Sinker(StmtMutator):
    def __init__(self, in_flight):
        super().__init__("cuda")
        self.in_flight = in_flight

    def visit_SeqStmt(self, stmt, ctx):
        flat = []
        for s in flatten_seq(stmt):
            r = self.visit(s, ctx)
            if r is not None:
                flat += flatten_seq(r)
        if not flat:
            return None
        if any(extern_name(s) == "tl::wgmma_commit" for s in flat):
            flat = _sink_seq(flat, self.in_flight)
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


def sink_wgmma_waits(body):
    """``body`` with each wgmma gemm's ``wait_group 0`` moved down to its first needed
    point (module doc)."""
    if "tl::wgmma_commit" not in _names(body):
        return body
    return _Sinker(_in_flight_registers(body))(body)


__all__ = ["sink_wgmma_waits"]

"""The statement walker shared by the CPU stages that rewrite warp collectives.

``warp_ops.py`` (shuffles, votes, warp reductions) and ``warp_mma.py`` (``ldmatrix`` /
``mma.sync`` helpers) both turn a collective of one thread launch into "every thread
stages its operands; once, compute all lanes; barrier; every thread reads its result".
Both walk a block body the same way: find the thread launch chains (:func:`rewrite_launches`),
then (:class:`WarpBlock`) descend through sequences, loops, conditions and non-launch regions,
tracking which variables depend on the thread index (``dependent``), whether the statement
is under a thread-dependent condition or loop bound (``guarded``) and whether it is inside
``T.Parallel`` (``parallel``), and hand each statement holding a collective to the stage.

The one difference is explicit: ``hoist_controls``. Exchanges are expressions, so a loop
bound or an ``if`` condition may call one; with ``hoist_controls`` the walker asks the stage
to hoist them before the statement (:meth:`WarpBlock.hoist`) and rejects them in a ``while``
condition (evaluated again every iteration). ldmatrix / mma helpers are statements of their
own: without ``hoist_controls`` control expressions are left as they are.
"""

from __future__ import annotations

from tvm_tirx import ir

from ...lowering.stmt import launch_chain, launch_of, uses_any


def rewrite_launches(body, make_block):
    """``body`` with the inner statements of each ``threadIdx`` launch chain rewritten by
    ``make_block(tvars).run(inner)`` (``tvars``: the chain's (tag, extent, var) triples)."""
    launch = launch_of(body)
    if launch is not None and launch[0].startswith("threadIdx"):
        regions, tvars, inner = launch_chain(body, "threadIdx")
        out = make_block(tvars).run(inner)
        for r in reversed(regions):
            out = _region(r, out)
        return out
    if launch is not None:
        return _region(body, rewrite_launches(body.body, make_block))
    if isinstance(body, ir.SeqStmt):
        return ir.SeqStmt([rewrite_launches(s, make_block) for s in body.seq])
    return body


def _region(r, inner):
    return ir.RegionStmt(r.op, r.args, r.body_params, r.attrs, inner, r.result_vars, r.loc)


class WarpBlock:
    """The collectives of one block body with thread launches ``tvars`` (tag, extent, var).

    ``total``: the constant thread count (None when dynamic); ``flat``: the linear thread
    index ``tx + ty * Dx + tz * Dx * Dy``; ``allocs``: block-shared arrays the stage added,
    put before the body. A stage subclasses it and defines :meth:`involves` (whether a node
    holds a collective), :meth:`leaf` (rewrite a statement holding one) and, with
    ``hoist_controls``, :meth:`hoist` and :meth:`while_condition_error`.
    """

    def __init__(self, tvars, *, hoist_controls: bool):
        order = sorted(tvars, key=lambda t: t[0])  # threadIdx.x, .y, .z
        self.tvars = [v for _, _, v in tvars]
        self.hoist_controls = hoist_controls
        self.total, self.flat, stride = 1, None, 1
        for _tag, extent, var in order:
            if not isinstance(extent, ir.IntImm):
                self.total = None
                break
            self.flat = var if self.flat is None else self.flat + var * stride
            stride *= extent.value
            self.total *= extent.value
        self.allocs = []

    def run(self, inner):
        """The rewritten block body, with the stage's block-shared arrays allocated first."""
        out = self.stmt(inner, list(self.tvars), parallel=False, guarded=False)
        return ir.SeqStmt([*self.allocs, out]) if self.allocs else out

    @staticmethod
    def barrier():
        """A block barrier statement (``tl.sync_threads``: splits the thread loops)."""
        from ...ops.sync.op import SYNC

        return ir.Evaluate(SYNC.make())

    # ------------------------------------------------------------------ stage hooks
    def involves(self, node) -> bool:
        """Whether ``node`` holds a collective this stage rewrites."""
        raise NotImplementedError

    def leaf(self, s, dependent, parallel, guarded):
        """``s`` (not a sequence, loop, condition or region) rewritten."""
        raise NotImplementedError

    def hoist(self, exprs, loc, parallel, guarded):
        """(statements to run first, ``exprs`` without collectives); ``hoist_controls`` only."""
        raise NotImplementedError

    def while_condition_error(self, s):
        """The exception for a collective in the condition of ``while`` statement ``s``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the walk
    def _controls(self, exprs, loc, parallel, guarded):
        if not self.hoist_controls:
            return [], list(exprs)
        return self.hoist(exprs, loc, parallel, guarded)

    def stmt(self, s, dependent, parallel, guarded):
        """``s`` rewritten; ``dependent`` (the thread-dependent variables) grows in place."""
        if not self.involves(s):
            if isinstance(s, ir.Bind) and uses_any(s.value, dependent):
                dependent.append(s.var)
            return s
        if isinstance(s, ir.SeqStmt):
            out = []
            for child in s.seq:
                r = self.stmt(child, dependent, parallel, guarded)
                out.extend(r.seq if isinstance(r, ir.SeqStmt) else [r])
            return ir.SeqStmt(out)
        if isinstance(s, ir.For):
            pre, (begin, end) = self._controls([s.begin, s.end], s.loc, parallel, guarded)
            dep = guarded or uses_any([begin, end], dependent)
            par = parallel or bool(s.annotations and "tl.parallel" in s.annotations)
            body = self.stmt(s.body, dependent, par, dep)
            loop = ir.For(s.var, begin, end, s.step, s.kind, body, s.annotations, s.loc)
            return ir.SeqStmt([*pre, loop]) if pre else loop
        if isinstance(s, ir.If):
            pre, (cond,) = self._controls([s.condition], s.loc, parallel, guarded)
            dep = guarded or uses_any(cond, dependent)
            then = self.stmt(s.then_case, dependent, parallel, dep)
            other = (
                None if s.else_case is None else self.stmt(s.else_case, dependent, parallel, dep)
            )
            node = ir.If(cond, then, other, s.loc)
            return ir.SeqStmt([*pre, node]) if pre else node
        if isinstance(s, ir.While):
            if self.hoist_controls and self.involves(s.condition):
                raise self.while_condition_error(s)
            dep = guarded or uses_any(s.condition, dependent)
            return ir.While(s.condition, self.stmt(s.body, dependent, parallel, dep), s.loc)
        if isinstance(s, ir.RegionStmt) and launch_of(s) is None:
            body = self.stmt(s.body, dependent, parallel, guarded)
            return _region(s, body)
        return self.leaf(s, dependent, parallel, guarded)

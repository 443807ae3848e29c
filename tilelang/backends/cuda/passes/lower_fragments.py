"""LowerFragments (CUDA): fragment tensors become per-thread register arrays.

Assumes: every ``local.fragment`` Var has a Fragment in ``layouts`` and every logical
access ``F[x]`` left in the body runs in a thread that owns ``x`` (guaranteed by
layout inference + ``lower_parallel`` + the op lowerings).

Guarantees: each fragment allocation is replaced by a ``local`` array of
``local_size`` elements (the Var ``ctx.local_of(F)`` that op lowerings already used),
and every ``F[x]`` by ``F_local[F.index(x)]`` simplified under the enclosing loop and
thread ranges. No ``local.fragment`` tensor remains. A ``T.reshape`` of a fragment (its
layout is the base's reshaped: layout inference) uses the base's register array
(:func:`alias_fragment_views`, before the op lowerings ask ``ctx.local_of``) and its
``decl_tensor`` binding goes.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ....lowering.fragments import fragment_view
from ....lowering.stmt import StmtMutator, alloc_of
from ....lowering.thread_utils import alloc, is_fragment


class LowerFragments(StmtMutator):
    def __init__(self, layouts, locals_):
        super().__init__("cuda")
        self.layouts, self.locals = layouts, locals_

    def _find(self, table, var):
        for k, v in table.items():
            if k.same_as(var):
                return v
        return None

    def _rewrite(self, node, ctx):
        def index(var, idx):
            frag = self._find(self.layouts, var)
            return [ctx.simplify(e) for e in frag.map_forward_index(list(idx))]

        def load(x):
            if not is_fragment(x.source):
                return x
            return ir.TensorLoad(self._find(self.locals, x.source), index(x.source, x.indices))

        def store(x):
            if not is_fragment(x.dest):
                return x
            return ir.TensorStore(
                self._find(self.locals, x.dest), index(x.dest, x.indices), x.value, loc=x.loc
            )

        return tvm_ffi.structural_map(node, [(ir.TensorLoad, load), (ir.TensorStore, store)])

    def visit_Bind(self, stmt, ctx):
        if fragment_view(stmt) is not None:  # its accesses use the base's registers
            return None
        var = alloc_of(stmt)
        if var is not None and is_fragment(var):
            return alloc(self._find(self.locals, var))
        return self._rewrite(stmt, ctx)

    def visit_TensorStore(self, stmt, ctx):
        return self._rewrite(stmt, ctx)

    def visit_Evaluate(self, stmt, ctx):
        return self._rewrite(stmt, ctx)

    def visit_If(self, stmt, ctx):
        out = super().visit_If(stmt, ctx)
        return ir.If(self._rewrite(out.condition, ctx), out.then_case, out.else_case, out.loc)

    def visit_For(self, stmt, ctx):
        out = super().visit_For(stmt, ctx)
        return ir.For(
            out.var,
            out.begin,
            self._rewrite(out.end, ctx),
            out.step,
            out.kind,
            out.body,
            out.annotations,
            out.loc,
        )


def lower_fragments(body, layouts, locals_, ctx):
    return LowerFragments(layouts, locals_)(body, ctx)


def alias_fragment_views(body, ctx) -> None:
    """Point ``ctx.local_of(view)`` of every ``T.reshape``/``T.view`` of a fragment at its
    base fragment's register array (same registers: the view's layout is the base's
    reshaped)."""
    views = []
    tvm_ffi.structural_walk(body, [(ir.Bind, lambda b: views.append(fragment_view(b)))])
    pairs = [v for v in views if v is not None]
    for _ in pairs:  # views of views: resolve to the root
        for view, base in pairs:
            try:
                root = ctx.local_of(base)
            except KeyError:
                continue
            for key in [k for k in ctx.local_arrays if k.same_as(view)]:
                del ctx.local_arrays[key]
            ctx.local_arrays[view] = root

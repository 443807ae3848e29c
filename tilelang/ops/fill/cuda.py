"""CUDA lowering of ``T.fill``/``T.clear``: fragments by layout (each thread its registers;
for a part of a fragment only the registers whose logical indices lie in it), shared/global tiles cooperatively over all threads, ``local`` tensors per thread."""

from __future__ import annotations

from tvm_tirx import ir

from ...lowering import irb
from ...lowering.bounds import in_bounds
from ...lowering.fragment_region import region_predicate
from ...lowering.region import RegionView
from ...lowering.thread_utils import for_, fragment_points, is_fragment, is_global
from ..copy.cuda import _static, cooperative_loop
from ..registry import lower_rule


@lower_rule("fill", "cuda")
def lower_fill_cuda(v, ctx):
    dst = RegionView.of(v.dst)
    if is_fragment(dst.tensor):
        layout, local = ctx.get_layout(dst.tensor), ctx.local_of(dst.tensor)
        lvar = ir.Var("fl", "int32")
        n = layout.get_local_size()
        body = irb.store(local, [lvar], v.value, loc=v.loc)
        inner = ctx.with_range(lvar, 0, n)
        points = [inner.simplify(p) for p in fragment_points(layout, lvar, ctx.thread_var)]
        inside = region_predicate(dst, points[: len(dst.shape)], inner.simplify)
        if inside is not None:  # a part of the fragment: only the registers inside it
            body = ir.If(inside, body, None)
        return for_(lvar, n, body, ir.ForKind.UNROLLED if n <= 64 else None, loc=v.loc)
    axes = list(range(len(dst.extents)))
    if not (is_global(dst.tensor) or str(dst.scope).startswith("shared")):
        return irb.loop_nest(
            dst.extents, lambda vs: irb.store(dst.tensor, dst.index(dict(zip(axes, vs))), v.value)
        )
    extents = _static(dst.extents, "T.fill", v.loc)

    def body(offsets, inner):
        idx = [inner.simplify(i) for i in dst.index(dict(zip(axes, offsets)))]
        return irb.store(dst.tensor, idx, v.value, loc=v.loc), in_bounds(dst.tensor, idx, inner, {})

    return cooperative_loop([(dst, axes)], extents, ctx, body, name="f", loc=v.loc)

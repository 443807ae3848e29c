"""A minimal CUDA lowering for GEMM-shaped kernels, for tests and benchmarks of the gemm path.

Until (and independently of) the full CUDA pipeline, this lowers kernels made of
``T.copy(global -> shared)`` (cp.async, or pipelined by ``plan_pipelines``),
``T.clear``/``T.fill`` of fragments, ``T.gemm`` (the mma rule) and
``T.copy(fragment -> global)``, with ``threadIdx.x`` threads only:

    layout rules (gemm) -> plan_pipelines -> fragments to local arrays -> tile ops
    -> shared.dyn tiles retyped to static shared -> build_cuda

It is not a general pipeline: other tile ops raise NotImplementedError.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.tirx.tensor import TensorType

from ..backends.cuda.context import CudaLowerContext, LayoutInferContext
from ..transform.stmt import StmtMutator, alloc_of, launch_of, substitute
from . import irb, tile_op_of
from .bounds import guarded_store
from .copy import COPY
from .gemm import GEMM
from .gemm_cuda import infer_gemm_layout_cuda, lower_gemm_cuda
from .region import RegionView


def make_alloc(var) -> ir.Bind:
    """``var = alloc_tensor()`` (with the empty attrs CUDA codegen expects)."""
    return ir.Bind(var, ir.Call("tirx.alloc_tensor", [], attrs={}, ty_args=[var.ty], ty=var.ty))


def _walk_stmts(stmt, fn):
    fn(stmt)
    for attr in ("seq",):
        if isinstance(stmt, ir.SeqStmt):
            for s in getattr(stmt, attr):
                _walk_stmts(s, fn)
    for attr in ("body", "then_case", "else_case"):
        child = getattr(stmt, attr, None)
        if isinstance(child, ir.Stmt):
            _walk_stmts(child, fn)


def _thread_info(func):
    found = []
    _walk_stmts(func.body, lambda s: found.append(launch_of(s)) if launch_of(s) else None)
    for tag, extent, var in found:
        if tag == "threadIdx.x":
            return var, int(extent.value if hasattr(extent, "value") else extent)
    raise ValueError("kernel has no threadIdx.x launch")


def infer_layouts(func, threads, arch="sm_90a"):
    """Run the gemm layout rule over every ``T.gemm`` of ``func``."""
    layout_map = {}
    calls = []
    _walk_stmts(func.body, lambda s: calls.append(tile_op_of(s)) if tile_op_of(s) else None)
    for op, call in calls:
        if op.name == "gemm":
            ctx = LayoutInferContext(threads, arch, "strict", layout_map)
            for var, lay in infer_gemm_layout_cuda(GEMM.view(call), ctx).items():
                if ctx.get_layout(var) is None:
                    layout_map[var] = lay
    return layout_map


class _Lower(StmtMutator):
    def __init__(self, cctx):
        super().__init__("cuda")
        self.cctx = cctx

    def visit_Bind(self, stmt, ctx):
        var = alloc_of(stmt)
        if var is not None:
            for old, new in self.cctx.local_arrays.items():
                if old.same_as(var):
                    return make_alloc(new)
        return stmt

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None:
            return stmt
        op, call = found
        c = CudaLowerContext(
            "cuda",
            ctx.ranges,
            self.cctx.threads,
            None,
            self.cctx.thread_var,
            self.cctx.arch,
            self.cctx.layout_map,
            self.cctx.local_arrays,
        )
        if op.name == "gemm":
            return lower_gemm_cuda(GEMM.view(call), c)
        if op.name == "fill":
            v = op.view(call)
            local = c.local_of(RegionView.of(v.dst).tensor)
            n = int(local.ty.shape[0])
            return irb.loop_nest(
                [n], lambda i: irb.store(local, [i[0]], v.value), kind=ir.ForKind.UNROLLED
            )
        if op.name == "copy":
            return self._copy(COPY.view(call), c)
        raise NotImplementedError(f"gemm_cuda_standalone cannot lower {op.name}")

    def _copy(self, v, c):
        from ..transform.pipeline_planning import (
            AsyncCopy,
            cp_async_commit,
            cp_async_wait,
            sync_threads,
        )

        src, dst = RegionView.of(v.src), RegionView.of(v.dst)
        if src.scope.startswith("local"):  # fragment -> global epilogue
            frag = c.get_layout(src.tensor)
            local = c.local_of(src.tensor)
            inv = frag.inverse()
            stmts = []
            for i in range(frag.get_local_size()):
                row, col = inv.map_forward_index([i, c.thread_var])[:2]
                value = ir.TensorLoad(local, [ir.const(i, "int32")])
                d_idx = dst.index({len(dst.extents) - 2: row, len(dst.extents) - 1: col})
                stmts.append(guarded_store(dst.tensor, d_idx, value, c, {}))
            return irb.seq(stmts)
        ac = AsyncCopy(v, c)
        if not ac.ok:
            raise NotImplementedError(f"gemm_cuda_standalone: copy {src.name} -> {dst.name}")
        issue = ac.issue(c, c.thread_var, c.threads, c.get_layout(dst.tensor))
        return irb.seq(
            [sync_threads(), *issue, cp_async_commit(), cp_async_wait(0), sync_threads()]
        )


def lower_standalone(func, arch="sm_90a", pipelined=True):
    """Thread-level TIRx for ``func`` (see the module docstring)."""
    from ..transform.pipeline_planning import plan_pipelines

    tx, threads = _thread_info(func)
    layout_map = infer_layouts(func, threads, arch)
    cctx = CudaLowerContext("cuda", {}, threads, None, tx, arch, layout_map, {})
    if pipelined:
        func = plan_pipelines(func, cctx)
    allocs = []
    _walk_stmts(
        func.body, lambda s: allocs.append(alloc_of(s)) if alloc_of(s) is not None else None
    )
    for var in allocs:
        if str(var.ty.scope) == "local.fragment":
            frag = cctx.get_layout(var)
            if frag is None:
                raise NotImplementedError(f"fragment {var.name} has no layout")
            ty = TensorType([frag.get_local_size()], var.ty.dtype, scope="local")
            cctx.local_arrays[var] = ir.Var(var.name, ty)
    body = _Lower(cctx)(func.body)
    retype = {}
    for var in allocs + list(_mb_allocs(body)):
        if str(var.ty.scope) == "shared.dyn":
            retype[var] = ir.Var(
                var.name, TensorType(list(var.ty.shape), var.ty.dtype, scope="shared")
            )
    body = substitute(_Retype(retype)(body), retype)
    return func.with_body(body)


class _Retype(StmtMutator):
    def __init__(self, mapping):
        super().__init__("cuda")
        self.mapping = mapping

    def visit_Bind(self, stmt, ctx):
        var = alloc_of(stmt)
        for old, new in self.mapping.items():
            if var is not None and (var.same_as(old) or var.same_as(new)):
                return make_alloc(new)
        return stmt


def _mb_allocs(body):
    out = []
    _walk_stmts(body, lambda s: out.append(alloc_of(s)) if alloc_of(s) is not None else None)
    return out


def build_standalone(func, arch="sm_90a", pipelined=True, **kwargs):
    """``build_cuda`` (nvcc) of :func:`lower_standalone`; returns the CudaArtifact."""
    from ..backends.cuda.build import build_cuda

    kwargs.setdefault("compiler", "nvcc")
    return build_cuda(lower_standalone(func, arch, pipelined), arch=arch, **kwargs)

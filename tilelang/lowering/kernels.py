"""Functions with several ``T.Kernel`` blocks and ``T.alloc_global`` workspaces.

A traced ``@T.prim_func`` may hold, at its top level (outside every ``T.Kernel``):

- ``W = T.alloc_global(shape, dtype)``: a global-memory workspace. The backends lower it
  to an extra trailing parameter of the compiled function (:func:`workspaces_as_params`);
  the launcher (``JITKernel``) allocates it per call as a torch tensor on the kernel's
  device (``tilelang.jit.workspaces``). Its contents are undefined at kernel start.
- several ``with T.Kernel(...)`` blocks: they run in order (on CUDA: launched in order on
  the current stream, so each sees the previous one's global writes). The backends lower
  each block through their one-kernel pipeline (:func:`kernel_parts`) and join the
  results (:func:`join_parts`).
- bindings of run-time scalars (``n2 = n * 2``) used by the blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
from .stmt import alloc_of, contains, launch_of

WORKSPACE_SCOPE = "global"


@dataclass(frozen=True)
class WorkspaceSpec:
    """One ``T.alloc_global`` workspace: its name, static shape and dtype."""

    name: str
    shape: tuple
    dtype: str


def _top_level(body) -> list:
    while isinstance(body, ir.SeqStmt) and len(body.seq) == 1:
        body = body.seq[0]
    return list(body.seq) if isinstance(body, ir.SeqStmt) else [body]


def _workspace_var(stmt):
    var = alloc_of(stmt)
    if var is not None and str(var.ty.scope) == WORKSPACE_SCOPE:
        return var
    return None


def workspace_specs(func) -> list[WorkspaceSpec]:
    """The ``T.alloc_global`` workspaces of a traced function, in declaration order."""
    specs = []
    for stmt in _top_level(func.body):
        var = _workspace_var(stmt)
        if var is None:
            continue
        shape = []
        for extent in var.ty.shape:
            if not isinstance(extent, ir.IntImm):
                raise errors.compile_error(
                    f"T.alloc_global {var.name!r}: its shape must be static, got {extent}",
                    getattr(stmt, "loc", None),
                )
            shape.append(int(extent.value))
        specs.append(WorkspaceSpec(var.name, tuple(shape), str(var.ty.dtype)))
    return specs


def workspaces_as_params(func):
    """``func`` with its top-level ``T.alloc_global`` tensors turned into trailing parameters
    (in declaration order); ``func`` itself when it has none."""
    stmts = _top_level(func.body)
    ws = [v for v in map(_workspace_var, stmts) if v is not None]
    if not ws:
        return func
    rest = [s for s in stmts if _workspace_var(s) is None]
    body = rest[0] if len(rest) == 1 else ir.SeqStmt(rest)
    return _tirx.Function(list(func.params) + ws, body, None, func.attrs, func.loc)


def _is_kernel(stmt) -> bool:
    launch = launch_of(stmt)
    return launch is not None and launch[0].startswith(("blockIdx", "threadIdx"))


def kernel_count(func) -> int:
    """How many ``T.Kernel`` blocks sit at the top level of ``func``."""
    return sum(map(_is_kernel, _top_level(func.body)))


def kernel_parts(func) -> list:
    """One function per top-level ``T.Kernel`` block (same parameters and attributes), each
    preceded by the top-level scalar bindings before it. Raises a CompileError for any other
    statement outside a ``T.Kernel``."""
    parts, prefix = [], []
    for stmt in _top_level(func.body):
        if _is_kernel(stmt):
            body = ir.SeqStmt([*prefix, stmt]) if prefix else stmt
            parts.append(func.with_body(body))
        elif isinstance(stmt, ir.Bind) and alloc_of(stmt) is None:
            if contains(stmt.value, lambda x: isinstance(x, ir.TensorLoad)):
                raise errors.compile_error(
                    f"{stmt.var.name!r} reads tensor memory outside every T.Kernel block (the "
                    "host cannot read device memory); read it inside the kernels",
                    getattr(stmt, "loc", None),
                )
            prefix.append(stmt)
        else:
            raise errors.compile_error(
                "a function with several T.Kernel blocks may only hold T.Kernel blocks, "
                f"T.alloc_global and scalar assignments outside them; found {type(stmt).__name__}",
                getattr(stmt, "loc", None),
            )
    return parts


def join_parts(func, lowered: list):
    """One function running the lowered ``parts`` in order. Each part's ``tl.*`` attributes
    are kept: the first part's under their own names, part ``i``'s as ``<name>.<i>``."""
    seq = []
    for part in lowered:
        seq.extend(_top_level(part.body))
    out = func.with_body(ir.SeqStmt(seq))
    for i, part in enumerate(lowered):
        for key, value in (part.attrs or {}).items():
            if str(key).startswith("tl.") and not (func.attrs and key in func.attrs):
                out = out.with_attr(str(key) if i == 0 else f"{key}.{i}", value)
    return out


def lower_each_kernel(func, lower_one):
    """``func`` with workspaces as parameters, each ``T.Kernel`` block lowered by
    ``lower_one(part)`` and the parts joined in order (one block: ``lower_one`` of it)."""
    func = workspaces_as_params(func)
    if kernel_count(func) <= 1:
        return lower_one(func)
    return join_parts(func, [lower_one(part) for part in kernel_parts(func)])

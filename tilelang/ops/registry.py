"""The tile-op table: each op's IR form and its per-backend lowering rules.

A tile op is an ordinary TIRx ``Call`` to a registered op ``tl.<name>`` whose
operands are tensor regions or scalar expressions and whose options live in the
call's attributes. It is emitted as a statement. Each op module (``copy.py``,
``gemm.py``...) defines a :class:`TileOpDef` and registers its lowering for each
backend with :func:`lower_rule`; a backend asks :func:`lowering_for` and gets a
clear error, naming op, target and user line, when a rule is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.ir.op import register_op_attr

from .. import errors

OPS: dict[str, TileOpDef] = {}
_LOWERINGS: dict[tuple[str, str], object] = {}
_LAYOUT_RULES: dict[tuple[str, str], object] = {}
_PIPELINE_RULES: dict[tuple[str, str], object] = {}


@dataclass
class TileOpDef:
    """Name, operand names and option defaults of one tile op."""

    name: str
    operands: tuple[str, ...]
    options: dict
    #: how users write the op, for errors (default ``T.<name>``)
    spelling: str = ""

    def __post_init__(self):
        self.op_name = f"tl.{self.name}"
        try:
            ir.Op.get(self.op_name)
        except Exception:  # noqa: BLE001 - not registered yet
            tvm_ffi.get_global_func("ir.RegisterOp")(self.op_name, f"tilelang tile op {self.name}")
            register_op_attr(self.op_name, "TCallEffectKind", ir.CallEffectKind.UpdateState)
        OPS[self.op_name] = self

    def make(self, *operands, loc=None, **options) -> ir.Call:
        """The IR call of this op (options not given take their defaults)."""
        if len(operands) != len(self.operands):
            raise TypeError(f"tl.{self.name} takes operands {self.operands}")
        unknown = set(options) - set(self.options)
        if unknown:
            raise TypeError(f"tl.{self.name}: unknown options {sorted(unknown)}")
        attrs = {**self.options, **options}
        return ir.Call(
            self.op_name, list(operands), attrs=attrs, ty="void", loc=loc or ir.UNKNOWN_LOC
        )

    def view(self, call: ir.Call) -> SimpleNamespace:
        """Operands and options of ``call`` by name, plus ``loc`` and ``call``."""
        ns = SimpleNamespace(**dict(zip(self.operands, call.args)))
        for key, default in self.options.items():
            value = call.attrs[key] if call.attrs is not None and key in call.attrs else default
            if isinstance(value, tvm_ffi.Array | list | tuple):
                value = list(value)
            setattr(ns, key, value)
        ns.loc = call.loc
        ns.call = call
        return ns


def tile_op_of(stmt):
    """(TileOpDef, Call) when ``stmt`` is an ``Evaluate`` of a tile op, else None."""
    if not isinstance(stmt, ir.Evaluate):
        return None
    call = stmt.value
    if not isinstance(call, ir.Call) or not isinstance(call.op, ir.Op):
        return None
    op = OPS.get(call.op.name)
    return None if op is None else (op, call)


def lower_rule(op_name: str, backend: str):
    """Decorator registering ``fn(view, ctx) -> Stmt`` as the lowering of ``op_name`` on ``backend``."""

    def register(fn):
        _LOWERINGS[(op_name, backend)] = fn
        return fn

    return register


def lowering_for(op: TileOpDef, backend: str, call: ir.Call):
    """The lowering rule of ``op`` on ``backend``; a CompileError naming the user's line if none."""
    fn = _LOWERINGS.get((op.name, backend))
    if fn is None:
        raise errors.compile_error(
            f"{op.spelling or 'T.' + op.name} is not supported on the {backend} target", call.loc
        )
    return fn


def layout_rule(op_name: str, backend: str):
    """Decorator registering ``fn(view, ctx) -> {tensor Var: Layout/Fragment}`` for layout inference.

    ``ctx`` is the backend's layout-inference context (for CUDA:
    ``tilelang.lowering.cuda_context.LayoutInferContext``). A rule returns the
    layouts it can decide at ``ctx.level`` ("strict", "common" or "free") given
    ``ctx.layout_map`` (what is already known); it returns {} when it needs more.
    """

    def register(fn):
        _LAYOUT_RULES[(op_name, backend)] = fn
        return fn

    return register


def layout_rule_for(op: TileOpDef, backend: str):
    """The layout-inference rule of ``op`` on ``backend``, or None when the op fixes no layout."""
    return _LAYOUT_RULES.get((op.name, backend))


def pipeline_rule(op_name: str, backend: str):
    """Decorator registering a class whose instance tells software pipelining about ``op_name``.

    The CUDA pipelining pass (``backends/cuda/passes/pipeline_planning.py``) knows no op by
    name: it asks the rule of each tile op in a pipelined loop body. A CUDA rule may offer
    (each optional; see ``ops/gemm/pipelining_cuda.py`` for the one that exists):

    - ``async_reader(view, ctx)``: an object with ``shared_operands`` (tensors it reads
      through the async proxy, e.g. wgmma descriptors) and ``accumulator`` when the op is an
      asynchronous reader, else None; ``mark(stmt, fenced, in_flight, defer_wait)``,
      ``wait(ctx, reader, pending)`` and ``drain(ctx, reader)`` for such ops;
    - ``phase_plan(view, tiles, ctx)``: a plan when the op can be split into phases that
      overlap the next tile's register loads with this tile's math, else None;
      ``phase_buffers(plan, prefix)``, ``phase(stmt, which, buffers, slices)``,
      ``phase_slices(plan)`` and the phase names ``PREFETCH``, ``MAIN``, ``LAST``.
    """

    def register(cls):
        _PIPELINE_RULES[(op_name, backend)] = cls()
        return cls

    return register


def pipeline_rule_for(op: TileOpDef, backend: str):
    """The pipelining rule of ``op`` on ``backend``, or None when the op has none."""
    return _PIPELINE_RULES.get((op.name, backend))

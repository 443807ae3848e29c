"""LayoutInference (CUDA): give every fragment tensor and every ``T.Parallel`` nest a Fragment.

Assumes: a traced tilelang kernel (tile ops as ``Evaluate(Call(tl.*))``, ``T.Parallel``
nests as perfectly nested serial Fors annotated ``tl.parallel``, fragments allocated
with scope ``local.fragment``) and the block's thread count.

Guarantees: ``InferResult.layouts`` maps every fragment Var to a Fragment and
``InferResult.loops`` maps every parallel nest (``loop_key`` of its outermost For) to a Fragment over
the nest's iteration space, such that for every fragment access ``F[idx]`` in a nest
the thread running iteration ``x`` owns ``F[idx(x)]``. Shared tiles map to the Layout
an op rule (gemm's swizzle) or ``T.annotate_layout`` gave them. Conflicts raise a
CompileError naming the buffer(s) and the user's lines of both sides.

``T.annotate_layout`` (``tl.annotate_layout`` statements, and the legacy function
attribute ``tl.layout_map``) is applied first: those layouts are fixed before any rule
runs, so the rules adapt to them (gemm keeps a known shared layout, loops take a known
fragment) or report a conflict naming the annotation's line. A gemm that reads an
annotated shared operand with ``ldmatrix`` needs its 16-byte rows stored contiguously
(:func:`check_annotated_gemm_operands`).

Levels (upstream TileLang's): "strict" (gemm fixes its accumulator), "common"
(reduce, fragment copies, loops touching a fragment with a known layout propagate),
"free" (one unconstrained loop at a time gets ``default_fragment``: upstream's
``make_parallel_fragment`` with 16-byte vectors where its global/shared accesses are
contiguous -- or its fragment accesses, when it has no global/shared ones -- or a
per-axis split when that one fuses axes). Fragments that are never
constrained get a default: fully replicated when they are used outside parallel loops
(serial code sees all of them), ``make_parallel_fragment`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....engine.pass_config import build_options
from ....layout import Fragment
from ....layout import expr as E
from ....layout.annotation import contiguous_vectors
from ....lowering.cuda_context import LayoutInferContext
from ....lowering.fragments import (  # noqa: F401 - re-used by the passes here
    default_fragment,
    fragment_view,
    project_fragment,
    replicated_fragment,
    same_threads,
)
from ....lowering.stmt import launch_of, uses_any
from ....lowering.target_info import backend_of
from ....lowering.thread_range import negate, shift_threads, split_uniform
from ....lowering.thread_utils import _bits, is_fragment, is_global, is_shared
from ....ops.registry import layout_rule_for, tile_op_of
from .loop_fragment_access import (
    accumulating_layout,
    accumulations,
    check_nest,
    check_serial_accesses,
    coarse_axes,
    coarse_layout,
    first_loc,
    inner_loops,
    spread_positions,
)
from .strided_parallel import check_strided_nest, is_strided_nest
from .thread_guard import (
    RANGE_RELATIVE_OPS,
    ThreadGuard,
    check_guarded,
    fragments_of,
    plan_under_guard,
    run_in_range,
)


@dataclass
class ParallelNest:
    """A perfectly nested ``T.Parallel`` loop nest."""

    root: ir.For
    vars: list
    extents: list
    body: ir.Stmt
    accesses: list = field(default_factory=list)  # (tensor Var, indices)

    @property
    def loc(self):
        """The loop's source location, else its first statement's (a traced ``For`` has
        none)."""
        if errors.where(self.root.loc):
            return self.root.loc
        return first_loc(self.body) or self.root.loc

    @property
    def key(self):
        """The nest's identity: its outermost loop Var (passes may rebuild the For node)."""
        return loop_key(self.root)


def loop_key(for_stmt):
    """Key of a parallel nest in ``InferResult.loops``: the handle of its outer loop Var.

    Keyed by the Var, not the For node, because passes between layout inference and
    ``lower_parallel`` (pipeline planning, any StmtMutator) rebuild For nodes but keep
    their loop Vars.
    """
    return for_stmt.var.__chandle__()


def _int(x):
    return E.as_const_int(x)


def parallel_nest(stmt) -> ParallelNest | None:
    if not _is_parallel(stmt):
        return None
    if is_strided_nest(stmt):  # a run-time extent: a strided loop, no layout (its module)
        check_strided_nest(stmt, stmt.loc if errors.where(stmt.loc) else first_loc(stmt.body))
        return None
    vars_, extents, s = [], [], stmt
    while _is_parallel(s):
        vars_.append(s.var)
        extents.append(_int(s.end))
        s = s.body
        while isinstance(s, ir.SeqStmt) and len(s.seq) == 1:
            s = s.seq[0]
    nest = ParallelNest(stmt, vars_, extents, s)
    seen = []

    def visit_load(x):
        seen.append((x.source, list(x.indices), False))

    def visit_store(x):
        seen.append((x.dest, list(x.indices), True))

    tvm_ffi.structural_walk(s, [(ir.TensorLoad, visit_load), (ir.TensorStore, visit_store)])
    nest.accesses = seen
    return nest


def _is_parallel(s) -> bool:
    return isinstance(s, ir.For) and s.annotations is not None and "tl.parallel" in s.annotations


@dataclass
class InferResult:
    layouts: dict  # fragment Var -> Fragment  (use get())
    loops: dict  # loop_key(nest root For) -> Fragment
    nests: list  # ParallelNest in program order

    def get(self, var):
        for k, v in self.layouts.items():
            if k.same_as(var):
                return v
        return None

    def loop_layout_lines(self) -> list:
        """One dump line per parallel nest, ``"<ordinal> (<loop vars>): <Fragment>"``, in
        program order (the ``tl.loop_layouts`` attribute). Nests are named by position and
        loop variable names, not by ``loop_key`` (an object handle), so a dump is the same in
        every process; the passes look nests up in :attr:`loops` by ``loop_key``."""
        return [
            f"{k} ({', '.join(v.name for v in n.vars)}): {self.loops[n.key]!r}"
            for k, n in enumerate(self.nests)
        ]


#: Tile ops every thread of the block takes part in: not inside a T.Parallel loop.
_BLOCK_WIDE_OPS = ("copy", "fill", "gemm", "reduce", "cumsum", "sync_threads")


# --------------------------------------------------------------------------- the pass
class _Inference:
    def __init__(
        self, func, threads: int, arch: str, annotations=None, prefer_mma=False, options=None
    ):
        self.threads, self.arch, self.options = threads, arch, options
        self.prefer_mma = prefer_mma
        self.layout_map: dict = {}
        self.origins: dict = {}  # Var handle -> (who, loc) of the rule that set its layout
        self.ops, self.nests, self.fragments, self.serial_frags = [], [], [], []
        self.annotated: list = []  # (Var, Layout, loc) of T.annotate_layout statements
        self.loop_layouts: dict = {}
        self.body = func.body
        self.thread_vars: list = []  # threadIdx launch variables seen so far
        # under an `if` on the thread index (thread_guard.py): nest key / call handle ->
        # Planned, fragment handle -> (lo, hi) of the guarded statements using it
        self.planned: dict = {}
        self.fragment_ranges: dict = {}
        self.views: list = []  # (view, base, loc): T.reshape/T.view of a fragment
        self._collect(func.body, in_nest=False)
        for var, layout in (annotations or {}).items():
            self._set(var, layout, None, "T.annotate_layout")
        for var, layout, loc in self.annotated:
            self._annotate(var, layout, loc)

    def _plan_under_guard(self, stmt, nest, guard) -> None:
        planned = plan_under_guard(stmt, nest, guard, self.thread_vars, self.threads)
        if planned is None:
            return
        key = nest.key if nest is not None else tile_op_of(stmt)[1].__chandle__()
        self.planned[key] = planned
        for var in planned.fragments:
            self.fragment_ranges.setdefault(var.__chandle__(), (planned.lo, planned.hi))

    def _threads_of(self, planned_key, var=None):
        """``(lo, hi)``: the threads a free layout is laid over (a guarded statement's,
        the guarded range a fragment was first used in, else the whole block)."""
        planned = self.planned.get(planned_key)
        if planned is not None:
            return planned.lo, planned.hi
        if var is not None and var.__chandle__() in self.fragment_ranges:
            return self.fragment_ranges[var.__chandle__()]
        return 0, self.threads

    def _annotate(self, var, layout, loc) -> None:
        if isinstance(layout, Fragment) and layout.get_thread_size() > self.threads:
            raise errors.compile_error(
                f"T.annotate_layout: the fragment of {var.name} uses "
                f"{layout.get_thread_size()} threads but the block has {self.threads}",
                loc,
            )
        if isinstance(layout, Fragment):
            _check_thread_gaps(var, layout, loc)
        self._set(var, layout, loc, "T.annotate_layout")

    def _collect(self, stmt, in_nest, guard=None):
        nest = parallel_nest(stmt) if not in_nest else None
        if guard is not None and not in_nest:
            if nest is not None or _block_wide(stmt) or is_strided_nest(stmt):
                self._plan_under_guard(stmt, nest, guard)
        if nest is not None:
            self.nests.append(nest)
            self._collect(nest.body, in_nest=True)
            return
        found = tile_op_of(stmt)
        if found is not None and found[0].name == "annotate_layout":
            from ....ops.annotate_layout.op import annotation_of

            var, layout = annotation_of(*found)
            if not is_global(var):  # a global tensor's storage layout: apply_global_layouts
                self.annotated.append((var, layout, found[1].loc))
            return
        if found is not None and in_nest and found[0].name in _BLOCK_WIDE_OPS:
            raise errors.compile_error(
                f"T.{found[0].name} inside a T.Parallel loop: tile ops are block-wide (all "
                "threads of the block share the work), but each iteration of the loop runs on "
                "its own thread(s). Call it outside the T.Parallel loop (a T.serial loop for "
                "one call per row), or write the element accesses in the loop itself",
                found[1].loc,
            )
        if found is not None:
            self.ops.append(found)
            return
        if isinstance(stmt, ir.Bind):
            var = stmt.var
            if is_fragment(var):
                self.fragments.append(var)
            view = fragment_view(stmt)
            if view is not None:
                self._add_view(*view, stmt.loc)
        if isinstance(stmt, ir.TensorStore | ir.Bind | ir.Evaluate | ir.If | ir.While):
            if not in_nest:
                for t in _fragments_in(stmt, shallow=True):
                    self.serial_frags.append(t)
        launch = launch_of(stmt)
        if launch is not None and launch[0].startswith("threadIdx"):
            self.thread_vars.append(launch[2])
        if (
            isinstance(stmt, ir.If)
            and self.thread_vars
            and uses_any(stmt.condition, self.thread_vars)
        ):
            # the threads each branch keeps: the `if`'s thread conjuncts, the else's negation
            outer = guard or ThreadGuard(stmt, [])
            on_threads, _ = split_uniform(stmt.condition, self.thread_vars)
            self._collect(stmt.then_case, in_nest, outer.within(on_threads))
            if stmt.else_case is not None:
                self._collect(stmt.else_case, in_nest, outer.within(negate(stmt.condition)))
            return
        for child in _children(stmt):
            self._collect(child, in_nest, guard)

    def _add_view(self, view, base, loc) -> None:
        if str(view.ty.dtype) != str(base.ty.dtype):
            raise errors.compile_error(
                f"T.view of fragment {base.name} ({base.ty.dtype}) as {view.ty.dtype}: a "
                "fragment's registers hold its own element type, so it cannot be viewed as "
                "another one; T.copy it into a fragment of that type instead",
                loc,
            )
        self.views.append((view, base, loc))

    def run_views(self) -> bool:
        """A ``T.reshape`` of a fragment shares its registers: the view's layout is the
        base's reshaped (``Fragment.reshape``), whichever side is known first."""
        changed = False
        for view, base, loc in self.views:
            lv, lb = self.get(view), self.get(base)
            if lb is not None and lv is None:
                self._set_view(view, lb.reshape([int(d) for d in view.ty.shape]), loc, base)
                changed = True
            elif lv is not None and lb is None:
                self._set_view(base, lv.reshape([int(d) for d in base.ty.shape]), loc, view)
                changed = True
            elif lv is not None and lb is not None:
                want = lb.reshape([int(d) for d in view.ty.shape])
                if not _same_layout(lv, want, exact=True):
                    here = errors.where(loc)
                    raise errors.compile_error(
                        f"layout conflict for {view.name}: it is a T.reshape of fragment "
                        f"{base.name}{f' ({here})' if here else ''} and shares its registers, "
                        f"so it needs {want!r}, but {self.origin(view) or 'an earlier rule'} "
                        f"gave it {lv!r}",
                        loc,
                    )
        return changed

    def _set_view(self, var, layout, loc, other) -> None:
        _check_invertible(var, layout, loc, f"T.reshape of {other.name}", _RESHAPE_HINT)
        self.layout_map[var] = layout
        self.origins[var.__chandle__()] = ("T.reshape", loc)

    # --- bookkeeping
    def get(self, var):
        for k, v in self.layout_map.items():
            if k.same_as(var):
                return v
        return None

    def origin(self, var) -> str:
        """``who (file:line)`` of the rule that set ``var``'s layout ('' when unknown)."""
        who, loc = self.origins.get(var.__chandle__(), ("", None))
        at = errors.where(loc) if loc is not None else ""
        return f"{who} ({at})" if at else who

    def _set(self, var, layout, loc, who) -> bool:
        old = self.get(var)
        if old is None:
            self.layout_map[var] = layout
            self.origins[var.__chandle__()] = (who, loc)
            return True
        # gemm lowers its fragments register by register: the whole map must match
        if not _same_layout(old, layout, exact=who == "T.gemm"):
            here = errors.where(loc) if loc is not None else ""
            raise errors.compile_error(
                f"layout conflict for {var.name}: {who}{f' ({here})' if here else ''} needs "
                f"{layout!r} but {self.origin(var) or 'an earlier rule'} gave it {old!r}",
                loc,
            )
        return False

    # --- rules
    def run_ops(self, level, only=None) -> bool:
        changed = False
        for op, call in self.ops:
            if only is not None and op.name not in only:
                continue
            rule = layout_rule_for(op, backend_of(self.arch))
            if rule is None:
                continue
            ctx = LayoutInferContext(
                self.threads, self.arch, level, self.layout_map, options=self.options
            )
            ctx.prefer_mma = self.prefer_mma  # read by the sm_90a gemm rule (gemm_cuda.py)
            ctx.origin_of = self.origin  # conflict messages name who set a layout (reduce)
            planned = self.planned.get(call.__chandle__())
            try:
                if planned is not None and op.name in RANGE_RELATIVE_OPS:
                    found = run_in_range(planned, rule, op.view(call), ctx)
                else:
                    found = rule(op.view(call), ctx) or {}
            except ValueError as err:  # a layout the rule cannot split (reduce's projection)
                known = ", ".join(
                    f"{v.name}: {self.get(v)!r}" for v in fragments_of(call) if self.get(v)
                )
                raise errors.compile_error(
                    f"T.{op.name}: no layout fits it given its fragments' layouts ({known}): "
                    f"{err}; give them layouts whose thread expressions split along the op's "
                    "axes (T.annotate_layout), or T.copy into fragments with default layouts",
                    call.loc,
                ) from None
            for var, layout in found.items():
                changed |= self._set(var, layout, call.loc, f"T.{op.name}")
        return changed

    def run_loop(self, nest: ParallelNest) -> bool:
        key = nest.key
        changed = False
        loop = self.loop_layouts.get(key)
        if loop is None:
            # an accumulation (acc[d] += X[j, d]) runs its left-out axes on acc's threads
            for tensor, _, keep in accumulations(nest):
                if self.get(tensor) is not None:
                    loop = accumulating_layout(self.get(tensor), keep, nest.extents)
                    self.loop_layouts[key] = loop
                    changed = True
                    break
        if loop is None:
            for tensor, idx, _ in nest.accesses:
                if is_fragment(tensor) and self._exact(idx, nest) and self.get(tensor):
                    loop = self.get(tensor)
                    self.loop_layouts[key] = loop
                    changed = True
                    break
        if loop is None:  # a fragment read in another axis order (g[i, j] = f[j, i])
            for tensor, idx, _ in nest.accesses:
                perm = self._axes_any_order(idx, nest)
                if is_fragment(tensor) and perm is not None and self.get(tensor):
                    loop = accumulating_layout(self.get(tensor), perm, nest.extents)
                    self.loop_layouts[key] = loop
                    changed = True
                    break
        if loop is None:
            return changed
        for tensor, idx, _ in nest.accesses:
            if not is_fragment(tensor):
                continue
            keep = self._axes(idx, nest)
            if keep is None:
                # f[j, i] (permuted axes) or f[i, k] (k an inner T.serial loop's variable):
                # the loop's threads, the inner loops' axes in each thread's registers
                pos = spread_positions(idx, nest, inner_loops(nest))
                factors = coarse_axes(idx, nest) if pos is None else None
                if (pos is not None or factors is not None) and self.get(tensor) is None:
                    shape = [int(d) for d in tensor.ty.shape]
                    self.layout_map[tensor] = (
                        accumulating_layout(loop, pos, shape)
                        if pos is not None
                        else coarse_layout(loop, factors, shape)
                    )
                    self.origins[tensor.__chandle__()] = ("a T.Parallel loop", nest.loc)
                    changed = True
                elif self.get(tensor) is None and self._read_only_gather(tensor, idx, nest):
                    # a[k, i] with k an inner loop's variable and a nest axis left out
                    # (mHC post: x[i, j] += a[k, i] * b[k, j]): every thread running the
                    # nest reads it, so every one holds all of it (upstream replicates it)
                    lo, hi = self._threads_of(nest.key)
                    shape = [int(d) for d in tensor.ty.shape]
                    self.layout_map[tensor] = shift_threads(replicated_fragment(shape, hi - lo), lo)
                    self.origins[tensor.__chandle__()] = ("a T.Parallel loop", nest.loc)
                    changed = True
                continue
            want = loop if keep == list(range(len(nest.vars))) else project_fragment(loop, keep)
            if len(keep) != len(tensor.ty.shape):
                continue
            old = self.get(tensor)
            if old is None:
                self.layout_map[tensor] = want
                self.origins[tensor.__chandle__()] = ("a T.Parallel loop", nest.loc)
                changed = True
            elif not same_threads(old, want):
                here = errors.where(nest.loc)
                raise errors.compile_error(
                    f"layout conflict: {tensor.name} is accessed in a T.Parallel loop"
                    f"{f' ({here})' if here else ''} whose layout is {loop!r}, but "
                    f"{self.origin(tensor) or 'an earlier rule'} gave {tensor.name} {old!r}",
                    nest.loc,
                )
        return changed

    def free_loop(self, nest: ParallelNest) -> None:
        lo, hi = self._threads_of(nest.key)
        acc = accumulations(nest)
        if acc:  # the kept axes spread over the threads, the accumulated ones in registers
            keep = acc[0][2]
            base = default_fragment([nest.extents[a] for a in keep], hi - lo, 1)
            layout = accumulating_layout(base, keep, nest.extents)
            self.loop_layouts[nest.key] = shift_threads(layout, lo)
            return
        total = int(E.prod(nest.extents))
        inner = nest.vars[-1]
        bytes_, frag_bytes = [], []
        for tensor, idx, _ in nest.accesses:
            if not _unit_stride(idx, inner):
                continue
            if is_global(tensor) or is_shared(tensor):
                bytes_.append(max(1, _bits(tensor) // 8))
            elif is_fragment(tensor):
                frag_bytes.append(max(1, _bits(tensor) // 8))
        # Vectors of 16 bytes of the widest global/shared element; a nest over fragments
        # only gets register vectors too, so the T.copy that fills or drains them can move
        # 16 bytes at a time (transform/vectorize.py).
        bytes_ = bytes_ or frag_bytes
        vec = 16 // max(bytes_) if bytes_ else 1
        while vec > 1 and (nest.extents[-1] % vec or total // vec < hi - lo):
            vec //= 2
        layout = shift_threads(default_fragment(nest.extents, hi - lo, vec), lo)
        self.loop_layouts[nest.key] = self._row_owner_layout(nest, layout) or layout

    def _row_owner_layout(self, nest: ParallelNest, free: Fragment):
        """When ``free`` would run a read ``f[i]`` of a fragment with a known layout (``f``
        indexed by some of the nest's axes, in order: ``scores_max[h]`` in a loop over
        ``h, k``) on threads that do not hold it, the layout running each iteration on
        ``f[i]``'s threads, the other axes in registers (upstream derives the loop layout
        from such a fragment); else None."""
        for tensor, idx, _ in nest.accesses:
            known = self.get(tensor) if is_fragment(tensor) else None
            keep = self._axes(idx, nest) if known is not None else None
            if keep is None or len(keep) != len(tensor.ty.shape):
                continue
            if len(keep) == len(nest.vars) or same_threads(known, project_fragment(free, keep)):
                continue
            return accumulating_layout(known, keep, nest.extents)
        return None

    @staticmethod
    def _read_only_gather(tensor, idx, nest) -> bool:
        """Whether fragment ``tensor`` is only read in ``nest``, with indices that are nest
        variables or variables of loops inside it (a small table every iteration reads)."""
        if any(store and t.same_as(tensor) for t, _, store in nest.accesses):
            return False
        inner = inner_loops(nest)
        for i in idx:
            if not isinstance(i, ir.Var):
                return False
            if not any(i.same_as(v) for v in nest.vars) and E.key(i) not in inner:
                return False
        return True

    @staticmethod
    def _exact(idx, nest) -> bool:
        return len(idx) == len(nest.vars) and all(
            isinstance(i, ir.Var) and i.same_as(v) for i, v in zip(idx, nest.vars)
        )

    @staticmethod
    def _axes_any_order(idx, nest):
        """The nest axis of each index when ``idx`` is all the nest's variables in some
        order, else None."""
        if len(idx) != len(nest.vars):
            return None
        pos = []
        for i in idx:
            hit = [k for k, v in enumerate(nest.vars) if isinstance(i, ir.Var) and i.same_as(v)]
            if not hit or hit[0] in pos:
                return None
            pos.append(hit[0])
        return pos

    @staticmethod
    def _axes(idx, nest):
        keep = []
        for i in idx:
            pos = [k for k, v in enumerate(nest.vars) if isinstance(i, ir.Var) and i.same_as(v)]
            if not pos or pos[0] in keep:
                return None
            keep.append(pos[0])
        return keep if keep == sorted(keep) else None

    def run(self) -> InferResult:
        self.run_ops("strict")
        while True:
            while (
                self.run_ops("common")
                | any([self.run_loop(n) for n in self.nests])
                | self.run_views()
            ):
                pass
            pending = [n for n in self.nests if n.key not in self.loop_layouts]
            # a reduce's source laid out after its destination: only once the loops could
            # not give it one from the fragments they read (a gemm accumulator)
            if self.run_ops("deferred", only=("reduce",)):
                continue
            if pending:
                # the largest loop first: small loops (per-row scalars) then adapt to the
                # layouts it fixes instead of forcing a replicated layout on shared fragments
                self.free_loop(max(pending, key=lambda n: int(E.prod(n.extents))))
                continue
            if self.run_ops("free"):
                continue
            missing = [f for f in self.fragments if self.get(f) is None]
            if not missing:
                break
            var = missing[0]
            for view, base, _ in self.views:  # a view's base first (the view follows it)
                if var.same_as(view) and self.get(base) is None:
                    var = base
            shape = [int(s) for s in var.ty.shape]
            serial = any(var.same_as(s) for s in self.serial_frags)
            lo, hi = (0, self.threads) if serial else self._threads_of(None, var)
            layout = (
                replicated_fragment(shape, self.threads)
                if serial
                else shift_threads(default_fragment(shape, hi - lo, 1), lo)
            )
            self.layout_map[var] = layout
        check_annotated_gemm_operands(self)
        for nest in self.nests:
            check_nest(nest, self.loop_layouts[nest.key], self.get)
        for key, planned in self.planned.items():
            check_guarded(planned, self.loop_layouts.get(key), self.get, self.origin)
        check_serial_accesses(
            self.body, self.nests, self.get, self.threads, lambda s: tile_op_of(s) is not None
        )
        return InferResult(self.layout_map, self.loop_layouts, self.nests)


def _block_wide(stmt) -> bool:
    """Whether ``stmt`` is a tile op every thread of the block takes part in."""
    found = tile_op_of(stmt)
    if found is None:
        return False
    op, call = found
    if op.name == "atomic":
        return bool(op.view(call).value_is_region)
    return op.name in _BLOCK_WIDE_OPS and op.name != "sync_threads"


def _check_thread_gaps(var, layout, loc) -> None:
    """A CompileError when an annotated fragment leaves threads inside its span without
    elements, or gives its threads different numbers of elements (each thread runs over
    the same registers: ``forward_thread = 3 * i`` made the lowering fail inside TIRx)."""
    import numpy as np

    try:
        table = layout.thread_table()
    except Exception:  # noqa: BLE001 - not tabulable: left to the lowering
        return
    owners, counts = np.unique(table, return_counts=True)
    lo, hi = int(owners[0]), int(owners[-1]) + 1
    if len(owners) == hi - lo and counts.min() == counts.max():
        return
    problem = (
        f"threads {lo}..{hi - 1} with {hi - lo - len(owners)} of them holding no element"
        if len(owners) != hi - lo
        else f"{counts.min()} to {counts.max()} elements per thread"
    )
    raise errors.compile_error(
        f"T.annotate_layout: the fragment of {var.name}, {layout!r}, puts its elements on "
        f"{problem}; {_ANNOTATION_HINT}",
        loc,
    )


_ANNOTATION_HINT = (
    "give each of the threads 0..n-1 the same number of elements, e.g. "
    "forward_thread = i % a * b + j % b"
)
_RESHAPE_HINT = (
    "a fragment view must split or merge axes along the base's thread/register splits "
    "(e.g. flatten it, or reshape its last axis); T.copy it into a new fragment otherwise"
)


def _check_invertible(var, layout, loc, who="T.annotate_layout", hint=_ANNOTATION_HINT):
    """A CompileError unless every (thread, register) of ``layout`` holds exactly one element
    of ``var`` (the lowering runs each thread over its registers through the inverse)."""
    try:
        layout.inverse()
    except Exception as err:  # noqa: BLE001 - ValueError, or TIRx's check on a non-bijection
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise errors.compile_error(
            f"{who}: the fragment of {var.name}, {layout!r}, maps (thread, "
            "register) pairs to its elements in a way that cannot be inverted (its thread "
            "expression is not a clean split of the index, or it leaves threads or registers "
            f"empty: {detail[:200]}); {hint}",
            loc,
        ) from None


def _same_layout(old, new, exact=False) -> bool:
    """Fragments: same threads (:func:`same_threads`; ``exact``: same registers too);
    memory layouts: the same map."""
    if isinstance(old, Fragment) and isinstance(new, Fragment) and exact:
        try:
            return bool(old.is_equal(new))
        except Exception:  # noqa: BLE001 - incomparable layouts are different
            return False
    if isinstance(old, Fragment) or isinstance(new, Fragment):
        return same_threads(old, new)
    try:
        return old.input_dim == new.input_dim and bool(old.is_equal(new))
    except Exception:  # noqa: BLE001 - incomparable layouts are different
        return False


#: 16-bit A/B tiles (and int8 K-major ones) are read by ``ldmatrix``: 16-byte rows.
_LDMATRIX_BYTES = 16


def check_annotated_gemm_operands(inference) -> None:
    """Raise when a gemm reads an annotated shared operand it cannot read correctly.

    The mma.sync lowering (``ops/gemm_cuda.py``) reads fp16/bf16 operands, and int8
    operands stored K-major, with ``ldmatrix``: each lane addresses 16 contiguous bytes
    of the stored tile's last axis, at a 16-byte aligned place. It addresses them through
    the tile's layout, so any annotated layout keeping those 16-byte runs contiguous and
    aligned (swizzles, padded rows) is read correctly; others are a conflict naming the
    annotation's line and the gemm's line. float32 (tf32) and int8 MN-major operands are
    read element by element and take any layout.
    """
    from ....ops.gemm.op import gemm_dims

    annotated = {var.__chandle__() for var, _, _ in inference.annotated}
    for op, call in inference.ops:
        if op.name != "gemm":
            continue
        v = op.view(call)
        try:
            a, b, *_ = gemm_dims(v)
        except errors.TileLangError:
            continue
        for view, k_major in ((a, not v.transpose_A), (b, bool(v.transpose_B))):
            tensor = view.tensor
            if tensor.__chandle__() not in annotated or not is_shared(tensor):
                continue
            bits = _bits(tensor)
            if bits == 32 or (bits == 8 and not k_major):
                continue
            layout = inference.get(tensor)
            vec = _LDMATRIX_BYTES * 8 // bits
            shape = [int(d) for d in layout.get_input_shape()]
            if not contiguous_vectors(layout, vec):
                raise errors.compile_error(
                    f"layout conflict for {tensor.name}: T.gemm ({errors.where(call.loc)}) "
                    f"reads it with ldmatrix, which needs each run of {vec} elements "
                    f"({_LDMATRIX_BYTES} bytes) of its last axis (shape {shape}) stored "
                    f"contiguously and {_LDMATRIX_BYTES}-byte aligned, but "
                    f"{inference.origin(tensor)} gave it {layout!r}",
                    call.loc,
                )


def _unit_stride(idx, inner) -> bool:
    """Whether consecutive ``inner`` iterations touch consecutive elements (``base + inner``).

    The last index is ``inner`` plus an expression without it (``bx * 256 + j``), and no
    other index uses ``inner``.
    """
    if not idx or any(E.uses_var(i, inner) for i in idx[:-1]):
        return False
    if idx[-1].same_as(inner):
        return True
    return E.uses_var(idx[-1], inner) and not E.uses_var(E.simplify(idx[-1] - inner), inner)


def _children(stmt):
    if isinstance(stmt, ir.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, ir.For | ir.While | ir.RegionStmt):
        return [stmt.body]
    if isinstance(stmt, ir.If):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    return []


def _fragments_in(stmt, shallow=False):
    if shallow and isinstance(stmt, ir.If | ir.While):
        node = stmt.condition
    else:
        node = stmt
    out = []

    def visit(x):
        src = x.source if isinstance(x, ir.TensorLoad) else x.dest
        if is_fragment(src):
            out.append(src)

    tvm_ffi.structural_walk(node, [(ir.TensorLoad, visit), (ir.TensorStore, visit)])
    return out


def strip_layout_annotations(body):
    """``body`` without its ``tl.annotate_layout`` statements (consumed by layout inference).

    Later passes see only the layout map; a statement naming a shared tile outside the
    loop that uses it would otherwise keep ``pipeline_planning`` from multi-buffering it.
    """
    from ....lowering.stmt import StmtMutator

    class _Strip(StmtMutator):
        def visit_Evaluate(self, stmt, ctx):
            found = tile_op_of(stmt)
            return None if found is not None and found[0].name == "annotate_layout" else stmt

    return _Strip("cuda")(body)


def infer_layouts(func, threads: int, arch: str, annotations=None, options=None) -> InferResult:
    """Run layout inference over a traced function (see the module docstring).

    On a layout conflict it runs once more with ``prefer_mma``: gemms whose wgmma
    accumulator puts rows on other threads than the mma.sync one take the mma.sync path
    (e.g. FlashAttention with block_M = 128 on one warpgroup: the wgmma Q @ K^T and the
    mma.sync P @ V, whose A is in registers, give the row vectors different threads). The
    first error is raised when that does not help either. ``options`` are the pass configs'
    code-generation choices (``engine.pass_config.build_options``).
    """
    options = options or build_options(None)
    try:
        return _Inference(func, threads, arch, annotations, options=options).run()
    except errors.CompileError as err:
        if "layout conflict" not in str(err) or not str(arch).startswith("sm_90a"):
            raise
        first = err
    try:
        return _Inference(func, threads, arch, annotations, prefer_mma=True, options=options).run()
    except errors.CompileError:
        raise first from None

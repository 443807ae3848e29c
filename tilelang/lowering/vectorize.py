"""VectorizeAccesses (CUDA): one 4/8/16-byte load or store per vector instead of one per element.

Used by the lowerings that spread elements over threads in vectors: ``lower_parallel``
(``T.Parallel`` nests whose layout gives a thread consecutive elements), cooperative
``T.copy``/``T.fill`` of global/shared tiles and fragment <-> global/shared copies.
Each hands over a *lane body*: the statement that lane ``v`` (``0 <= v < vec``) of one
vector runs, with its global accesses not yet guarded for tails.

Assumes: the lanes of a vector are independent iterations (of a parallel loop, or of a
tile copy), so a lane's loads may move before the other lanes and its stores after
them; within one lane the order of accesses to a tensor is kept.

An access ``X[idx(v)]`` of a global or shared tensor is *vectorized* when the analyzer
proves, over the enclosing loop and thread ranges:

- every index but the last does not depend on ``v`` and the last is ``base + v``;
- the flat element offset of lane 0 is a multiple of ``vec`` and the last dimension's
  extent is too, so the vector is contiguous, aligned relative to the tensor's first
  element, and either wholly inside the tensor or wholly outside it;

and ``vec`` elements are 4, 8 or 16 bytes, the indices use no variable bound inside the
lane body, the tensor has the default (row-major) layout and its address is not taken
by a call (atomics). Loads of ``X`` move only if no store to ``X`` precedes them in the
lane; stores to ``X`` move only if every store to ``X`` is a top-level statement of the
lane that qualifies and no load of ``X`` follows one. Operands of tile ops left in the
lane (``T.atomic_add`` in a ``T.Parallel`` body) stay as written: their lowering decides
from the expressions (e.g. whether an address depends on the thread).

Guarantees: each vectorized load becomes one ``tl::copy_vec<bytes>`` into a ``vec``
element local array before the lanes (``tl::zero_vec`` instead when lane 0 is outside a
global tensor: the elements read as zero, as the scalar guards make them), each
vectorized store one ``tl::copy_vec`` from a local array after them (skipped outside
the tensor), a store of a load (a plain copy) one ``tl::copy_vec`` between the two
tensors. The lanes run unrolled on the local arrays. Global tensors only promise
element alignment (views such as ``a[1:]`` are accepted), so when a vectorized access
is global the vector code runs under a block-uniform ``tl::is_aligned`` test of those
tensors' base pointers and the caller's scalar code runs otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.tirx.tensor import TensorType

from ..layout import expr as E
from .bounds import in_bounds
from .global_layouts import vectorizable
from .stmt import uses_any
from .thread_utils import _bits, extern_stmt, for_, is_global, is_shared

VEC_BYTES = 16
COPY_VEC = "tl::copy_vec"
ZERO_VEC = "tl::zero_vec"
IS_ALIGNED = "tl::is_aligned"
_WIDTHS = (4, 8, 16)  # bytes one vector access may move
_NAMES = itertools.count()  # local array names (unique within a process)


def lanes_for(tensors) -> int:
    """Elements per 16-byte vector of the widest element type among ``tensors`` (1 if none)."""
    widest = max((_bits(t) for t in tensors if _bits(t) % 8 == 0), default=0)
    return max(1, VEC_BYTES * 8 // widest) if widest else 1


def vector_call(name: str, nbytes: int, *args) -> ir.Evaluate:
    """``tl::copy_vec<nbytes>(dst, src)`` / ``tl::zero_vec<nbytes>(dst)`` as a statement."""
    return extern_stmt(f"{name}<{nbytes}>", *args)


def _addr(tensor, indices):
    return _tirx.address_of(ir.TensorLoad(tensor, list(indices)))


def _is_tile_op(stmt) -> bool:
    """Whether ``stmt`` evaluates a tile op (an op named ``tl.<name>``, see ``ops.registry``)."""
    call = stmt.value
    return (
        isinstance(call, ir.Call) and isinstance(call.op, ir.Op) and call.op.name.startswith("tl.")
    )


def is_vector_call(stmt) -> bool:
    """Whether ``stmt`` is a ``tl::copy_vec``/``tl::zero_vec`` statement."""
    if not isinstance(stmt, ir.Evaluate) or not isinstance(stmt.value, ir.Call):
        return False
    call = stmt.value
    if getattr(call.op, "name", "") != "tirx.call_extern" or not call.args:
        return False
    return str(call.args[0].value).startswith((COPY_VEC, ZERO_VEC))


def vector_call_dst(stmt):
    """The tensor a ``tl::copy_vec``/``tl::zero_vec`` statement writes."""
    return stmt.value.args[1].args[0].source


def split_lanes(points, lvar, n, ctx, max_vec):
    """View local slot ``l`` of a fragment as ``lo * vec + v`` with ``v`` the vector lane.

    ``points`` are a layout's ``(*logical, replica)`` for slot ``lvar`` (see
    ``fragment_points``). Tries ``vec = max_vec, max_vec / 2, ... 2`` dividing ``n`` and
    returns ``(vec, lo, v, points, ctx)`` for the first where the last logical index is
    ``base + v`` and the other indices and the replica do not depend on ``v``, else None.
    """
    vec = max_vec
    while vec > 1:
        if n % vec == 0:
            lo = ir.Var(f"{lvar.name}_o", "int32")
            v = ir.Var(f"{lvar.name}_v", "int32")
            inner = ctx.with_range(lo, 0, n // vec).with_range(v, 0, vec)
            pts = [inner.simplify(E.substitute(p, {E.key(lvar): lo * vec + v})) for p in points]
            at0 = [E.substitute(p, {E.key(v): ir.const(0, "int32")}) for p in pts]
            last = len(pts) - 2
            ok = all(inner.prove(p == p0) for k, (p, p0) in enumerate(zip(pts, at0)) if k != last)
            if ok and inner.prove(pts[last] == at0[last] + v):
                return vec, lo, v, pts, inner
        vec //= 2
    return None


@dataclass
class _Vector:
    """One vectorized access: the tensor, lane-0 indices and the bytes it moves."""

    tensor: object
    indices: list  # the access's indices (with v)
    first: list  # indices of lane 0
    nbytes: int
    local: object = None  # the local array holding the lanes
    node: object = None  # the TensorStore (stores)


@dataclass
class VectorSite:
    """The vector form of a lane body (see the module docstring)."""

    pre: list
    lanes: object  # the lane body on local arrays (v free; scalar global accesses unguarded)
    post: list
    allocs: list
    aligned: dict = field(default_factory=dict)  # global tensor handle -> (tensor, bytes)

    def condition(self):
        """The block-uniform test that global base pointers are aligned, or None."""
        conds = [
            _tirx.call_extern(IS_ALIGNED, t.data, ir.const(nbytes, "int32"), ty="bool")
            for t, nbytes in self.aligned.values()
        ]
        if not conds:
            return None
        return _tirx.all(*conds) if len(conds) > 1 else conds[0]

    def stmt(self, v, vec, guard=None, loc=ir.UNKNOWN_LOC):
        """``pre; for v (unrolled): guard(lanes); post`` as one statement."""
        lanes = guard(self.lanes) if guard is not None else self.lanes
        body = [for_(v, vec, lanes, ir.ForKind.UNROLLED, loc=loc)] if lanes is not None else []
        out = list(self.pre) + body + list(self.post)
        return out[0] if len(out) == 1 else ir.SeqStmt(out)


class _Scan:
    """Accesses of a lane body in evaluation order, variables it binds, tensors it escapes."""

    def __init__(self):
        self.events = []  # (kind "load"/"store", node, top-level?)
        self.bound = set()
        self.opaque = set()

    def stmt(self, s, top):
        if isinstance(s, ir.SeqStmt):
            for c in s.seq:
                self.stmt(c, top)
        elif isinstance(s, ir.TensorStore):
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
            self.events.append(("store", s, top))
        elif isinstance(s, ir.Bind):
            self.bound.add(s.var.__chandle__())
            self.expr(s.value)
        elif isinstance(s, ir.If):
            self.expr(s.condition)
            self.stmt(s.then_case, False)
            if s.else_case is not None:
                self.stmt(s.else_case, False)
        elif isinstance(s, ir.For):
            self.bound.add(s.var.__chandle__())
            self.expr(s.begin)
            self.expr(s.end)
            self.stmt(s.body, False)
        elif isinstance(s, ir.While):
            self.expr(s.condition)
            self.stmt(s.body, False)
        elif isinstance(s, ir.Evaluate) and not _is_tile_op(s):
            self.expr(s.value)
        else:  # tile ops (their lowering reads the operands as written), anything else:
            # every tensor it touches stays scalar
            self.expr(s)
            for kind in (ir.TensorLoad, ir.TensorStore, ir.TensorRegion):
                for x in E.collect(s, kind):
                    tensor = x.dest if kind is ir.TensorStore else x.source
                    self.opaque.add(tensor.__chandle__())

    def expr(self, e):
        def call(x):
            if getattr(x.op, "name", "") == "tirx.address_of":
                self.opaque.add(x.args[0].source.__chandle__())
                return tvm_ffi.WalkResult.SKIP
            if getattr(x.op, "name", "") == "tirx.call_extern":
                for arg in x.args[1:]:  # pointers into tensors escape to the callee
                    for load in E.collect(arg, ir.TensorLoad):
                        self.opaque.add(load.source.__chandle__())
            return None

        def load(x):
            self.events.append(("load", x, None))

        def let(x):
            self.bound.add(x.var.__chandle__())

        tvm_ffi.structural_walk(
            e,
            [(ir.Call, call), (ir.TensorLoad, load), (ir.prim.expr.Let, let)],
            order="pre",
        )


def _flat(indices, shape):
    flat = None
    for i, extent in zip(indices, shape):
        flat = i if flat is None else flat * extent + i
    return flat


class _Vectorizer:
    def __init__(self, v, vec, ctx):
        self.v, self.vec, self.ctx = v, vec, ctx
        self.zero = ir.const(0, "int32")

    def qualifies(self, tensor, indices, bound) -> _Vector | None:
        """A :class:`_Vector` when ``tensor[indices]`` can be one vector access."""
        if not (is_global(tensor) or is_shared(tensor)) or not tensor.ty.has_default_layout:
            return None
        if not vectorizable(tensor):  # a global tensor with a storage layout
            return None
        bits = _bits(tensor)
        if bits % 8 or self.vec * bits // 8 not in _WIDTHS:
            return None
        for i in indices:
            if E.collect(i, ir.TensorLoad):
                return None
            if any(x.__chandle__() in bound for x in E.free_vars(i)):
                return None
        ctx, v = self.ctx, self.v
        first = [ctx.simplify(E.substitute(i, {E.key(v): self.zero})) for i in indices]
        for i, i0 in zip(indices[:-1], first[:-1]):
            if uses_any(i, [v]) and not ctx.prove(i == i0):
                return None
        if not ctx.prove(indices[-1] == first[-1] + v):
            return None
        shape = list(tensor.ty.shape)
        if not ctx.prove(_flat(first, shape) % self.vec == 0):
            return None
        if not ctx.prove(shape[-1] % self.vec == 0):
            return None
        return _Vector(tensor, list(indices), first, self.vec * bits // 8)

    def local(self, tensor):
        name = f"{tensor.name}_vec{next(_NAMES)}"
        ty = TensorType([self.vec], str(tensor.ty.dtype), scope="local", align=VEC_BYTES)
        return ir.Var(name, ty)

    def run(self, body) -> VectorSite | None:
        scan = _Scan()
        scan.stmt(body, True)
        loads, stores = self._select(scan)
        if not loads and not stores:
            return None
        site = VectorSite([], None, [], [])
        direct = self._direct(body, loads, stores, site)
        if direct is not None:
            return direct
        for vl in loads:
            vl.local = self.local(vl.tensor)
            site.allocs.append(vl.local)
            site.pre.append(self._load(vl))
            self._need(site, vl)

        def map_loads(node):
            def load(x):
                for vl in loads:
                    if x.source.same_as(vl.tensor) and _same(x.indices, vl.indices):
                        return ir.TensorLoad(vl.local, [self.v])
                return x

            return tvm_ffi.structural_map(node, [(ir.TensorLoad, load)])

        lanes = []
        for s in _top_level(body):
            vs = next((x for x in stores if x.node.same_as(s)), None) if stores else None
            if vs is None:
                lanes.append(map_loads(s))
                continue
            vs.local = self.local(vs.tensor)
            site.allocs.append(vs.local)
            lanes.append(ir.TensorStore(vs.local, [self.v], map_loads(s.value), loc=s.loc))
            site.post.append(self._store(vs))
            self._need(site, vs)
        site.lanes = lanes[0] if len(lanes) == 1 else ir.SeqStmt(lanes)
        return site

    def _select(self, scan):
        """(vectorized loads, vectorized stores) by the ordering rules of the docstring."""
        by_tensor = {}
        for kind, node, top in scan.events:
            tensor = node.source if kind == "load" else node.dest
            if not (is_global(tensor) or is_shared(tensor)):
                continue
            by_tensor.setdefault(tensor.__chandle__(), []).append((kind, node, top))
        loads, stores = [], []
        for handle, events in by_tensor.items():
            if handle in scan.opaque:
                continue
            kinds = [k for k, _, _ in events]
            first_store = kinds.index("store") if "store" in kinds else len(kinds)
            last_load = max((k for k, x in enumerate(kinds) if x == "load"), default=-1)
            if last_load < first_store:  # every load precedes every store
                for _kind, node, _ in events[:first_store]:
                    vl = self.qualifies(node.source, list(node.indices), scan.bound)
                    if vl is not None and not any(
                        vl.tensor.same_as(o.tensor) and _same(vl.indices, o.indices) for o in loads
                    ):
                        loads.append(vl)
            if first_store == len(kinds) or last_load > first_store:
                continue
            cand = []
            for _kind, node, top in events[first_store:]:
                vs = self.qualifies(node.dest, list(node.indices), scan.bound) if top else None
                if vs is None:
                    cand = None
                    break
                vs.node = node
                cand.append(vs)
            stores.extend(cand or [])
        return loads, stores

    def _need(self, site, vx):
        if is_global(vx.tensor):
            key = vx.tensor.__chandle__()
            old = site.aligned.get(key, (vx.tensor, 0))[1]
            site.aligned[key] = (vx.tensor, max(old, vx.nbytes))

    def _pred(self, vx):
        return in_bounds(vx.tensor, vx.first, self.ctx, {})

    def _load(self, vl):
        dst = _addr(vl.local, [self.zero])
        stmt = vector_call(COPY_VEC, vl.nbytes, dst, _addr(vl.tensor, vl.first))
        pred = self._pred(vl)
        return stmt if pred is None else ir.If(pred, stmt, vector_call(ZERO_VEC, vl.nbytes, dst))

    def _store(self, vs):
        src = _addr(vs.local, [self.zero])
        stmt = vector_call(COPY_VEC, vs.nbytes, _addr(vs.tensor, vs.first), src)
        pred = self._pred(vs)
        return stmt if pred is None else ir.If(pred, stmt, None)

    def _direct(self, body, loads, stores, site):
        """A lane that only copies one vectorized load to one vectorized store: one copy."""
        if not isinstance(body, ir.TensorStore) or len(stores) != 1 or len(loads) != 1:
            return None
        vs, vl = stores[0], loads[0]
        value = body.value
        if not (isinstance(value, ir.TensorLoad) and value.source.same_as(vl.tensor)):
            return None
        if str(vs.tensor.ty.dtype) != str(vl.tensor.ty.dtype):
            return None
        dst = _addr(vs.tensor, vs.first)
        stmt = vector_call(COPY_VEC, vs.nbytes, dst, _addr(vl.tensor, vl.first))
        pred = self._pred(vl)
        if pred is not None:  # a global source outside the tensor: zeros (tile copies) ...
            zero = None if is_global(vs.tensor) else vector_call(ZERO_VEC, vs.nbytes, dst)
            stmt = ir.If(pred, stmt, zero)  # ... but global -> global copies skip the vector
        pred = self._pred(vs)
        if pred is not None:
            stmt = ir.If(pred, stmt, None)
        site.pre.append(stmt)
        self._need(site, vs)
        self._need(site, vl)
        return site


def _same(a, b) -> bool:
    return len(a) == len(b) and all(E.same_expr(x, y) for x, y in zip(a, b))


def _top_level(body):
    if isinstance(body, ir.SeqStmt):
        out = []
        for s in body.seq:
            out.extend(_top_level(s))
        return out
    return [body]


def vectorize_lanes(body, v, vec, ctx) -> VectorSite | None:
    """The vector form of lane body ``body`` (lane variable ``v`` in ``[0, vec)``), or None.

    ``ctx`` must carry the ranges of ``v`` and of every enclosing loop and thread
    variable. None when no access of ``body`` qualifies (see the module docstring).
    """
    if vec <= 1:
        return None
    return _Vectorizer(v, vec, ctx).run(body)


def only_replica0(stmt, is_replica0):
    """Global/shared stores and side effects of ``stmt`` run in replica 0 only.

    A replicated layout runs each iteration in several threads (replicas); they compute
    the same values, so one of them writing memory (or applying an atomic, printing) is
    enough, and memory is written once. Register (fragment/local) stores run everywhere:
    every replica needs its copy.
    """

    def store(x):
        if is_global(x.dest) or is_shared(x.dest):
            return ir.If(is_replica0, x, None)
        return x

    def evaluate(x):
        if is_vector_call(x) and not (
            is_global(vector_call_dst(x)) or is_shared(vector_call_dst(x))
        ):
            return x
        if isinstance(x.value, ir.IntImm):
            return x
        return ir.If(is_replica0, x, None)

    return tvm_ffi.structural_map(stmt, [(ir.TensorStore, store), (ir.Evaluate, evaluate)])


def with_fallback(site: VectorSite, vector_stmt, scalar_stmt):
    """``vector_stmt`` when the site needs no runtime test, else the aligned/scalar branch."""
    cond = site.condition()
    return vector_stmt if cond is None else ir.If(cond, vector_stmt, scalar_stmt)

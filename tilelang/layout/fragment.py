"""``Fragment``: a register layout, logical index -> (thread, local register index).

A fragment distributes the elements of a logical tile over the threads of a block.
Each element ``x`` lives in thread ``forward_thread(x, rep)`` at register
``forward_index(x)``.  With ``replicate = R > 1`` every element is held by ``R``
threads, one per replica ``rep in [0, R)``; the local index does not depend on ``rep``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm_tirx import sym
from tvm_tirx.ir import Range, Var

from . import expr as E
from .layout import Layout, _as_index_list, _extent_equal, _shape_repr

_REP_NAME = "rep"


def _collect_splits(node, out: list) -> None:
    """Flatten an iter-map result into ``(var, lower_factor, extent)`` triples."""
    if isinstance(node, sym.IterSumExpr):
        for arg in node.args:
            _collect_splits(arg, out)
        return
    if not isinstance(node, sym.IterSplitExpr):
        raise ValueError(f"unexpected iter-map node {type(node).__name__}")
    source = node.source.source
    lower, extent = E.as_const_int(node.lower_factor), E.as_const_int(node.extent)
    if lower is None or extent is None:
        raise ValueError("symbolic iterator splits are not supported")
    if isinstance(source, Var):
        out.append((source, lower, extent))
    elif lower == 1 and extent == E.as_const_int(node.source.extent):
        _collect_splits(source, out)
    else:
        raise ValueError("thread expression splits a fused iterator")


def _thread_splits(thread, ranges) -> list[tuple[Var, int, int]]:
    iters = {v: Range(0, E.as_expr(ext)) for v, ext in ranges}
    for level in ("surjective", None):
        result = sym.detect_iter_map([thread], iters, True, level)
        if not result.errors and len(result.indices) == 1:
            splits: list = []
            _collect_splits(result.indices[0], splits)
            return splits
    raise ValueError(f"thread expression {thread} is not an affine iterator map")


def _unused_fields(var: Var, extent: int, used: list[tuple[int, int]]) -> list:
    """Bit fields ``(var // lower) % size`` of ``var`` not covered by ``used`` splits."""
    fields, cursor = [], 1
    for lower, size in sorted(used):
        if lower % cursor:
            raise ValueError(f"overlapping use of {var.name} in the thread expression")
        if lower > cursor:
            fields.append(((var // cursor) % (lower // cursor), lower // cursor))
        cursor = lower * size
    if extent % cursor:
        raise ValueError(f"thread expression does not split {var.name} evenly")
    if cursor < extent:
        fields.append((var // cursor, extent // cursor))
    return fields


class Fragment(Layout):
    """A thread-distributed register layout.

    Parameters
    ----------
    shape : sequence of int
        Logical tile shape.
    forward_fn : callable, optional
        ``forward_fn(*vars[, rep]) -> (thread, index)``; alternative to the two below.
    forward_thread_fn : callable, optional
        ``forward_thread_fn(*vars[, rep]) -> thread`` (``rep`` passed when ``replicate > 1``).
    replicate : int
        Number of threads holding each element.
    forward_index_fn : callable, optional
        ``forward_index_fn(*vars) -> index or [index, ...]``; when omitted the local index
        is inferred as the flattened part of the logical index the thread does not use.
    """

    def __init__(
        self,
        shape,
        forward_fn=None,
        forward_thread_fn=None,
        replicate: int = 1,
        forward_index_fn=None,
    ):
        shape = E.normalize_shape(shape)
        if not E.is_static(shape):
            raise ValueError(f"Fragment shape must be static, got {_shape_repr(shape)}")
        if not isinstance(replicate, int | np.integer) or isinstance(replicate, bool):
            raise TypeError(f"replicate must be an int, got {type(replicate).__name__}")
        if replicate < 1:
            raise ValueError(f"replicate must be >= 1, got {replicate}")
        variables = E.fresh_vars(len(shape))
        rep = Var(_REP_NAME, E.INDEX_DTYPE)
        extra = [rep] if replicate > 1 else []
        if forward_fn is not None:
            if forward_thread_fn is not None or forward_index_fn is not None:
                raise ValueError("pass either forward_fn or forward_thread_fn/forward_index_fn")
            result = forward_fn(*variables, *extra)
            if not isinstance(result, tuple | list) or len(result) != 2:
                raise ValueError("forward_fn must return a (thread, index) pair")
            thread, index = result
            index = _as_index_list(index, "forward_fn index")
        else:
            if forward_thread_fn is None:
                raise ValueError("Fragment needs forward_fn or forward_thread_fn")
            thread = forward_thread_fn(*variables, *extra)
            index = None
            if forward_index_fn is not None:
                index = _as_index_list(forward_index_fn(*variables), "forward_index_fn")
        self._setup_fragment(shape, variables, index, thread, int(replicate), rep, None)

    @classmethod
    def from_parts(
        cls,
        shape,
        forward_vars: Sequence[Var],
        forward_index,
        forward_thread,
        replicate: int = 1,
        rep_var: Var | None = None,
        thread_range=None,
    ) -> Fragment:
        """Build a Fragment from explicit variables and expressions (no callbacks)."""
        fragment = object.__new__(Fragment)
        rep_var = rep_var if rep_var is not None else Var(_REP_NAME, E.INDEX_DTYPE)
        index = None if forward_index is None else _as_index_list(forward_index, "forward_index")
        fragment._setup_fragment(
            E.normalize_shape(shape),
            list(forward_vars),
            index,
            forward_thread,
            int(replicate),
            rep_var,
            thread_range,
        )
        return fragment

    def _setup_fragment(self, shape, variables, index, thread, replicate, rep, thread_range):
        self._rep = rep
        self._replicate = replicate
        self._thread_range = thread_range
        self._thread_size = None
        self._shape, self._vars = list(shape), list(variables)
        thread = E.as_expr(thread, "forward thread")
        self._check_free_vars([thread], "forward thread", extra=[rep])
        analyzer = E.make_analyzer(self._thread_ranges())
        self._thread = analyzer.simplify(thread)
        if index is None:
            index = [self._infer_index()]
        for expr in index:
            if E.uses_var(E.as_expr(expr), rep):
                raise ValueError(f"forward index {expr} must not depend on the replica variable")
        self._setup(shape, variables, index)

    def _thread_ranges(self):
        return self._ranges() + [(self._rep, self._replicate)]

    def _infer_index(self):
        try:
            splits = _thread_splits(self._thread, self._thread_ranges())
        except ValueError as err:
            raise ValueError(
                f"Fragment: forward_thread {self._thread} is not a clean split of the index "
                f"({err}), so the register index cannot be inferred from it: write the thread "
                "as a sum of splits (i // a % b * c + ...) or pass forward_index_fn"
            ) from None
        flat, fields = E.as_expr(0), []
        for var, extent in self._ranges():
            used = [(lo, ext) for v, lo, ext in splits if E.key(v) == E.key(var)]
            fields.extend(_unused_fields(var, extent, used))
        for field, size in fields:
            flat = flat * size + field
        return flat

    # ----------------------------------------------------------------- accessors
    @property
    def thread(self):
        """The thread expression (upstream property name)."""
        return self._thread

    @property
    def forward_thread(self):
        """The thread expression (upstream field name)."""
        return self._thread

    def get_forward_thread(self):
        """The thread expression over the forward variables and the replica variable."""
        return self._thread

    def get_replicate(self) -> int:
        """How many threads hold each logical element."""
        return self._replicate

    @property
    def replicate_size(self) -> int:
        """Alias of :meth:`get_replicate` (upstream field name)."""
        return self._replicate

    def get_replicate_var(self) -> Var | None:
        """The replica variable, or None when ``replicate == 1``."""
        return self._rep if self._replicate > 1 else None

    def get_forward_vars(self) -> list[Var]:
        """Forward variables; as upstream, the replica variable comes first when replicated."""
        return ([self._rep] if self._replicate > 1 else []) + list(self._vars)

    def get_thread_size(self) -> int:
        """Number of threads the fragment spans (max thread + 1)."""
        if self._thread_size is None:
            lo, hi = E.bounds(self._thread, self._thread_ranges())
            if lo < 0:
                raise ValueError(f"thread expression {self._thread} can be negative")
            self._thread_size = hi + 1
        return self._thread_size

    def get_local_size(self) -> int:
        """Number of register slots per thread (product of the output shape)."""
        return int(E.prod(self.get_output_shape()))

    def get_thread_range(self):
        """``(begin, extent)`` of the bound thread range, or None."""
        return self._thread_range

    @property
    def thread_range(self):
        """Alias of :meth:`get_thread_range`."""
        return self._thread_range

    def bind_thread_range(self, begin, extent=None) -> Fragment:
        """A copy bound to threads ``[begin, begin + extent)`` (a Range is accepted too)."""
        if extent is None:
            if isinstance(begin, Range):
                begin, extent = begin.begin, begin.extent
            elif isinstance(begin, tuple | list) and len(begin) == 2:
                begin, extent = begin
            else:
                raise ValueError("bind_thread_range needs (begin, extent) or a Range")
        begin = E.as_const_int(begin) if E.as_const_int(begin) is not None else begin
        extent = E.as_const_int(extent) if E.as_const_int(extent) is not None else extent
        return Fragment.from_parts(
            self._shape,
            self._vars,
            self._index,
            self._thread,
            self._replicate,
            self._rep,
            (begin, extent),
        )

    make_thread_range = bind_thread_range

    def is_completed_replicated(self) -> bool:
        """Whether the thread is exactly the replica variable (every thread holds all)."""
        return E.same_expr(self._thread, self._rep)

    # ----------------------------------------------------------------- mapping
    def map_forward_index(self, indices, analyzer=None) -> list:
        """Local register index of ``indices`` (a leading replica index is accepted and dropped)."""
        indices = list(indices)
        if self._replicate > 1 and len(indices) == self.input_dim + 1:
            indices = indices[1:]
        return super().map_forward_index(indices, analyzer)

    def map_forward_thread(self, indices, rep=0, analyzer=None):
        """Thread holding logical element ``indices`` for replica ``rep``."""
        indices = list(indices)
        if len(indices) != self.input_dim:
            raise ValueError(
                f"indices has {len(indices)} entries, the fragment has {self.input_dim} inputs"
            )
        mapping = {E.key(v): E.as_expr(x, "indices") for v, x in zip(self._vars, indices)}
        mapping[E.key(self._rep)] = E.as_expr(rep, "rep")
        analyzer = analyzer or sym.Analyzer()
        return analyzer.simplify(E.substitute(self._thread, mapping))

    def forward_thread_point(self, *indices: int, rep: int = 0) -> int:
        """Evaluate the thread of one integer point."""
        points = [np.array([int(x)], dtype=np.int64) for x in indices] + [np.array([int(rep)])]
        (value,) = E.evaluate_all([self._thread], self._vars + [self._rep], points)
        return int(value[0])

    def thread_table(self) -> np.ndarray:
        """Threads of every element, shaped ``(replicate, *shape)``."""
        points = E.grid([self._replicate] + self._shape)
        (values,) = E.evaluate_all([self._thread], [self._rep] + self._vars, points)
        return values.reshape(self._replicate, *self._shape)

    # ----------------------------------------------------------------- algebra
    def _remapped(self, shape, variables, mapping, index_extra=None, thread_extra=None):
        """(shape, vars, index, thread) after substituting ``mapping`` and adding offsets."""
        index = [E.substitute(e, mapping) for e in self._index]
        thread = E.substitute(self._thread, mapping)
        if index_extra is not None:
            index = [index[0] + index_extra]
        if thread_extra is not None:
            thread = thread + thread_extra
        return shape, variables, index, thread

    def repeat(self, repeats, repeat_on_thread: bool = False, lower_dim_first: bool = True):
        """Tile the fragment ``repeats[d]`` times along each input dimension ``d``.

        The tile number (row-major over the repeat grid when ``lower_dim_first``, else
        first-dimension-fastest) is added to the thread (``repeat_on_thread``: new threads
        ``thread + thread_size * tile``) or to the single local index
        (``index + local_size * tile``).
        """
        if isinstance(repeats, int | np.integer):
            repeats = [int(repeats)]
        repeats = [int(r) if E.as_const_int(r) is not None else r for r in repeats]
        if len(repeats) != self.input_dim:
            raise ValueError(f"repeats has {len(repeats)} entries, fragment has {self.input_dim}")
        for axis, r in enumerate(repeats):
            if not isinstance(r, int) or r < 1:
                raise ValueError(f"repeats[{axis}] must be a positive int, got {r!r}")
        shape = [d * r for d, r in zip(self._shape, repeats)]
        variables = E.fresh_vars(self.input_dim)
        mapping = {E.key(o): n % d for o, n, d in zip(self._vars, variables, self._shape)}
        order = range(self.input_dim - 1, -1, -1) if lower_dim_first else range(self.input_dim)
        tile, stride = E.as_expr(0), 1
        for axis in order:
            tile = tile + (variables[axis] // self._shape[axis]) * stride
            stride *= repeats[axis]
        if repeat_on_thread:
            parts = self._remapped(
                shape, variables, mapping, thread_extra=self.get_thread_size() * tile
            )
        else:
            if self.output_dim != 1:
                raise ValueError("repeat along the local index needs a 1-d local index")
            parts = self._remapped(
                shape, variables, mapping, index_extra=self.get_output_shape()[0] * tile
            )
        return Fragment.from_parts(*parts, self._replicate, self._rep)

    def replicate(self, replicate: int) -> Fragment:
        """Replicate the fragment ``replicate`` more times over new threads."""
        if not isinstance(replicate, int | np.integer) or replicate < 1:
            raise ValueError(f"replicate must be a positive int, got {replicate!r}")
        rep = Var(_REP_NAME, E.INDEX_DTYPE)
        mapping = {E.key(self._rep): rep % self._replicate}
        thread = E.substitute(self._thread, mapping)
        thread = thread + self.get_thread_size() * (rep // self._replicate)
        return Fragment.from_parts(
            self._shape, self._vars, self._index, thread, self._replicate * int(replicate), rep
        )

    def condense_rep_var(self) -> Fragment:
        """Drop the bits of the replica variable that the thread expression ignores."""
        if self._replicate == 1:
            return self
        splits = _thread_splits(self._thread, self._thread_ranges())
        used = sorted((lo, ext) for v, lo, ext in splits if E.key(v) == E.key(self._rep))
        rep = Var(_REP_NAME, E.INDEX_DTYPE)
        value, stride = E.as_expr(0), 1
        for lower, extent in used:
            value = value + ((rep // stride) % extent) * lower
            stride *= extent
        thread = E.substitute(self._thread, {E.key(self._rep): value})
        return Fragment.from_parts(self._shape, self._vars, self._index, thread, stride, rep)

    def reshape(self, shape) -> Fragment:
        """The same distribution viewed through a row-major reshape of the logical tile."""
        if [E.as_const_int(d) for d in shape] == self._shape:
            return self
        shape, variables, mapping = self._reshape_mapping(shape)
        parts = self._remapped(shape, variables, mapping)
        return Fragment.from_parts(*parts, self._replicate, self._rep, self._thread_range)

    def expand(self, leading_shape):
        """Not defined for fragments (upstream only expands memory layouts)."""
        raise NotImplementedError("Fragment.expand is not supported; expand the logical tile")

    def as_layout(self) -> Layout:
        """The fragment as a plain Layout: ``(*logical, rep) -> (*local, thread)``."""
        return Layout.from_index(
            self._shape + [self._replicate],
            self._vars + [self._rep],
            self._index + [self._thread],
        )

    def inverse(self) -> Layout:
        """Inverse of :meth:`as_layout`: ``(*local, thread) -> (*logical, rep)``."""
        return self.as_layout().inverse()

    # ----------------------------------------------------------------- comparison
    def is_equal(self, other: Layout, skip_index: bool = False) -> bool:
        """Same shape, replication, thread map, local map and bound thread range."""
        if not isinstance(other, Fragment):
            return False
        if self.input_dim != other.input_dim or self._replicate != other._replicate:
            return False
        if not all(_extent_equal(a, b) for a, b in zip(self._shape, other._shape)):
            return False
        if self._thread_range is not None and other._thread_range is not None:
            if not all(
                _extent_equal(a, b) for a, b in zip(self._thread_range, other._thread_range)
            ):
                return False
        if self.get_thread_size() != other.get_thread_size():
            return False
        mapping = {E.key(o): s for o, s in zip(other._vars, self._vars)}
        mapping[E.key(other._rep)] = self._rep
        analyzer = E.make_analyzer(self._thread_ranges())
        theirs = E.substitute(other._thread, mapping)
        if not (
            E.same_expr(self._thread, theirs) or analyzer.can_prove_equal(self._thread, theirs)
        ):
            return False
        if skip_index:
            return self.get_output_shape() == other.get_output_shape()
        return Layout.is_equal(self, other)

    # ----------------------------------------------------------------- printing
    def __repr__(self) -> str:
        try:
            out, threads = _shape_repr(self.get_output_shape()), self.get_thread_size()
        except ValueError:
            out, threads = "[?]", "?"
        text = (
            f"Fragment({_shape_repr(self._shape)} -> {out}, replicate: {self._replicate}, "
            f"thread: {threads}, forward_thread: {self._thread}, "
            f"forward_index: [{', '.join(str(e) for e in self._index)}]"
        )
        if self._thread_range is not None:
            text += f", thread_range: {self._thread_range}"
        return text + ")"

    def format_table(self, rep: int = 0) -> str:
        """Text grid ``T<thread>:<local>`` of a 2-d fragment (or a 1-d one as one row)."""
        if self.input_dim not in (1, 2):
            raise ValueError("format_table supports 1-d and 2-d fragments")
        rows, cols = (1, self._shape[0]) if self.input_dim == 1 else self._shape
        threads = self.thread_table()[rep].reshape(rows, cols)
        points = E.grid(self._shape)
        local = E.evaluate_all(self._index, self._vars, points)
        flat = local[0].copy()
        for part, size in zip(local[1:], self.get_output_shape()[1:]):
            flat = flat * size + part
        flat = flat.reshape(rows, cols)
        cells = [[f"T{threads[r, c]}:{flat[r, c]}" for c in range(cols)] for r in range(rows)]
        width = max(len(cell) for row in cells for cell in row)
        return "\n".join(" ".join(cell.rjust(width) for cell in row) for row in cells)

    def print(self, table: bool = False) -> None:
        """Print the fragment (and its thread/register grid when ``table``)."""
        print(repr(self))
        if table:
            print(self.format_table())


__all__ = ["Fragment"]

"""``Layout``: a map from a logical index to a physical index.

A layout over an input shape ``(d0, ..., dn-1)`` holds fresh int32 variables
``i, j, k, ...`` (one per input dimension, ranging over ``[0, d)``) and a list of TIRx
``PrimExpr`` giving each physical (output) coordinate in terms of those variables.
Compiler passes can substitute loop variables for the forward variables with
``map_forward_index``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm_tirx import sym
from tvm_tirx.ir import Range, Var
from tvm_tirx.ir import prim as P

from . import expr as E

#: Inputs at most this large are checked exhaustively with numpy (inverse validation).
_ENUMERATION_LIMIT = 1 << 20


def _as_index_list(index, what: str) -> list:
    if E.is_expr(index) or isinstance(index, int | np.integer):
        return [E.as_expr(index, what)]
    if isinstance(index, Sequence) or hasattr(index, "__iter__"):
        items = list(index)
        if not items:
            raise ValueError(f"{what} returned no index expressions")
        return [E.as_expr(e, f"{what}[{n}]") for n, e in enumerate(items)]
    raise TypeError(f"{what} must return a PrimExpr or a list of them, got {type(index).__name__}")


def _shape_repr(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _extent_equal(a, b) -> bool:
    ca, cb = E.as_const_int(a), E.as_const_int(b)
    if ca is not None or cb is not None:
        return ca == cb
    return sym.Analyzer().can_prove_equal(E.as_expr(a), E.as_expr(b))


class Layout:
    """A logical-to-physical index map.

    Parameters
    ----------
    shape : sequence of int or PrimExpr
        Extents of the logical (input) index space.
    forward_fn : callable
        ``forward_fn(*vars)`` returns one PrimExpr or a list of PrimExprs: the physical
        index of the logical element ``vars``.

    Examples
    --------
    >>> row_major = Layout([4, 8], lambda i, j: i * 8 + j)
    >>> row_major.get_output_shape()
    [32]
    """

    def __init__(self, shape, forward_fn):
        if not callable(forward_fn):
            raise TypeError(f"forward_fn must be callable, got {type(forward_fn).__name__}")
        shape = E.normalize_shape(shape)
        variables = E.fresh_vars(len(shape))
        self._setup(shape, variables, _as_index_list(forward_fn(*variables), "forward_fn"))

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_index(cls, shape, forward_vars: Sequence[Var], forward_index) -> Layout:
        """Build a Layout from explicit variables and index expressions (no callback)."""
        layout = object.__new__(Layout)
        shape = E.normalize_shape(shape)
        if len(forward_vars) != len(shape):
            raise ValueError(
                f"forward_vars has {len(forward_vars)} variables for a {len(shape)}-d shape"
            )
        layout._setup(shape, list(forward_vars), _as_index_list(forward_index, "forward_index"))
        return layout

    def _setup(self, shape, variables, index) -> None:
        self._shape = list(shape)
        self._vars = list(variables)
        self._output_shape = None
        self._check_free_vars(index, "forward index")
        analyzer = E.make_analyzer(self._ranges())
        self._index = [analyzer.simplify(E.as_expr(e)) for e in index]

    def _ranges(self) -> list[tuple[Var, object]]:
        return list(zip(self._vars, self._shape))

    def _allowed_vars(self) -> set[int]:
        allowed = {E.key(v) for v in self._vars}
        for dim in self._shape:
            if E.is_expr(dim):
                allowed.update(E.key(v) for v in E.free_vars(dim))
        return allowed

    def _check_free_vars(self, exprs, what: str, extra=()) -> None:
        allowed = self._allowed_vars() | {E.key(v) for v in extra}
        for expr in exprs:
            for var in E.free_vars(E.as_expr(expr)):
                if E.key(var) not in allowed:
                    raise ValueError(
                        f"{what} {expr} uses variable {var.name!r}, which is not one of the "
                        "layout's forward variables"
                    )

    # ----------------------------------------------------------------- accessors
    def get_input_shape(self) -> list:
        """Extents of the logical index space (ints, or PrimExprs when symbolic)."""
        return list(self._shape)

    def get_output_shape(self) -> list:
        """Extents of the physical index box, from bound analysis of each output."""
        if self._output_shape is None:
            shape = []
            for axis, expr in enumerate(self._index):
                lo, hi = E.bounds(expr, self._ranges())
                if isinstance(lo, int) and lo < 0:
                    raise ValueError(f"output {axis} ({expr}) can be negative (min {lo})")
                extent = hi + 1
                if not isinstance(extent, int):
                    extent = E.simplify(extent)
                    const = E.as_const_int(extent)
                    extent = extent if const is None else const
                shape.append(extent)
            self._output_shape = shape
        return list(self._output_shape)

    def get_forward_vars(self) -> list[Var]:
        """The input variables the forward index is written in."""
        return list(self._vars)

    def get_forward_index(self) -> list:
        """The physical index expressions (one per output dimension)."""
        return list(self._index)

    @property
    def index(self) -> list:
        """Alias of :meth:`get_forward_index` (upstream name)."""
        return self.get_forward_index()

    @property
    def forward_index(self) -> list:
        """Alias of :meth:`get_forward_index` (upstream field name)."""
        return self.get_forward_index()

    @property
    def input_size(self) -> list:
        """Alias of :meth:`get_input_shape` (upstream field name)."""
        return self.get_input_shape()

    @property
    def input_dim(self) -> int:
        """Number of logical dimensions."""
        return len(self._shape)

    @property
    def output_dim(self) -> int:
        """Number of physical dimensions."""
        return len(self._index)

    def is_static(self) -> bool:
        """Whether every input extent is a constant."""
        return E.is_static(self._shape)

    # ----------------------------------------------------------------- mapping
    def map_forward_index(self, indices, analyzer: sym.Analyzer | None = None) -> list:
        """Substitute ``indices`` (ints or PrimExprs) for the forward variables.

        Extra leading indices (more than the input rank) are passed through unchanged,
        as upstream TileLang does.  The result is simplified (constant inputs give
        constant outputs).
        """
        indices = list(indices)
        if len(indices) < self.input_dim:
            raise ValueError(
                f"indices has {len(indices)} entries, the layout has {self.input_dim} inputs"
            )
        lead = len(indices) - self.input_dim
        mapping = {E.key(v): E.as_expr(x, "indices") for v, x in zip(self._vars, indices[lead:])}
        analyzer = analyzer or sym.Analyzer()
        mapped = [analyzer.simplify(E.substitute(e, mapping)) for e in self._index]
        return [E.as_expr(x) for x in indices[:lead]] + mapped

    def map_forward_offset(self, indices, analyzer: sym.Analyzer | None = None):
        """Row-major flattened physical offset of ``indices`` within the output box."""
        indices = list(indices)
        if len(indices) != self.input_dim:
            raise ValueError(f"indices must have {self.input_dim} entries, got {len(indices)}")
        coords = self.map_forward_index(indices, analyzer)
        flat = coords[0]
        for coord, extent in zip(coords[1:], self.get_output_shape()[1:]):
            flat = flat * extent + coord
        return (analyzer or sym.Analyzer()).simplify(flat)

    def __call__(self, *indices):
        return self.map_forward_index(indices)

    def forward_point(self, *indices: int) -> tuple[int, ...]:
        """Evaluate the forward map at one integer point."""
        if len(indices) != self.input_dim:
            raise ValueError(f"expected {self.input_dim} indices, got {len(indices)}")
        points = [np.array([int(x)], dtype=np.int64) for x in indices]
        values = E.evaluate_all(self._index, self._vars, points)
        return tuple(int(v[0]) for v in values)

    def forward_table(self) -> np.ndarray:
        """All outputs, shaped ``(*input_shape, output_dim)`` (static shapes only)."""
        self._require_static("forward_table")
        points = E.grid(self._shape)
        values = E.evaluate_all(self._index, self._vars, points)
        return np.stack(values, axis=-1).reshape(*self._shape, self.output_dim)

    def _require_static(self, what: str) -> None:
        if not self.is_static():
            raise ValueError(f"{what} needs a static input shape, got {_shape_repr(self._shape)}")

    def to_index_map(self):
        """The same map as a ``tvm_tirx.tirx.IndexMap``."""
        from tvm_tirx.tirx import IndexMap

        return IndexMap(self._vars, self._index, None)

    # ----------------------------------------------------------------- algebra
    def repeat(self, dim: int, factor: int) -> Layout:
        """Tile the layout ``factor`` times along input ``dim``.

        The result maps ``idx`` to ``[idx[dim] // extent] + self(idx with idx[dim] % extent)``.
        """
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if not isinstance(factor, int) or isinstance(factor, bool):
            raise TypeError(f"factor must be an int, got {type(factor).__name__}")
        if factor < 1:
            raise ValueError(f"factor must be >= 1, got {factor}")
        if self.input_dim == 0:
            raise ValueError("cannot repeat a 0-d layout")
        ndim = self.input_dim
        if not -ndim <= dim < ndim:
            raise ValueError(f"dim out of range: dim={dim}, ndim={ndim}")
        dim %= ndim
        if factor == 1:
            return self
        extent = self._shape[dim]
        shape = list(self._shape)
        shape[dim] = extent * factor
        variables = E.fresh_vars(ndim)
        mapping = {E.key(old): new for old, new in zip(self._vars, variables)}
        mapping[E.key(self._vars[dim])] = variables[dim] % extent
        index = [variables[dim] // extent] + [E.substitute(e, mapping) for e in self._index]
        return Layout.from_index(shape, variables, index)

    def expand(self, leading_shape) -> Layout:
        """Prepend dimensions that map identically to new leading output dimensions."""
        leading = E.normalize_shape(leading_shape, "leading_shape") if leading_shape else []
        if not leading:
            return self
        variables = E.fresh_vars(len(leading) + self.input_dim)
        mapping = {E.key(old): new for old, new in zip(self._vars, variables[len(leading) :])}
        index = list(variables[: len(leading)]) + [E.substitute(e, mapping) for e in self._index]
        return Layout.from_index(leading + self._shape, variables, index)

    def _reshape_mapping(self, shape):
        shape = E.normalize_shape(shape)
        analyzer = sym.Analyzer()
        if not analyzer.can_prove_equal(E.as_expr(E.prod(shape)), E.as_expr(E.prod(self._shape))):
            raise ValueError(
                f"cannot reshape {_shape_repr(self._shape)} to {_shape_repr(shape)}: "
                "element counts differ"
            )
        variables = E.fresh_vars(len(shape))
        flat = 0
        for var, extent in zip(variables, shape):
            flat = flat * extent + var
        mapping = {}
        stride = E.prod(self._shape)
        for old, extent in zip(self._vars, self._shape):
            stride = stride // extent
            mapping[E.key(old)] = (flat // stride) % extent
        return shape, variables, mapping

    def reshape(self, shape) -> Layout:
        """The same physical map viewed through a row-major reshape of the input."""
        if [E.as_const_int(d) for d in shape] == self._shape:
            return self
        shape, variables, mapping = self._reshape_mapping(shape)
        return Layout.from_index(shape, variables, [E.substitute(e, mapping) for e in self._index])

    # ----------------------------------------------------------------- inverse
    def inverse(self) -> Layout:
        """The inverse layout: physical index -> logical index.

        Works for layouts that are bijective onto their output box and are either affine
        (floordiv / floormod / multiply-add of the inputs, solved with TIRx's iter-map
        detection) or affine up to XOR swizzles of the form ``split(v) ^ other`` where
        ``split(v)`` is a power-of-two bit field of one input variable (as in all the
        swizzled shared-memory layouts).  Raises ValueError otherwise.
        """
        xors = _unique(E.collect_all(self._index, P.BitwiseXor))
        if not xors:
            return self._affine_inverse()
        return self._swizzle_inverse(xors)

    def _affine_inverse(self, index=None) -> Layout:
        index = self._index if index is None else index
        out_shape = self.get_output_shape()
        iters = {v: Range(0, E.as_expr(ext)) for v, ext in self._ranges()}
        result = sym.detect_iter_map(index, iters, True, "bijective")
        if result.errors or len(result.indices) != len(index):
            if not self.is_static():
                result = sym.detect_iter_map(index, iters, True, None)
            if result.errors or len(result.indices) != len(index):
                detail = "; ".join(str(e) for e in result.errors) or "not an affine map"
                raise ValueError(f"{self!r} is not invertible: {detail}")
        outputs = E.fresh_vars(len(index))
        solved = sym.inverse_affine_iter_map(result.indices, outputs)
        by_key = {E.key(var): expr for var, expr in solved.items()}
        backward = [by_key.get(E.key(v), E.as_expr(0)) for v in self._vars]
        return Layout.from_index(out_shape, outputs, backward)

    def _swizzle_inverse(self, xors) -> Layout:
        splits = []
        for node in xors:
            found = None
            for field, other in ((node.a, node.b), (node.b, node.a)):
                split = _bit_field(field, self._ranges())
                if split is not None and self._fits(other, split[2]):
                    found = (node, field, split)
                    break
            if found is None:
                raise ValueError(
                    f"{self!r} is not invertible: cannot interpret swizzle term {node} as a "
                    "power-of-two bit field XOR a value within its range"
                )
            splits.append(found)

        def unswizzle(node):
            for target, field, _ in splits:
                if E.same_expr(node, target):
                    return field
            return node

        plain = [E.replace_nodes(e, P.BitwiseXor, unswizzle) for e in self._index]
        try:
            base = self._affine_inverse(plain)
        except ValueError as err:
            raise ValueError(f"{self!r} is not invertible: unswizzled map: {err}") from None
        outputs = base.get_forward_vars()
        to_base = {E.key(v): e for v, e in zip(self._vars, base.get_forward_index())}
        corrected = list(base.get_forward_index())
        analyzer = E.make_analyzer(base._ranges())
        positions = [E.key(v) for v in self._vars]
        for target, _field, (var, lower, extent) in splits:
            position = positions.index(E.key(var))
            # var = high bits + swizzled field + low bits, each simplified on its own (the
            # simplifier does not look through XOR).
            current, span = corrected[position], lower * extent
            high = analyzer.simplify((current // span) * span)
            low = analyzer.simplify(current % lower)
            corrected[position] = high + low + E.substitute(target, to_base) * lower
        inverse = Layout.from_index(base.get_input_shape(), outputs, corrected)
        inverse._output_shape = list(self._shape)
        self._validate_inverse(inverse)
        return inverse

    def _fits(self, expr, extent: int) -> bool:
        try:
            lo, hi = E.bounds(expr, self._ranges())
        except ValueError:
            return False
        return isinstance(lo, int) and isinstance(hi, int) and lo >= 0 and hi < extent

    def _validate_inverse(self, inverse: Layout) -> None:
        if not self.is_static():
            raise ValueError(f"{self!r}: cannot validate a swizzle inverse for a symbolic shape")
        size = int(E.prod(self._shape))
        if size <= _ENUMERATION_LIMIT:
            points = E.grid(self._shape)
            outputs = E.evaluate_all(self._index, self._vars, points)
            back = E.evaluate_all(inverse.get_forward_index(), inverse.get_forward_vars(), outputs)
            ok = all(np.array_equal(b, p) for b, p in zip(back, points))
        else:
            from .proofs import prove_inverse

            ok = bool(prove_inverse(self, inverse))
        if not ok:
            raise ValueError(f"{self!r} is not invertible: the swizzle is not an involution")

    # ----------------------------------------------------------------- comparison
    def is_equal(self, other: Layout) -> bool:
        """Same input shape and provably equal forward index (variables matched by position)."""
        if not isinstance(other, Layout):
            raise TypeError(f"other must be a Layout, got {type(other).__name__}")
        if self.input_dim != other.input_dim or self.output_dim != other.output_dim:
            return False
        if not all(_extent_equal(a, b) for a, b in zip(self._shape, other._shape)):
            return False
        mapping = {E.key(o): s for o, s in zip(other._vars, self._vars)}
        analyzer = E.make_analyzer(self._ranges())
        for mine, theirs in zip(self._index, other._index):
            theirs = E.substitute(theirs, mapping)
            if not (E.same_expr(mine, theirs) or analyzer.can_prove_equal(mine, theirs)):
                return False
        return True

    # ----------------------------------------------------------------- printing
    def _vars_repr(self) -> str:
        return "(" + ", ".join(v.name for v in self._vars) + ")"

    def __repr__(self) -> str:
        try:
            out = _shape_repr(self.get_output_shape())
        except ValueError:
            out = "[?]"
        index = ", ".join(str(e) for e in self._index)
        return f"Layout({_shape_repr(self._shape)} -> {out}, {self._vars_repr()} -> [{index}])"

    def print(self) -> None:
        """Print :func:`repr` of the layout."""
        print(repr(self))


def _unique(nodes) -> list:
    kept = []
    for node in nodes:
        if not any(E.same_expr(node, k) for k in kept):
            kept.append(node)
    return kept


def _bit_field(expr, ranges) -> tuple[Var, int, int] | None:
    """Match ``expr`` as ``(v // lower) % extent`` of an input variable ``v``.

    Returns ``(v, lower, extent)`` when the field is a complete power-of-two bit field of
    ``v``'s range (so XOR-ing a smaller value into it stays inside the domain).
    """
    extents = {E.key(v): (v, E.as_const_int(ext)) for v, ext in ranges}
    modulus, lower = None, 1
    if isinstance(expr, P.FloorMod) and E.as_const_int(expr.b) is not None:
        modulus, expr = E.as_const_int(expr.b), expr.a
        if isinstance(expr, P.FloorDiv) and E.as_const_int(expr.b) is not None:
            lower, expr = E.as_const_int(expr.b), expr.a
    elif isinstance(expr, P.FloorDiv) and E.as_const_int(expr.b) is not None:
        lower, expr = E.as_const_int(expr.b), expr.a
        # (v % m) // lower is the field (v // lower) % (m // lower)
        if isinstance(expr, P.FloorMod) and E.as_const_int(expr.b) is not None:
            outer = E.as_const_int(expr.b)
            if outer % lower:
                return None
            modulus, expr = outer // lower, expr.a
    if not isinstance(expr, Var) or E.key(expr) not in extents:
        return None
    var, total = extents[E.key(expr)]
    if total is None or lower <= 0 or total % lower:
        return None
    extent = total // lower if modulus is None else modulus
    if extent <= 0 or extent & (extent - 1) or total % (lower * extent):
        return None
    return var, lower, extent


__all__ = ["Layout"]

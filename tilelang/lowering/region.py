"""Tensor regions: building them from what users write, and reading them in lowerings."""

from __future__ import annotations

from dataclasses import dataclass

from tvm_tirx import ir

from .. import errors


def is_tensor(value) -> bool:
    return isinstance(value, ir.Var) and hasattr(value.ty, "shape")


def make_region(tensor, begins, extents) -> ir.TensorRegion:
    """``tensor[begins : begins + extents]`` as a TensorRegion."""
    ranges = [ir.Range.from_min_extent(b, e) for b, e in zip(begins, extents)]
    return ir.TensorRegion(tensor, ranges, ir.TensorRegionType())


def full_region(tensor) -> ir.TensorRegion:
    shape = list(tensor.ty.shape)
    return make_region(tensor, [0] * len(shape), shape)


def region_extents(value):
    """Extents of a region-like value, or None for a tile start (``A[i, j]``)."""
    if isinstance(value, ir.TensorRegion):
        return [r.extent for r in value.region]
    if is_tensor(value):
        return list(value.ty.shape)
    return None


def _const(x):
    return x.value if isinstance(x, ir.IntImm) else x if isinstance(x, int) else None


def to_region(value, other_extents=None, what="operand") -> ir.TensorRegion:
    """Normalise a tensor, slice or tile start into a TensorRegion.

    A tile start ``A[i, j]`` takes its extents from the other operand of the op,
    aligned on the trailing dimensions (upstream TileLang's rule).
    """
    if isinstance(value, ir.TensorRegion):
        return value
    if is_tensor(value):
        return full_region(value)
    if isinstance(value, ir.TensorLoad):
        tensor = value.source
        begins = list(value.indices)
        if other_extents is None:
            return make_region(tensor, begins, [1] * len(begins))
        other = list(other_extents)
        rank = len(begins)
        while len(other) > rank and _const(other[0]) == 1:
            other.pop(0)
        if len(other) > rank:
            raise errors.TraceError(
                f"{what} {value} has {rank} dimensions but the other operand's tile "
                f"has extents {list(other_extents)}"
            )
        extents = [1] * (rank - len(other)) + other
        return make_region(tensor, begins, extents)
    raise errors.TraceError(f"{what} must be a tensor, a slice or a tile start, got {value!r}")


@dataclass
class RegionView:
    """A TensorRegion read for lowering: tensor, begins and extents."""

    tensor: ir.Var
    begins: list
    extents: list

    @classmethod
    def of(cls, region) -> RegionView:
        if is_tensor(region):
            region = full_region(region)
        return cls(
            region.source, [r.begin for r in region.region], [r.extent for r in region.region]
        )

    @property
    def dtype(self) -> str:
        return str(self.tensor.ty.dtype)

    @property
    def scope(self) -> str:
        return str(self.tensor.ty.scope)

    @property
    def shape(self):
        return list(self.tensor.ty.shape)

    @property
    def name(self) -> str:
        return self.tensor.name

    def nonunit_axes(self) -> list[int]:
        """Axes whose extent is not the constant 1."""
        return [i for i, e in enumerate(self.extents) if _const(e) != 1]

    def index(self, axis_values: dict[int, object]):
        """Indices of the element at offsets ``axis_values`` (missing axes at offset 0)."""
        return [b + axis_values[i] if i in axis_values else b for i, b in enumerate(self.begins)]

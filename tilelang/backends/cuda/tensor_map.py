"""TMA tensor maps (CUDA sm_90+): which copies one can express, and their host encoding.

A ``T.copy(global -> shared)`` of a 2-d shared tile becomes one or more TMA *boxes*
(``cp.async.bulk.tensor``) of a *tensor map* that describes the whole global tensor:

* the map (``CUtensorMap``, 128 bytes) is encoded on the host at every call by
  ``cuTensorMapEncodeTiled`` (TIRx's ``T.cuda.tensormap_encode_tiled``, lowered to the
  TIRx CUDA runtime's ``runtime.cuTensorMapEncodeTiled``) and reaches the kernel as a
  ``const __grid_constant__ CUtensorMap`` parameter (TIRx's device codegen does that for
  any ``T.Ptr(T.TensorMap())`` variable bound on the host and used by the kernel);
* its global dimensions are the tensor's shape, so a box that reaches past the tensor's
  end is zero-filled by the hardware (tails need no special code);
* its swizzle follows the shared tile's layout (:func:`plan_boxes`): a ``W``-byte swizzle
  (128B/64B/32B, ``tilelang.layout.swizzle``) stores the tile as column panels of ``W``
  bytes, each one box; an unswizzled (row-major) tile is one box wide.

:func:`plan_tma_copy` decides whether a copy can be a TMA copy (and why not);
:class:`TensorMapSpec` holds one map's encoding parameters (what ``cuTensorMapEncodeTiled``
receives, checked by the unit tests); :func:`host_encode_stmts` builds the host statements;
:func:`register_pipeline` registers the TIRx pipeline whose host side can hold tensor maps
in TIRx's C host code (:func:`retype_tensor_maps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm_ffi
from tvm_tirx import ir, tirx
from tvm_tirx.backend.cuda import op as cuda_op

from ...layout import expr as E
from ...layout.swizzle import SwizzleMode, dtype_bits
from ...lowering.global_layouts import vectorizable
from ...lowering.region import RegionView, _const

#: Largest extent of one box dimension (``cuTensorMapEncodeTiled``: boxDim[i] <= 256).
MAX_BOX = 256
#: Function attribute: the TMA decisions of the pipelining stage, one line per copy.
ATTR_TMA = "tl.tma"
#: Name of the TIRx pipeline registered by :func:`register_pipeline`.
PIPELINE_NAME = "tilelang_cuda_tma"
#: Host helper (defined in :data:`HOST_HELPERS`) giving per-thread storage for map ``i``.
SLOT_FUNC = "__tl_tensor_map_slot"
MAX_MAPS = 32

# C host code: per-thread, 64-byte aligned storage for the tensor maps of one call. The
# maps are encoded right before the launch that copies them into the kernel parameters.
# (GNU spellings, valid in C and C++: TIRx's fallback builds the host code with g++.)
HOST_HELPERS = f"""
typedef struct {{ unsigned long long words[16]; }} __attribute__((aligned(64))) __tl_tensor_map_t;
static __thread __tl_tensor_map_t __tl_tensor_maps[{MAX_MAPS}];
static void* {SLOT_FUNC}(int32_t i) {{ return &__tl_tensor_maps[i]; }}
"""

_DESCRIPTOR_DTYPE = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
_BY_BITS = {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}


def descriptor_dtype(dtype: str) -> str:
    """The tensor-map element type for ``dtype`` (bit copies: 8-bit types as ``uint8``)."""
    if dtype in _DESCRIPTOR_DTYPE:
        return _DESCRIPTOR_DTYPE[dtype]
    bits = dtype_bits(dtype)
    if bits not in _BY_BITS:
        raise ValueError(f"TMA cannot copy {dtype} elements ({bits} bits)")
    return _BY_BITS[bits]


# ---------------------------------------------------------------------------------------
# boxes of a shared tile
# ---------------------------------------------------------------------------------------
def hw_swizzle(byte_addr, mode: SwizzleMode):
    """The shared byte address where TMA puts the byte of unswizzled address ``byte_addr``:
    16-byte chunk bits ``[4, 4+n)`` XOR address bits ``[7, 7+n)`` (n = 3/2/1 for
    128B/64B/32B; CUTLASS ``Swizzle<n,4,3>``). Works on ints and numpy arrays."""
    mode = SwizzleMode(mode)
    if mode is SwizzleMode.NONE:
        return byte_addr
    n = int(mode)
    mask = (1 << n) - 1
    return byte_addr ^ (((byte_addr >> 7) & mask) << 4)


@dataclass(frozen=True)
class BoxPlan:
    """How TMA boxes fill one ``rows x cols`` shared tile.

    ``boxes``: ``(row0, col0, element offset of the box in the tile)`` per box; each box
    is ``box_rows x box_cols`` elements, stored compactly (rows of ``box_cols``) with the
    ``mode`` swizzle applied to its shared addresses.
    """

    mode: SwizzleMode
    box_rows: int
    box_cols: int
    boxes: tuple

    def box_bytes(self, bits: int) -> int:
        """Bytes one box moves (what its mbarrier transaction count adds)."""
        return self.box_rows * self.box_cols * bits // 8


def _layout_offsets(layout, rows: int, cols: int):
    """Element offsets of the tile ``(rows, cols)`` under ``layout`` (None: row-major)."""
    if layout is None:
        return np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)
    table = layout.forward_table()
    shape = [int(E.as_const_int(s)) for s in layout.get_output_shape()]
    flat = np.zeros(table.shape[:-1], dtype=np.int64)
    for d, extent in enumerate(shape):
        flat = flat * extent + table[..., d]
    return flat


def _box_rows(rows: int, atom: int) -> int | None:
    for r in range(min(rows, MAX_BOX), 0, -1):
        if rows % r == 0 and r % atom == 0:
            return r
    return None


def plan_boxes(rows: int, cols: int, bits: int, layout=None) -> BoxPlan | str:
    """The TMA boxes that store a ``rows x cols`` tile of ``bits``-bit elements exactly as
    ``layout`` (a :class:`tilelang.layout.Layout`, None = row-major) places it, or why
    none do.

    Each swizzle (128B, 64B, 32B, then none) is checked against the layout element by
    element (the hardware model :func:`hw_swizzle` on the tile's byte addresses, the tile
    starting on its swizzle period, which ``plan_shared_memory`` guarantees).
    """
    if layout is not None and (layout.input_dim != 2 or not layout.is_static()):
        return "the shared layout is not a static 2-d layout"
    try:
        want = _layout_offsets(layout, rows, cols)
    except Exception as err:  # noqa: BLE001 - an unevaluable layout: no TMA
        return f"the shared layout cannot be evaluated ({err})"
    nbytes = bits // 8
    if nbytes * 8 != bits or (cols * bits) % 128:
        return "tile rows are not whole 16-byte vectors"
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    for mode in (
        SwizzleMode.SWIZZLE_128B,
        SwizzleMode.SWIZZLE_64B,
        SwizzleMode.SWIZZLE_32B,
        SwizzleMode.NONE,
    ):
        if mode is SwizzleMode.NONE:
            width, atom, align = cols, 1, 128
            if width > MAX_BOX:
                continue
        else:
            width, atom = mode.swizzle_byte_size() // nbytes, 8
            align = mode.smem_alignment()
            if cols % width:
                continue
        br = _box_rows(rows, atom)
        if br is None:
            continue
        bases = {}
        ok = True
        for r0 in range(0, rows, br):
            for c0 in range(0, cols, width):
                base = int(want[r0, c0])
                if (base * nbytes) % align:
                    ok = False
                bases[(r0, c0)] = base
        if not ok:
            continue
        grid = np.array(
            [[bases[(r0, c0)] for c0 in range(0, cols, width)] for r0 in range(0, rows, br)],
            dtype=np.int64,
        )
        base_of = grid[i // br, j // width]
        rel = ((i % br) * width + j % width) * nbytes
        got = hw_swizzle(base_of * nbytes + rel, mode) // nbytes
        if np.array_equal(got, want):
            boxes = tuple((r0, c0, off) for (r0, c0), off in sorted(bases.items()))
            return BoxPlan(mode, br, width, boxes)
    return "no TMA box/swizzle stores the tile as its shared layout does"


# ---------------------------------------------------------------------------------------
# tensor maps and copies
# ---------------------------------------------------------------------------------------
@dataclass
class TensorMapSpec:
    """One tensor map: the whole global ``tensor`` seen in boxes of ``box`` elements.

    ``dims``/``box`` are outermost-first (TIRx order); :meth:`encode_params` gives them as
    ``cuTensorMapEncodeTiled`` takes them (innermost first, byte strides).
    """

    tensor: ir.Var
    dtype: str
    box: tuple
    mode: SwizzleMode
    var: ir.Var = None
    #: elements between the 16-byte aligned address the map starts at and the tensor's
    #: first element (host-computed, a kernel parameter): the innermost coordinate of
    #: every box is shifted by it (:func:`host_encode_stmts`)
    shift: ir.Var = None

    def __post_init__(self):
        if self.var is None:
            self.var = ir.Var(f"{self.tensor.name}_tmap", ir.PtrType(tirx.TensorMapType()))
        if self.shift is None and self.needs_shift:
            self.shift = ir.Var(f"{self.tensor.name}_tma_shift", "int32")

    @property
    def needs_shift(self) -> bool:
        """Whether the tensor's declared alignment allows a base that is not 16-byte aligned."""
        align = getattr(self.tensor.ty, "data_alignment", None)
        try:
            align = int(align)
        except (TypeError, ValueError):
            align = 0
        return align % 16 != 0

    @property
    def rank(self) -> int:
        """Number of dimensions of the map (the global tensor's rank)."""
        return len(self.box)

    @property
    def dims(self) -> list:
        """Global dimensions, outermost first."""
        return list(self.tensor.ty.shape)

    def byte_strides(self) -> list:
        """Byte stride of every dimension but the innermost, outermost first."""
        bits = dtype_bits(self.dtype)
        shape = self.dims
        out = []
        for d in range(len(shape) - 1):
            out.append(E.simplify(E.prod(shape[d + 1 :]) * (bits // 8)))
        return out

    def encode_params(self) -> dict:
        """What ``cuTensorMapEncodeTiled`` receives: ``dtype``, ``rank``, ``dims``,
        ``strides`` (bytes, dims 1..rank-1), ``box``, ``element_strides`` (innermost
        first), ``swizzle`` (CU_TENSOR_MAP_SWIZZLE_* ordinal), ``interleave``/
        ``l2_promotion``/``oob_fill`` (0: none, none, zero fill)."""
        return {
            "dtype": descriptor_dtype(self.dtype),
            "rank": self.rank,
            "dims": list(reversed(self.dims)),
            "strides": list(reversed(self.byte_strides())),
            "box": list(reversed(self.box)),
            "element_strides": [1] * self.rank,
            "swizzle": int(self.mode),
            "interleave": 0,
            "l2_promotion": 0,
            "oob_fill": 0,
        }

    def key(self) -> tuple:
        return (self.tensor.__chandle__(), self.dtype, tuple(self.box), int(self.mode))


@dataclass
class TmaCopy:
    """A ``T.copy(global -> shared)`` issued as TMA boxes of one tensor map.

    ``row_axis``/``col_axis``: the global axes that run along the tile's rows/columns
    (the others are 1 in the box). ``coords(begins)`` gives each box's coordinates.
    """

    src: RegionView
    dst: RegionView
    spec: TensorMapSpec
    plan: BoxPlan
    row_axis: int
    col_axis: int
    bits: int
    notes: list = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """Bytes of one issue (all boxes), the mbarrier transaction count."""
        return self.plan.box_bytes(self.bits) * len(self.plan.boxes)

    def box_coords(self, begins, row0: int, col0: int) -> list:
        """Coordinates (outermost first) of the box at tile offset ``(row0, col0)`` when
        the copy's source region starts at ``begins``."""
        out = list(begins)
        out[self.row_axis] = out[self.row_axis] + row0
        out[self.col_axis] = out[self.col_axis] + col0
        return out

    def describe(self) -> str:
        p = self.plan
        return (
            f"{self.src.name} -> {self.dst.name}: TMA, {len(p.boxes)} box(es) of "
            f"{p.box_rows}x{p.box_cols}, swizzle {p.mode.name}, {self.bytes} bytes"
        )


def plan_tma_copy(view, layout, ctx) -> TmaCopy | str:
    """``view`` (a ``T.copy``) as a :class:`TmaCopy`, or the reason it cannot be one.

    Needs: a global source without a storage layout, of rank <= 5, whose row-major byte
    strides are provably multiples of 16; a whole 2-d shared destination tile whose two
    axes run along two source axes, the columns along the innermost one; a static tile
    whose layout :func:`plan_boxes` can store. Region offsets may be anything (a box
    past the tensor's end is zero-filled); a base pointer off a 16-byte boundary is
    handled at call time (``TensorMapSpec.shift``, :func:`host_encode_stmts`).
    """
    src, dst = RegionView.of(view.src), RegionView.of(view.dst)
    if not src.scope.startswith("global") or not dst.scope.startswith("shared"):
        return "not a global -> shared copy"
    if src.dtype != dst.dtype:
        return "source and destination types differ"
    bits = dtype_bits(src.dtype)
    if bits not in (8, 16, 32, 64):
        return f"{bits}-bit elements"
    try:
        descriptor_dtype(src.dtype)
    except ValueError as err:
        return str(err)
    if not vectorizable(src.tensor) or getattr(src.tensor.ty, "layout", None) is not None:
        return "the global tensor has a storage layout"
    rank = len(src.shape)
    if not 1 <= rank <= 5:
        return f"a rank-{rank} global tensor"
    if len(dst.shape) == 1:  # a 1-d tile (FlashAttention's lse/Delta): one box of 1 row
        return _plan_1d(src, dst, rank, bits, ctx)
    if len(dst.shape) != 2:
        return "the shared tile is not 1-d or 2-d"
    tile = [_const(s) for s in dst.shape]
    if None in tile:
        return "the shared tile shape is not static"
    if any(_const(b) != 0 for b in dst.begins) or [_const(e) for e in dst.extents] != tile:
        return "the copy does not fill the whole shared tile"
    sa = src.nonunit_axes()
    if len(sa) != 2 or sa[1] != rank - 1:
        return "the tile's columns do not run along the tensor's innermost axis"
    if [_const(src.extents[a]) for a in sa] != tile:
        return "the source region's extents differ from the tile's"
    bad = _strides_ok(src, rank, ctx)
    if bad is not None:
        return bad
    layout = ctx_layout(ctx, dst.tensor)
    plan = plan_boxes(tile[0], tile[1], bits, layout)
    if isinstance(plan, str):
        return plan
    box = [1] * rank
    box[sa[0]], box[sa[1]] = plan.box_rows, plan.box_cols
    spec = TensorMapSpec(src.tensor, src.dtype, tuple(box), plan.mode)
    return TmaCopy(src, dst, spec, plan, sa[0], sa[1], bits)


def _strides_ok(src, rank, ctx):
    for stride in TensorMapSpec(
        src.tensor, src.dtype, (1,) * rank, SwizzleMode.NONE
    ).byte_strides():
        if not ctx.prove(ir.prim.floormod(stride, 16) == 0):
            return f"global byte stride {stride} is not provably a multiple of 16"
    return None


def _identity_1d(layout, n: int) -> bool:
    try:
        table = layout.forward_table()
    except Exception:  # noqa: BLE001 - an unevaluable layout: no TMA
        return False
    return table.shape == (n, 1) and np.array_equal(table[:, 0], np.arange(n))


def _plan_1d(src, dst, rank, bits, ctx) -> TmaCopy | str:
    """A whole 1-d shared tile of ``n`` elements along the source's innermost axis as one
    ``1 x n`` box without swizzle: ``n`` whole 16-byte vectors, at most :data:`MAX_BOX`, and
    (so that every stage of a multi-buffered tile starts 128-byte aligned) a multiple of
    128 bytes. The row axis of the plan is the next-to-innermost one (offset 0, box 1)."""
    n = _const(dst.shape[0])
    if n is None:
        return "the shared tile shape is not static"
    if _const(dst.begins[0]) != 0 or _const(dst.extents[0]) != n:
        return "the copy does not fill the whole shared tile"
    if src.nonunit_axes() != [rank - 1] or _const(src.extents[rank - 1]) != n:
        return "the 1-d tile does not run along the tensor's innermost axis"
    layout = ctx_layout(ctx, dst.tensor)
    if layout is not None and not _identity_1d(layout, n):
        return "the 1-d shared tile has a non-identity layout"
    if n > MAX_BOX or (n * bits) % (128 * 8):
        return f"a 1-d tile of {n * bits // 8} bytes (TMA here: multiples of 128, at most {MAX_BOX} elements)"
    bad = _strides_ok(src, rank, ctx)
    if bad is not None:
        return bad
    plan = BoxPlan(SwizzleMode.NONE, 1, n, ((0, 0, 0),))
    box = [1] * rank
    box[rank - 1] = n
    spec = TensorMapSpec(src.tensor, src.dtype, tuple(box), plan.mode)
    return TmaCopy(src, dst, spec, plan, max(rank - 2, 0), rank - 1, bits)


def ctx_layout(ctx, tensor):
    """The layout ``ctx`` (a CUDA lowering context) knows for ``tensor``, or None."""
    get = getattr(ctx, "get_layout", None)
    return get(tensor) if get is not None else None


# ---------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------
def host_encode_stmts(specs) -> list:
    """``Bind(map, stack_alloca("tensormap"))`` + ``tensormap_encode_tiled(...)`` per map
    (the host statements in front of the kernel launch).

    TMA needs a 16-byte aligned global address; tilelang's tensors only promise element
    alignment (views of a larger buffer are allowed). For a spec with ``shift``, the map
    starts ``shift = (address % 16) / element bytes`` elements before the tensor (rounded
    down to 16 bytes) and is ``shift`` elements wider; the kernel adds ``shift`` to every
    box's innermost coordinate, so the elements before the tensor are never read and the
    ones past a row's end are out of bounds (zero-filled) exactly as before. The byte
    strides are 16-byte multiples (checked by :func:`plan_tma_copy`), so every row moves
    by the same ``shift``.
    """
    stmts = []
    for spec in specs:
        p = spec.encode_params()
        base = tirx.address_of(ir.TensorLoad(spec.tensor, [ir.const(0, "int32")] * spec.rank))
        dims = list(p["dims"])
        if spec.shift is not None:
            nbytes = dtype_bits(spec.dtype) // 8
            addr = tirx.reinterpret(base, ty="uint64")
            misalign = ir.prim.floormod(addr, ir.const(16, "uint64"))
            shift_value = ir.prim.Cast(
                "int32", ir.prim.floordiv(misalign, ir.const(nbytes, "uint64"))
            )
            # A map widened to the 16-byte boundary below the tensor was not accepted on the
            # H200 (the kernel hit an illegal instruction): refuse such a pointer at the call.
            stmts.append(
                ir.AssertStmt(
                    ir.prim.EQ(misalign, ir.const(0, "uint64")),
                    ir.StringImm("ValueError"),
                    [
                        ir.StringImm(
                            f"{spec.tensor.name}: TMA needs a 16-byte aligned data pointer; "
                            "pass an aligned tensor (e.g. .contiguous() of a fresh "
                            "allocation) or build without TMA (pass config "
                            "tl.disable_tma_lower=True)"
                        )
                    ],
                )
            )
            stmts.append(ir.Bind(spec.shift, shift_value))
            ptr_ty = ir.PtrType(ir.PrimType(spec.dtype), "global")
            base = tirx.ptr_byte_offset(base, spec.shift * (-nbytes), ty=ptr_ty)
            dims[0] = dims[0] + spec.shift
        alloca = tirx.stack_alloca("tensormap", 1, ty=spec.var.ty)
        stmts.append(ir.Bind(spec.var, alloca))
        encode = cuda_op.tensormap_encode_tiled(
            spec.var,
            base,
            *dims,
            *p["strides"],
            *p["box"],
            *p["element_strides"],
            descriptor_dtype=p["dtype"],
            rank=p["rank"],
            swizzle=p["swizzle"],
        )
        stmts.append(ir.Evaluate(encode))
    return stmts


def _is_tensor_map_ptr(ty) -> bool:
    return isinstance(ty, ir.PtrType) and isinstance(ty.element_type, tirx.TensorMapType)


def retype_tensor_maps(func):
    """A host function whose tensor-map pointers are ``void*`` slots of
    :data:`HOST_HELPERS` (TIRx's C host code generator has no C type for
    ``T.Ptr(T.TensorMap())`` nor a ``stack_alloca("tensormap")``)."""
    mapping = {}

    def bind(b):
        if not _is_tensor_map_ptr(b.var.ty):
            return b
        if len(mapping) >= MAX_MAPS:
            raise ValueError(f"a kernel may use at most {MAX_MAPS} TMA tensor maps")
        new = ir.Var(b.var.name, ir.PtrType(ir.PrimType("void")))
        slot = tirx.call_extern(SLOT_FUNC, ir.const(len(mapping), "int32"), ty=new.ty)
        mapping[b.var.__chandle__()] = new
        return ir.Bind(new, slot)

    body = tvm_ffi.structural_map(func.body, [(ir.Bind, bind)])
    if not mapping:
        return func
    body = tvm_ffi.structural_map(body, [(ir.Var, lambda v: mapping.get(v.__chandle__(), v))])
    return func.with_body(body)


def _retype_pass():
    import tvm_tirx

    @tvm_tirx.ir.transform.module_pass(opt_level=0, name="tilelang.RetypeTensorMaps")
    def retype(mod, _ctx):
        funcs = {
            gv: (retype_tensor_maps(f) if hasattr(f, "body") else f)
            for gv, f in mod.functions.items()
        }
        return tvm_tirx.IRModule(funcs, attrs=mod.attrs, global_infos=mod.global_infos)

    return retype


def _pipeline_factory(*, target=None):
    import tvm_tirx

    lower, finalize_host, finalize_device = tirx.get_tir_pipeline("default", target=target)

    def host():
        return tvm_tirx.ir.transform.Sequential([finalize_host(), _retype_pass()])

    return lower, host, finalize_device


def register_pipeline() -> str:
    """Register (idempotently) and name the TIRx pipeline for kernels with tensor maps:
    TIRx's default one plus :func:`retype_tensor_maps` on the host functions."""
    from tvm_tirx.tirx import compilation_pipeline as cp

    if cp.PIPELINE_MAP.get(PIPELINE_NAME) is not _pipeline_factory:
        tirx.register_tir_pipeline(PIPELINE_NAME, _pipeline_factory)
    return PIPELINE_NAME


def uses_tensor_maps(func) -> bool:
    """Whether the lowered ``func`` encodes tensor maps on the host."""
    found = []
    tvm_ffi.structural_walk(
        func.body, [(ir.Bind, lambda b: found.append(b) if _is_tensor_map_ptr(b.var.ty) else None)]
    )
    return bool(found)


__all__ = [
    "ATTR_TMA",
    "BoxPlan",
    "HOST_HELPERS",
    "TensorMapSpec",
    "TmaCopy",
    "descriptor_dtype",
    "host_encode_stmts",
    "hw_swizzle",
    "plan_boxes",
    "plan_tma_copy",
    "register_pipeline",
    "retype_tensor_maps",
    "uses_tensor_maps",
]

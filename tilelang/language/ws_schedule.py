"""Upstream's explicit warp-specialization schedule: ``T.WSSchedule`` and its parts.

A kernel is written as straight-line tile code whose ops and loops carry stable ids
(``annotations={T.WSID: "copy_A"}`` on tile ops and loops, ``with T.ws_op("id"):`` around
anything else). ``T.annotate_ws_schedule(T.WSSchedule(...))`` then says how to run it
warp-specialized: roles (warp ranges with a ``setmaxnreg`` budget), pipelines (full/empty
mbarrier pairs protecting ``depth`` versions of shared buffers) and, per scheduled loop
(scope), each role's instruction list (op ids and :class:`WSSync` points).

The objects here are plain Python values checked on construction. The schedule travels in
the IR as one ``tl.ws_schedule`` statement (a JSON description plus the pipeline buffers),
the ids as ``tl.ws_op_begin`` / ``tl.ws_op_end`` marker statements around tile ops and
``with T.ws_op`` bodies and as a ``tl.ws_op_id`` loop annotation; the first stage of every
backend's pipeline validates and consumes them (``tilelang/transform/ws_schedule.py``;
the CUDA materialization: ``tilelang/backends/cuda/passes/ws_schedule.py``).
"""

from __future__ import annotations

import contextlib
import enum
import json

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import errors
from ..ops.ws_schedule.op import WS_OP_BEGIN, WS_OP_END, WS_PIPELINE_DEPTH, WS_SCHEDULE
from . import builder

#: The annotation key of a statement's stable warp-specialization id (upstream's
#: ``tl.ws_op_id``): ``annotations={T.WSID: "copy_A"}`` on tile ops and loops.
WSID = "tl.ws_op_id"


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise errors.TraceError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _int(value, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise errors.TraceError(f"{what} must be an integer >= {low}, got {value!r}")
    return int(value)


class WSSyncKind(enum.Enum):
    """Pipeline synchronization kind: the producer waits for the empty barrier
    (``PRODUCER_ACQUIRE``) and signals the full one (``PRODUCER_COMMIT``); the consumer waits
    for the full barrier (``CONSUMER_WAIT``) and signals the empty one (``CONSUMER_RELEASE``)."""

    PRODUCER_ACQUIRE = 0
    PRODUCER_COMMIT = 1
    CONSUMER_WAIT = 2
    CONSUMER_RELEASE = 3


class WSRole:
    """A contiguous warp range ``warps_lo .. warps_hi - 1`` with one duty; ``max_nreg`` is
    its ``setmaxnreg`` budget (0 leaves registers untouched)."""

    def __init__(self, name: str, *, warps_lo: int, warps_hi: int, max_nreg: int = 0):
        self.name = _name(name, "WSRole name")
        self.warps_lo = _int(warps_lo, f"WSRole {name!r} warps_lo")
        self.warps_hi = _int(warps_hi, f"WSRole {name!r} warps_hi")
        if self.warps_hi <= self.warps_lo:
            raise errors.TraceError(
                f"WSRole {name!r}: warps_hi ({warps_hi}) must be greater than warps_lo "
                f"({warps_lo}) (the role covers warps lo .. hi - 1)"
            )
        self.max_nreg = _int(max_nreg, f"WSRole {name!r} max_nreg")
        if self.max_nreg and not (24 <= self.max_nreg <= 256 and self.max_nreg % 8 == 0):
            raise errors.TraceError(
                f"WSRole {name!r}: max_nreg must be 0 or a multiple of 8 in 24..256 "
                f"(setmaxnreg), got {max_nreg}"
            )

    def __repr__(self):
        return (
            f"WSRole({self.name!r}, warps_lo={self.warps_lo}, warps_hi={self.warps_hi}, "
            f"max_nreg={self.max_nreg})"
        )


class WSPipeline:
    """A full/empty mbarrier pair protecting ``depth`` versions of ``buffers`` (shared
    tiles), handed between exactly two roles in one scope."""

    def __init__(self, name: str, buffers, depth: int):
        self.name = _name(name, "WSPipeline name")
        if not isinstance(buffers, list | tuple) or not buffers:
            raise errors.TraceError(
                f"WSPipeline {name!r}: buffers must be a non-empty list of tiles, got {buffers!r}"
            )
        self.buffers = [builder.unwrap(b) for b in buffers]
        for b in self.buffers:
            if not isinstance(b, ir.Var) or not hasattr(b.ty, "scope"):
                raise errors.TraceError(
                    f"WSPipeline {name!r}: buffers must be tiles (T.alloc_shared ...), got {b!r}"
                )
        self.depth = _int(depth, f"WSPipeline {name!r} depth", 1)

    def __repr__(self):
        names = [b.name for b in self.buffers]
        return f"WSPipeline({self.name!r}, {names}, depth={self.depth})"


class WSInstr:
    """Base class of one step of a role's program."""


class WSOpRef(WSInstr):
    """A tile op or child scope, by its ``T.WSID``."""

    def __init__(self, id: str):  # noqa: A002 - upstream signature
        self.id = _name(id, "WSOpRef id")

    def __repr__(self):
        return f"WSOpRef({self.id!r})"


class WSSync(WSInstr):
    """A pipeline synchronization point at a software-pipeline ``stage``; prefer the
    classmethods (``WSSync.producer_acquire("smem", stage=0)``)."""

    def __init__(self, kind: WSSyncKind, pipeline: str, stage: int = 0):
        if not isinstance(kind, WSSyncKind):
            raise errors.TraceError(f"WSSync kind must be a T.WSSyncKind, got {kind!r}")
        self.kind = kind
        self.pipeline = _name(pipeline, "WSSync pipeline")
        self.stage = _int(stage, f"WSSync({kind.name}, {pipeline!r}) stage")

    @classmethod
    def producer_acquire(cls, pipeline: str, stage: int = 0) -> WSSync:
        """Wait for the empty barrier; binds the stage's buffer versions."""
        return cls(WSSyncKind.PRODUCER_ACQUIRE, pipeline, stage)

    @classmethod
    def producer_commit(cls, pipeline: str, stage: int = 0) -> WSSync:
        """Signal the full barrier; ends the producer's span."""
        return cls(WSSyncKind.PRODUCER_COMMIT, pipeline, stage)

    @classmethod
    def consumer_wait(cls, pipeline: str, stage: int = 0) -> WSSync:
        """Wait for the full barrier; binds the stage's buffer versions."""
        return cls(WSSyncKind.CONSUMER_WAIT, pipeline, stage)

    @classmethod
    def consumer_release(cls, pipeline: str, stage: int = 0) -> WSSync:
        """Signal the empty barrier; ends the consumer's span."""
        return cls(WSSyncKind.CONSUMER_RELEASE, pipeline, stage)

    def __repr__(self):
        return f"WSSync({self.kind.name}, {self.pipeline!r}, stage={self.stage})"


class WSScope:
    """A scheduled loop (by its ``T.WSID``) or :data:`ROOT`, with per-role instruction lists
    (``{role: [WSSync | op id, ...]}``; a plain string is a :class:`WSOpRef`)."""

    ROOT = "tl.ws_scope_root"

    def __init__(self, id: str, bodies: dict):  # noqa: A002 - upstream signature
        self.id = _name(id, "WSScope id")
        if not isinstance(bodies, dict):
            raise errors.TraceError(f"WSScope {id!r}: bodies must be a dict role -> list")
        self.bodies = {}
        for role, instrs in bodies.items():
            _name(role, f"WSScope {id!r} role name")
            if not isinstance(instrs, list | tuple):
                raise errors.TraceError(f"WSScope {id!r}: the body of role {role!r} must be a list")
            typed = []
            for x in instrs:
                x = WSOpRef(x) if isinstance(x, str) else x
                if not isinstance(x, WSOpRef | WSSync):
                    raise errors.TraceError(
                        f"WSScope {id!r}, role {role!r}: expected an op id or a T.WSSync, got {x!r}"
                    )
                typed.append(x)
            self.bodies[role] = typed

    def __repr__(self):
        return f"WSScope({self.id!r}, {self.bodies!r})"


class WSSchedule:
    """The complete warp-specialization schedule of one kernel; ``num_warps`` (a multiple
    of 4: setmaxnreg acts on whole warpgroups) overrides the kernel's thread count."""

    def __init__(self, num_warps: int, roles, pipelines, scopes):
        self.num_warps = _int(num_warps, "WSSchedule num_warps", 1)
        if self.num_warps % 4:
            raise errors.TraceError(
                "WSSchedule num_warps must be a multiple of 4 (setmaxnreg acts on whole "
                f"warpgroups), got {num_warps}"
            )
        for what, items, cls in (
            ("roles", roles, WSRole),
            ("pipelines", pipelines, WSPipeline),
            ("scopes", scopes, WSScope),
        ):
            if not isinstance(items, list | tuple) or not all(isinstance(x, cls) for x in items):
                raise errors.TraceError(f"WSSchedule {what} must be a list of T.{cls.__name__}")
        self.roles, self.pipelines, self.scopes = list(roles), list(pipelines), list(scopes)

    def to_json(self, buffer_index) -> str:
        """The IR form: JSON with each pipeline buffer as its index in ``buffer_index``."""
        return json.dumps(
            {
                "num_warps": self.num_warps,
                "roles": [[r.name, r.warps_lo, r.warps_hi, r.max_nreg] for r in self.roles],
                "pipelines": [
                    [p.name, [buffer_index(b) for b in p.buffers], p.depth] for p in self.pipelines
                ],
                "scopes": [
                    [
                        s.id,
                        {
                            role: [
                                ["op", x.id]
                                if isinstance(x, WSOpRef)
                                else ["sync", x.kind.name, x.pipeline, x.stage]
                                for x in instrs
                            ]
                            for role, instrs in s.bodies.items()
                        },
                    ]
                    for s in self.scopes
                ],
            }
        )


def annotate_ws_schedule(schedule):
    """Attach a warp-specialization schedule to the kernel (one per kernel)."""
    builder.state()
    if not isinstance(schedule, WSSchedule):
        raise errors.TraceError(
            f"annotate_ws_schedule expects a T.WSSchedule object, got {type(schedule).__name__}"
        )
    buffers = []

    def index(b):
        for i, x in enumerate(buffers):
            if x.same_as(b):
                return i
        buffers.append(b)
        return len(buffers) - 1

    spec = schedule.to_json(index)
    _T.emit_(ir.Evaluate(WS_SCHEDULE.make(spec=spec, buffers=buffers, loc=builder.user_loc())))


def annotate_ws_pipeline_depth(depth_map: dict):
    """Declare the pipeline depth of buffers at the enclosing pipelined loop (upstream's hint
    to its automatic scheduler): the loop keeps ``depth`` versions of those tiles, i.e. its
    ``num_stages`` becomes the depth (one depth per loop)."""
    builder.state()
    if not isinstance(depth_map, dict) or not depth_map:
        raise errors.TraceError("annotate_ws_pipeline_depth expects a dict {tile: depth}")
    bufs, depths = [], []
    for buf, depth in depth_map.items():
        depths.append(_int(depth, "pipeline depth", 1))
        bufs.append(builder.unwrap(buf))
    call = WS_PIPELINE_DEPTH.make(depths=depths, buffers=bufs, loc=builder.user_loc())
    _T.emit_(ir.Evaluate(call))


@contextlib.contextmanager
def ws_op(op_id: str):
    """``with T.ws_op("id"):`` -- the enclosed statements become ONE schedulable op (or,
    around a ``while`` loop, the scope of that id)."""
    builder.state()
    _name(op_id, "ws_op id")
    loc = builder.user_loc()
    _T.emit_(ir.Evaluate(WS_OP_BEGIN.make(id=op_id, loc=loc)))
    yield
    _T.emit_(ir.Evaluate(WS_OP_END.make(id=op_id, loc=loc)))


def tagged(annotations, what: str):
    """The ``with`` block a tile op is emitted in: ``ws_op`` of its ``T.WSID`` annotation,
    or nothing."""
    op_id = (annotations or {}).get(WSID) if isinstance(annotations, dict) else None
    if op_id is None:
        return contextlib.nullcontext()
    _name(op_id, f"{what}: annotations[T.WSID]")
    return ws_op(op_id)


__all__ = [
    "WSID",
    "WSInstr",
    "WSOpRef",
    "WSPipeline",
    "WSRole",
    "WSSchedule",
    "WSScope",
    "WSSync",
    "WSSyncKind",
    "annotate_ws_pipeline_depth",
    "annotate_ws_schedule",
    "ws_op",
]

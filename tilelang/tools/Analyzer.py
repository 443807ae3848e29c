"""``tilelang.tools.Analyzer``: a roofline estimate of a traced kernel (upstream's tool).

``Analyzer.analysis(func, device)`` walks the kernel as traced (before lowering) and counts

- FLOPs: ``2 * M * N * K`` for every ``T.gemm``,
- global bytes: the tile of every ``T.copy`` that reads or writes a global tensor,

each times the trip counts of the serial loops around it and the number of blocks along
``blockIdx.x`` and ``blockIdx.y`` (``blockIdx.z`` is not counted, as upstream). The
estimated time is the larger of bytes / bandwidth and FLOPs / peak; the peak is known for
compute capabilities 8.0, 8.6 and 8.9 (upstream's table; otherwise ``expected_tflops`` is
None and the time is the memory time alone). ``device`` is a ``tilelang.carver.arch``
device (its ``bandwidth[1]`` in MB/s and ``compute_capability``, e.g. ``"90"``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tvm_tirx import ir

from ..dtypes import bits as element_bits
from ..errors import CompileError
from ..layout import expr as E
from ..lowering.region import RegionView
from ..lowering.stmt import launch_of
from ..ops import tile_op_of
from ..ops.gemm.op import gemm_dims

logger = logging.getLogger(__name__)

#: compute capability -> (cores per SM, clock in GHz, FLOPs per core and cycle, SMs)
ARCH_CONFIGS = {"80": (128, 1.41, 2, 108), "86": (128, 1.70, 2, 84), "89": (128, 2.52, 2, 128)}


@dataclass(frozen=True)
class AnalysisResult:
    """Totals of one kernel launch and the estimate derived from them."""

    total_flops: int
    total_global_bytes: int
    estimated_time: float
    expected_tflops: float | None
    expected_bandwidth_GBps: float


def _count(value, what: str) -> int:
    const = E.as_const_int(value)
    if const is None:
        raise CompileError(
            f"Analyzer: the {what} {value} is not a constant; analyze a kernel traced with "
            "concrete shapes"
        )
    return const


class Analyzer:
    """Counts a kernel's GEMM FLOPs and global-memory bytes (see the module doc)."""

    def __init__(self, fn, device):
        self.fn = fn["main"] if isinstance(fn, ir.IRModule) else fn
        self.device = device
        self.total_flops = 0
        self.total_global_bytes = 0
        self._blocks = {"blockIdx.x": 1, "blockIdx.y": 1}

    def _visit(self, stmt, trips: int) -> None:
        launch = launch_of(stmt)
        if launch is not None:
            tag, extent, _ = launch
            if tag in self._blocks:
                self._blocks[tag] = _count(extent, f"{tag} extent")
            self._visit(stmt.body, trips)
            return
        found = tile_op_of(stmt) if isinstance(stmt, ir.Evaluate) else None
        if found is not None:
            self._tile_op(*found, trips)
            return
        if isinstance(stmt, ir.For):
            self._visit(stmt.body, trips * _count(stmt.end - stmt.begin, "loop trip count"))
            return
        if isinstance(stmt, ir.SeqStmt):
            for child in stmt.seq:
                self._visit(child, trips)
            return
        for name in ("then_case", "else_case", "body"):
            child = getattr(stmt, name, None)
            if isinstance(child, ir.Stmt):
                self._visit(child, trips)

    def _tile_op(self, op, call, trips: int) -> None:
        view = op.view(call)
        blocks = self._blocks["blockIdx.x"] * self._blocks["blockIdx.y"]
        if op.name == "gemm":
            m, n, k = (_count(x, "gemm extent") for x in gemm_dims(view)[3:])
            self.total_flops += 2 * m * n * k * trips * blocks
        elif op.name == "copy":
            src, dst = RegionView.of(view.src), RegionView.of(view.dst)
            side = src if src.scope == "global" else dst if dst.scope == "global" else None
            if side is None:
                return
            elements = 1
            for extent in side.extents:
                elements *= _count(extent, "copy extent")
            self.total_global_bytes += elements * element_bits(side.dtype) // 8 * trips * blocks

    def ir_pass(self) -> Analyzer:
        """Walk the kernel and accumulate the totals; returns self."""
        self._blocks = {"blockIdx.x": 1, "blockIdx.y": 1}
        self._visit(self.fn.body, 1)
        return self

    def calculate(self) -> AnalysisResult:
        """The :class:`AnalysisResult` of the accumulated totals on ``device``."""
        bandwidth_gbps = self.device.bandwidth[1] / 1000
        peak = None
        arch = str(self.device.compute_capability)[:2]
        if arch in ARCH_CONFIGS:
            cores, clock, per_cycle, sms = ARCH_CONFIGS[arch]
            peak = round(sms * cores * clock * per_cycle / 1e3, 1)
        else:
            logger.info("compute capability %s: no peak TFLOPs known", arch)
        mem_time = self.total_global_bytes / (bandwidth_gbps * 1e9)
        time = max(mem_time, self.total_flops / (peak * 1e12)) if peak else mem_time
        return AnalysisResult(
            total_flops=self.total_flops,
            total_global_bytes=self.total_global_bytes,
            estimated_time=time,
            expected_tflops=peak,
            expected_bandwidth_GBps=bandwidth_gbps,
        )

    @classmethod
    def analysis(cls, fn, device) -> AnalysisResult:
        """Analyze ``fn`` (a traced kernel or an IRModule with ``main``) on ``device``."""
        return cls(fn, device).ir_pass().calculate()

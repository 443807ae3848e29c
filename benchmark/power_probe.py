"""Sustained throughput, SM clock and power of GPU kernels (a ``nvidia-smi`` sampler).

Used by ``benchmark/mma_peak.py --sustain``: each kernel runs back to back for a few
seconds while ``nvidia-smi`` samples the SM clock, the power draw and the throttle
reasons every 100 ms; the window's mean clock and power tell whether a kernel is held back
by the board's power limit (throttle reason 0x4, SW power cap) rather than by its code.
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass

_QUERY = "timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active"


@dataclass
class Window:
    """What one sustained run measured."""

    seconds: float
    calls: int
    mean_mhz: float
    mean_watts: float
    power_capped: float  # fraction of samples with the SW power cap active


class Sampler:
    """``nvidia-smi`` writing one sample per ``period_ms`` to a file until :meth:`stop`."""

    def __init__(self, period_ms: int = 100):
        fd, self.path = tempfile.mkstemp(prefix="tl_smi_", suffix=".csv")
        os.close(fd)
        self._file = open(self.path, "w")  # noqa: SIM115 - closed in stop()
        cmd = ["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits",
               "-lms", str(period_ms)]  # fmt: skip
        self._proc = subprocess.Popen(cmd, stdout=self._file, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait()
        self._file.close()

    def samples(self, start: float, end: float) -> list[tuple[float, float, int]]:
        """(MHz, W, throttle bits) of the samples taken between two ``time.time()`` values."""
        rows = []
        with open(self.path) as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) != 4:
                    continue
                try:
                    stamp = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                    mhz, watts, bits = float(parts[1]), float(parts[2]), int(parts[3], 16)
                except ValueError:
                    continue
                if start <= stamp <= end:
                    rows.append((mhz, watts, bits))
        return rows


def sustain(fn, sync, sampler: Sampler, seconds: float, settle: float = 0.5) -> Window:
    """Run ``fn`` back to back for ``settle + seconds``; the window excludes the settle part."""
    t_end = time.time() + settle
    while time.time() < t_end:
        for _ in range(8):
            fn()
        sync()
    calls, start = 0, time.time()
    t0 = time.perf_counter()
    while time.time() < start + seconds:
        for _ in range(8):
            fn()
        calls += 8
        sync()
    elapsed = time.perf_counter() - t0
    end = time.time()
    time.sleep(0.25)  # let the sampler write the window's last rows
    rows = sampler.samples(start, end) or [(float("nan"), float("nan"), 0)]
    return Window(
        seconds=elapsed,
        calls=calls,
        mean_mhz=sum(r[0] for r in rows) / len(rows),
        mean_watts=sum(r[1] for r in rows) / len(rows),
        power_capped=sum(1 for r in rows if r[2] & 0x4) / len(rows),
    )

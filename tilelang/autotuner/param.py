"""Autotuner settings and results, and the JSON record of a best config on disk."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..profiler import TensorSupplyType

RECORD_FORMAT = 1


@dataclass(frozen=True)
class CompileArgs:
    """How each candidate is compiled (the arguments of ``tilelang.compile``)."""

    out_idx: Any = None
    target: Any = "auto"
    execution_backend: str = "auto"
    target_host: Any = None
    verbose: bool = False
    pass_configs: dict | None = None
    compile_flags: list | None = None

    def compile_program(self, func, pass_configs=None):
        """Compile one traced candidate (``pass_configs``: the candidate's own, over these)."""
        from ..jit import compile as tl_compile

        return tl_compile(
            func,
            out_idx=self.out_idx,
            execution_backend=self.execution_backend,
            target=self.target,
            target_host=self.target_host,
            verbose=self.verbose,
            pass_configs={**(self.pass_configs or {}), **(pass_configs or {})} or None,
            compile_flags=self.compile_flags,
        )


@dataclass(frozen=True)
class ProfileArgs:
    """How each candidate is checked and timed (upstream's names and defaults)."""

    warmup: int = 25
    rep: int = 100
    timeout: float = 30
    supply_type: TensorSupplyType = TensorSupplyType.Auto
    ref_prog: Callable | None = None
    supply_prog: Callable | None = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check_prog: Callable | None = None
    cache_input_tensors: bool = False
    #: time a candidate in full only when a short probe is within ``early_stop_factor`` of
    #: the best latency so far (a clearly slower one keeps its probe latency)
    early_stop: bool = False
    early_stop_factor: float = 2.0


@dataclass
class AutotuneResult:
    """The outcome of a tuning run: best latency (ms), config, and the compiled kernel.

    ``from_disk`` is True when the best config came from a stored record (nothing was
    benchmarked); ``failures`` maps the index of each rejected config to the reason.
    """

    latency: float | None = None
    config: dict | None = None
    ref_latency: float | None = None
    libcode: str | None = None
    func: Any = None
    kernel: Any = None
    from_disk: bool = False
    failures: dict = field(default_factory=dict)
    trials: list = field(default_factory=list)  # one dict per config (see report.py)

    def write_trials_csv(self, path) -> str:
        """Write every trial (config, status, latency) as CSV to ``path``; returns it."""
        from .report import write_trials_csv

        return write_trials_csv(self, path)

    def plot_trials(self, path, title: str = "") -> str:
        """Draw the trials' latencies to the image ``path`` (needs matplotlib); returns it."""
        from .report import plot_trials

        return plot_trials(self, path, title=title)


def save_record(path: Path, key: str, result: AutotuneResult, material: dict) -> None:
    """Write the best config of ``key`` as JSON, atomically (temp file + ``os.replace``)."""
    record = {
        "format": RECORD_FORMAT,
        "key": key,
        "config": result.config,
        "latency": result.latency,
        "ref_latency": result.ref_latency,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "material": material,
    }
    text = json.dumps(record, indent=1, sort_keys=True, default=repr)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def load_record(path: Path, key: str, allowed_keys) -> dict | None:
    """The stored record of ``key``, or None when missing, unreadable or not for this function."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return None
    config = record.get("config")
    if record.get("key") != key or not isinstance(config, dict):
        return None
    if not set(config) <= set(allowed_keys):
        return None
    latency = record.get("latency")
    if latency is not None and not isinstance(latency, int | float):
        return None
    return record

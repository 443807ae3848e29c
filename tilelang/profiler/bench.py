"""``do_bench``: milliseconds per call of a function (upstream's signature and defaults).

``warmup`` and ``rep`` are time budgets in milliseconds: a first estimate of one call's time
sets how many warm-up and timed calls fit in them (``_n_warmup`` / ``_n_repeat`` override the
counts). On a GPU the timing backends are upstream's: ``"event"`` (CUDA events around each
call, L2 flushed before each), ``"cupti"`` (kernel time only, from torch's CUPTI profiler),
``"cudagraph"`` (the calls captured in a CUDA graph and replayed), ``"wall"`` (host clock,
synchronising the device). Without a GPU, or with ``device="cpu"``, every backend times the
call with the host clock (tilelang's CPU backend runs kernels synchronously).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

__all__ = ["bench", "do_bench"]

_BACKENDS = ("event", "cupti", "cudagraph", "wall")
_MODES = ("min", "max", "mean", "median")
_FLUSH_TAG = "__tilelang_l2_flush__"


def _aggregate(times: list[float], quantiles, return_mode: str):
    if quantiles is not None:
        ordered = sorted(times)
        out = []
        for q in quantiles:
            pos = q * (len(ordered) - 1)
            lo = int(math.floor(pos))
            hi = min(lo + 1, len(ordered) - 1)
            out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))
        return out[0] if len(out) == 1 else out
    if return_mode == "min":
        return min(times)
    if return_mode == "max":
        return max(times)
    if return_mode == "median":
        return statistics.median(times)
    return statistics.fmean(times)


def _resolve_device(device):
    """("cpu", None) or ("cuda", index) for ``device`` (None: the GPU if torch sees one)."""
    import torch

    if device is None:
        return ("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else ("cpu", None)
    if isinstance(device, int) and not isinstance(device, bool):
        dev = torch.device("cuda", device)
    else:
        try:
            dev = torch.device(device)
        except (TypeError, RuntimeError) as err:
            raise ValueError(
                f"do_bench: device must be an int, str or torch.device, got {device!r}"
            ) from err
    if dev.type == "cpu":
        return "cpu", None
    if dev.type != "cuda":
        raise ValueError(f"do_bench: device must be a CPU or CUDA device, got {dev}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"do_bench: device={device!r} asks for CUDA, but torch sees no GPU")
    return "cuda", dev.index if dev.index is not None else torch.cuda.current_device()


def _check_args(fn, warmup, rep, n_warmup, n_repeat, quantiles, backend, return_mode):
    if not callable(fn):
        raise TypeError(f"do_bench: fn must be callable, got {type(fn).__name__}")
    for name, value in (("warmup", warmup), ("rep", rep)):
        if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ValueError(f"do_bench: {name} must be a finite number of ms >= 0, got {value!r}")
    for name, value in (("_n_warmup", n_warmup), ("_n_repeat", n_repeat)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"do_bench: {name} must be an int >= 0, got {value!r}")
    if backend not in _BACKENDS:
        if isinstance(backend, str) and backend.startswith("msprof"):
            raise ValueError(
                f"do_bench: backend={backend!r} is Ascend-only; use one of {_BACKENDS}"
            )
        raise ValueError(f"do_bench: backend must be one of {_BACKENDS}, got {backend!r}")
    if return_mode not in _MODES:
        raise ValueError(f"do_bench: return_mode must be one of {_MODES}, got {return_mode!r}")
    if quantiles is not None and any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"do_bench: quantiles must lie in [0, 1], got {quantiles!r}")


def _counts(estimate_ms, warmup, rep, n_warmup, n_repeat):
    estimate_ms = max(estimate_ms, 1e-6)
    nw = n_warmup if n_warmup > 0 else max(1, int(warmup / estimate_ms))
    nr = n_repeat if n_repeat > 0 else max(1, int(rep / estimate_ms))
    return nw, nr


def _wall(fn, sync, warmup, rep, n_warmup, n_repeat, quantiles, return_mode, early_stop):
    def sample(n):
        times = []
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    fn()
    sync()
    estimate = statistics.fmean(sample(5))
    if early_stop is not None and estimate > early_stop:
        return estimate if quantiles is None or len(quantiles) == 1 else [estimate] * len(quantiles)
    nw, nr = _counts(estimate, warmup, rep, n_warmup, n_repeat)
    for _ in range(nw):
        fn()
    return _aggregate(sample(nr), quantiles, return_mode)


def _gpu(
    fn,
    index,
    warmup,
    rep,
    n_warmup,
    n_repeat,
    quantiles,
    backend,
    return_mode,
    fast_flush,
    cache_size,
    early_stop,
):
    import torch

    def sync():
        torch.cuda.synchronize(index)

    numel = cache_size * 1024 * 1024
    flush = torch.empty(
        numel // 4 if fast_flush else numel,
        dtype=torch.int32 if fast_flush else torch.int8,
        device=f"cuda:{index}",
    )
    fn()
    flush.zero_()
    sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    end.synchronize()
    estimate = start.elapsed_time(end) / 5
    if early_stop is not None and estimate > early_stop:
        return estimate if quantiles is None else [estimate] * len(quantiles)
    nw, nr = _counts(estimate, warmup, rep, n_warmup, n_repeat)
    for _ in range(nw):
        fn()

    if backend == "event":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(nr)
        ]
        for s, e in events:
            flush.zero_()
            s.record()
            fn()
            e.record()
        sync()
        return _aggregate([s.elapsed_time(e) for s, e in events], quantiles, return_mode)

    if backend == "cudagraph":
        stream = torch.cuda.Stream(device=index)
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(nr):
                    fn()
            sync()
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(10)
            ]
            for s, e in events:
                flush.zero_()
                s.record()
                graph.replay()
                e.record()
            sync()
        return _aggregate([s.elapsed_time(e) / nr for s, e in events], quantiles, return_mode)

    # cupti: device time of the kernels fn launches, flush kernels excluded
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(nr):
            with record_function(_FLUSH_TAG):
                flush.zero_()
            fn()
        sync()
    total = flushed = 0.0
    for ev in prof.events():
        if getattr(getattr(ev, "device_type", None), "name", "") != "CUDA":
            continue
        if not ev.is_user_annotation:
            total += ev.self_device_time_total
        elif ev.key == _FLUSH_TAG:
            flushed += ev.self_device_time_total
    return (total - flushed) / nr * 1e-3


def do_bench(
    fn: Callable,
    warmup: float = 25,
    rep: float = 100,
    _n_warmup: int = 0,
    _n_repeat: int = 0,
    quantiles: list[float] | None = None,
    fast_flush: bool = True,
    backend: str = "event",
    return_mode: str = "mean",
    device=None,
    cache_size: int = 256,
    early_stop_baseline: float | None = None,
):
    """Milliseconds per call of ``fn()`` (a list when ``quantiles`` has several entries).

    ``warmup`` / ``rep``: time budgets in ms; ``_n_warmup`` / ``_n_repeat``: explicit counts
    (0 = from the budgets); ``backend``: ``"event"``, ``"cupti"``, ``"cudagraph"`` or ``"wall"``;
    ``return_mode``: ``"mean"``, ``"median"``, ``"min"`` or ``"max"``; ``device``: a CUDA
    index / device, ``"cpu"``, or None for the GPU when present; ``cache_size``: MB of L2
    flush buffer (GPU); ``early_stop_baseline``: return the first estimate if it exceeds this.
    Without a GPU (or with ``device="cpu"``) the host clock times each call.
    """
    _check_args(fn, warmup, rep, _n_warmup, _n_repeat, quantiles, backend, return_mode)
    kind, index = _resolve_device(device)
    if kind == "cpu":
        return _wall(
            fn,
            lambda: None,
            warmup,
            rep,
            _n_warmup,
            _n_repeat,
            quantiles,
            return_mode,
            early_stop_baseline,
        )
    import torch

    with torch.cuda.device(index):
        if backend == "wall":
            return _wall(
                fn,
                lambda: torch.cuda.synchronize(index),
                warmup,
                rep,
                _n_warmup,
                _n_repeat,
                quantiles,
                return_mode,
                early_stop_baseline,
            )
        return _gpu(
            fn,
            index,
            warmup,
            rep,
            _n_warmup,
            _n_repeat,
            quantiles,
            backend,
            return_mode,
            fast_flush,
            cache_size,
            early_stop_baseline,
        )


def bench(fn, warmup=25, rep=100, device="cpu", return_mode="median") -> float:
    """Milliseconds per call of ``fn``: ``warmup`` untimed then ``rep`` timed calls (counts).

    tilelang's own benchmarks use this fixed-count form; upstream programs use :func:`do_bench`.
    """
    if return_mode not in _MODES:
        raise ValueError(f"bench: return_mode must be one of {_MODES}, got {return_mode!r}")
    for _ in range(max(1, warmup)):
        fn()
    times = []
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        for _ in range(rep):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(rep):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return _aggregate(times, None, return_mode)

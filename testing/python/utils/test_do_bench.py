"""tilelang.profiler.do_bench (upstream's signature: ms budgets, backends, return modes) and the
kernel profiler's upstream methods, on the CPU; the GPU timing backends under ``cuda``."""

from __future__ import annotations

import time

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.profiler import do_bench


class Counter:
    """A callable that sleeps ``ms`` per call (or the next of ``schedule``) and counts calls."""

    def __init__(self, ms=0.0, schedule=None):
        self.ms, self.schedule, self.calls = ms, schedule, 0

    def __call__(self):
        ms = self.schedule[self.calls % len(self.schedule)] if self.schedule else self.ms
        self.calls += 1
        if ms:
            time.sleep(ms / 1e3)


def test_cpu_timing_measures_the_call():
    ms = do_bench(Counter(3.0), warmup=5, rep=30, device="cpu")
    assert 3.0 <= ms < 30.0


def test_explicit_counts_override_budgets():
    fn = Counter()
    do_bench(fn, _n_warmup=3, _n_repeat=7, device="cpu")
    assert fn.calls == 1 + 5 + 3 + 7  # first call, 5-call estimate, warm-up, timed


def test_budgets_set_the_counts():
    fn = Counter(2.0)
    do_bench(fn, warmup=10, rep=20, device="cpu")
    # ~2 ms per call: at most 5 warm-up and 10 timed calls fit the budgets, at least one each
    assert 1 + 5 + 2 <= fn.calls <= 1 + 5 + 5 + 10


def test_return_modes_and_quantiles():
    schedule = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 6.0]
    kwargs = dict(_n_warmup=1, _n_repeat=7, device="cpu")
    got = {
        m: do_bench(Counter(schedule=schedule), return_mode=m, **kwargs)
        for m in ("min", "max", "mean", "median")
    }
    # each mode comes from its own run of the same schedule (six ~1 ms calls, one 6 ms):
    # compare with the host's sleep jitter in mind, not across runs to the microsecond
    # (a sleep lasts at least what it asks: the mean is at least 12/7 ms)
    assert 1.0 <= got["min"] < got["mean"] and got["median"] < 5.0
    assert got["mean"] >= 12 / 7 and got["max"] >= 6.0 > got["mean"]
    q = do_bench(Counter(schedule=schedule), quantiles=[0.1, 0.5, 0.99], **kwargs)
    assert isinstance(q, list) and len(q) == 3 and q[0] <= q[1] <= q[2]
    assert isinstance(do_bench(Counter(), quantiles=[0.5], **kwargs), float)


def test_early_stop_returns_the_estimate():
    fn = Counter(2.0)
    ms = do_bench(fn, device="cpu", early_stop_baseline=0.5)
    assert ms >= 2.0 and fn.calls == 1 + 5


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(backend="nsight"), ValueError, "backend must be one of"),
        (dict(backend="msprof"), ValueError, "Ascend-only"),
        (dict(return_mode="avg"), ValueError, "return_mode must be one of"),
        (dict(warmup=-1), ValueError, "warmup must be a finite number"),
        (dict(rep=float("inf")), ValueError, "rep must be a finite number"),
        (dict(_n_repeat=-2), ValueError, "_n_repeat must be an int"),
        (dict(quantiles=[1.5]), ValueError, "quantiles must lie in"),
        (dict(device="mps"), ValueError, "device must be a CPU or CUDA device"),
    ],
)
def test_misuse_names_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        do_bench(Counter(), **kwargs)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        do_bench(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_device_without_gpu():
    with pytest.raises(RuntimeError, match="torch sees no GPU"):
        do_bench(Counter(), device="cuda")


def add(n, block=16):
    @T.prim_func
    def main(
        A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")
    ):
        with T.Kernel(T.ceildiv(n, block), threads=16) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


@pytest.fixture(scope="module")
def add_kernel():
    return tilelang.compile(add(256), out_idx=-1, target="cpu")


def test_profiler_do_bench_takes_upstream_arguments(add_kernel):
    profiler = add_kernel.get_profiler(tilelang.TensorSupplyType.Normal)
    ms = profiler.do_bench(warmup=2, rep=5, backend="cupti", return_mode="median")
    assert isinstance(ms, float) and 0 < ms < 100
    q = profiler.do_bench(n_warmup=1, n_repeat=5, quantiles=[0.2, 0.8])
    assert len(q) == 2 and q[0] <= q[1]
    calls = []
    profiler.do_bench(lambda a, b: calls.append((a.shape, b.shape)), n_warmup=1, n_repeat=2)
    assert calls and all(c == ((256,), (256,)) for c in calls)


def test_profiler_dynamic_symbolic_constraints():
    @T.prim_func
    def dyn(
        A: T.Tensor((T.dynamic("m"), 4), "float32"), B: T.Tensor((T.dynamic("m"), 4), "float32")
    ):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(A.shape[0], 4):
                B[i, j] = A[i, j]

    kernel = tilelang.compile(dyn, target="cpu")
    seen = []
    kernel.get_profiler().do_bench(
        lambda a, b: seen.append(a.shape),
        n_warmup=1,
        n_repeat=1,
        dynamic_symbolic_constraints={"m": 37},
    )
    assert seen[0] == (37, 4)
    with pytest.raises(ValueError, match="no value for symbolic dimension 'm'"):
        kernel.get_profiler().do_bench(dynamic_symbolic_constraints={"n": 3})


def test_profiler_upstream_checks(add_kernel):
    profiler = add_kernel.get_profiler()
    assert profiler.func is add_kernel
    a, b = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(profiler(a, b), a + b)
    profiler.assert_consistent(repeat=3)
    seen = {}

    def check(outs, refs):
        seen["n"] = (len(outs), len(refs))
        assert torch.allclose(outs[0], refs[0])

    profiler.manual_assert_close(lambda x, y: x + y, manual_check_prog=check)
    assert seen["n"] == (1, 1)
    with pytest.raises(AssertionError):
        profiler.manual_assert_close(lambda x, y: x - y, manual_check_prog=check)
    with pytest.raises(TypeError, match="manual_check_prog must be a callable"):
        profiler.manual_assert_close(lambda x, y: x + y)


@pytest.mark.no_sanitizer  # timings (and CUPTI, which the sanitizer holds)
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["event", "cupti", "cudagraph", "wall"])
def test_gpu_backends_agree_on_a_matmul(backend):
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    ref = do_bench(lambda: a @ a, backend="event", return_mode="median")
    ms = do_bench(lambda: a @ a, backend=backend, return_mode="median")
    # .ci/gpu runs test shards side by side on one GPU: the host clock ("wall") also counts
    # waits for other processes' kernels, so only the lower bound is tight
    assert ms > 0 and 0.3 * ref < ms < 3 * ref + 5.0

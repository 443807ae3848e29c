"""Profiler: random inputs for a kernel, correctness against a reference, and timing."""

from __future__ import annotations

import enum
import time

from .. import errors


class TensorSupplyType(enum.Enum):
    """How the profiler fills input tensors (upstream's names)."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def _make_tensor(info, device, supply):
    import torch

    if not all(isinstance(d, int) for d in info.shape):
        raise errors.KernelArgumentError(
            f"parameter {info.name!r} has symbolic shape {info.shape}: pass input_tensors"
        )
    dtype = info.torch_dtype()  # info: a kernel's ParamInfo (tilelang.jit.params)
    shape = info.shape
    is_float = dtype.is_floating_point
    if supply == TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=dtype, device=device)
    if supply == TensorSupplyType.One:
        return torch.ones(shape, dtype=dtype, device=device)
    if supply == TensorSupplyType.Integer or not is_float:
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, device=device).bool()
        low, high = (-2, 3) if dtype.is_signed or is_float else (0, 4)
        return torch.randint(low, high, shape, device=device).to(dtype)
    if supply == TensorSupplyType.Uniform:
        return torch.empty(shape, dtype=torch.float32, device=device).uniform_(-1, 1).to(dtype)
    return torch.randn(shape, dtype=torch.float32, device=device).to(dtype)


class Profiler:
    """Feeds a JITKernel inputs, checks it against a reference, times it."""

    def __init__(self, kernel, supply_type=TensorSupplyType.Auto):
        self.kernel = kernel
        self.supply_type = supply_type

    @property
    def device(self):
        return "cuda" if self.kernel.target["kind"] == "cuda" else "cpu"

    def _inputs(self):
        k = self.kernel
        return [
            _make_tensor(k.params[i], self.device, self.supply_type)
            for i in range(len(k.params))
            if i not in k.out_idx
        ]

    def _as_list(self, value):
        if value is None:
            return []
        return list(value) if isinstance(value, list | tuple) else [value]

    def assert_allclose(
        self,
        reference_program,
        input_tensors=None,
        atol: float = 1e-2,
        rtol: float = 1e-2,
        max_mismatched_ratio: float = 0.01,
    ):
        """Run the kernel and ``reference_program`` on the same inputs and compare every output."""
        import torch

        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        outs = self._as_list(self.kernel(*inputs))
        if not self.kernel.out_idx:
            outs = [inputs[i] for i in range(len(inputs))]
        refs = self._as_list(reference_program(*inputs))
        if len(refs) != len(outs):
            raise AssertionError(
                f"the reference returned {len(refs)} outputs, the kernel {len(outs)}"
            )
        for k, (out, ref) in enumerate(zip(outs, refs)):
            out = out.double().cpu()
            ref = torch.as_tensor(ref).double().cpu()
            if out.shape != ref.shape:
                raise AssertionError(
                    f"output {k}: shape {tuple(out.shape)} vs reference {tuple(ref.shape)}"
                )
            bad = ~torch.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=False)
            ratio = bad.float().mean().item() if bad.numel() else 0.0
            if ratio > max_mismatched_ratio or torch.isnan(out).any():
                diff = (out - ref).abs().max().item()
                raise AssertionError(
                    f"output {k}: {ratio:.2%} of elements differ beyond atol={atol}, rtol={rtol} "
                    f"(max abs diff {diff:.4g})"
                )

    def run_once(self, func=None):
        """Run the kernel (or ``func``) once on fresh inputs and return its result."""
        inputs = self._inputs()
        return (func or self.kernel)(*inputs)

    def do_bench(
        self,
        func=None,
        warmup: int = 25,
        rep: int = 100,
        n_warmup: int = 1,
        n_repeat: int = 1,
        input_tensors=None,
        return_mode: str = "median",
    ) -> float:
        """Milliseconds per call of the kernel (or ``func``): median of ``rep`` timed runs."""
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        fn = func or self.kernel
        return bench(
            lambda: fn(*inputs), warmup=warmup, rep=rep, device=self.device, return_mode=return_mode
        )


def bench(fn, warmup=25, rep=100, device="cpu", return_mode="median") -> float:
    """Milliseconds per call of ``fn``: warm-up, then ``rep`` timed calls (CUDA events on GPU)."""
    import statistics

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
    if return_mode == "mean":
        return statistics.fmean(times)
    if return_mode == "min":
        return min(times)
    return statistics.median(times)


def do_bench(fn, warmup=25, rep=100, device=None, return_mode="median") -> float:
    """Time any callable (``tilelang.profiler.do_bench``)."""
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except Exception:  # noqa: BLE001
            device = "cpu"
    return bench(fn, warmup, rep, device, return_mode)

"""Profiler: random inputs for a kernel, correctness against a reference, and timing.

``kernel.get_profiler(supply_type)`` returns a :class:`Profiler`; :func:`do_bench` times any
callable (see ``bench.py``).
"""

from __future__ import annotations

from ..utils.tensor import (  # noqa: F401
    TensorSupplyType,
    get_tensor_supply,
    is_float8_dtype,
    torch_assert_close,
)
from .bench import bench, do_bench

__all__ = ["Profiler", "TensorSupplyType", "bench", "do_bench"]


class Profiler:
    """Feeds a JITKernel inputs, checks it against a reference, times it."""

    def __init__(self, kernel, supply_type=TensorSupplyType.Auto):
        self.kernel = kernel
        self.supply_type = supply_type

    @property
    def device(self):
        return "cuda" if self.kernel.target["kind"] == "cuda" else "cpu"

    def _inputs(self, dynamic_symbolic_constraints: dict | None = None):
        k = self.kernel
        supply = get_tensor_supply(self.supply_type, device=self.device)
        out = []
        for i, param in enumerate(k.params):
            if i in k.out_idx:
                continue
            if dynamic_symbolic_constraints:
                param = _bind_symbols(param, dynamic_symbolic_constraints)
            out.append(supply(param))
        return out

    def __call__(self, *args, **kwargs):
        """Call the kernel."""
        return self.kernel(*args, **kwargs)

    @property
    def func(self):
        """The kernel this profiler runs (upstream's ``profiler.func``)."""
        return self.kernel

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
            # NaN where the reference has NaN matches (upstream's equal_nan, e.g. bits viewed
            # as another float type); a NaN the reference does not have always fails
            bad = ~torch.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
            ratio = bad.float().mean().item() if bad.numel() else 0.0
            if ratio > max_mismatched_ratio or (torch.isnan(out) & ~torch.isnan(ref)).any():
                diff = (out - ref).abs().max().item()
                raise AssertionError(
                    f"output {k}: {ratio:.2%} of elements differ beyond atol={atol}, rtol={rtol} "
                    f"(max abs diff {diff:.4g})"
                )

    def run_once(self, func=None):
        """Run the kernel (or ``func``) once on fresh inputs and return its result."""
        inputs = self._inputs()
        return (func or self.kernel)(*inputs)

    def manual_assert_close(self, reference_program, input_tensors=None, manual_check_prog=None):
        """Run kernel and reference on the same inputs; ``manual_check_prog(outs, refs)`` judges."""
        if not callable(manual_check_prog):
            raise TypeError("manual_assert_close: manual_check_prog must be a callable(outs, refs)")
        inputs = list(input_tensors) if input_tensors is not None else self._inputs()
        refs = self._as_list(reference_program(*inputs))
        outs = self._as_list(self.kernel(*inputs))
        if len(outs) != len(refs):
            raise AssertionError(
                f"the reference returned {len(refs)} outputs, the kernel {len(outs)}"
            )
        manual_check_prog(outs, refs)

    def assert_consistent(self, repeat: int = 10):
        """Run the kernel ``repeat`` more times on the same inputs; every output must be identical."""
        import torch

        inputs = self._inputs()
        first = [t.clone() for t in self._as_list(self.kernel(*inputs))]
        for r in range(repeat):
            for k, (a, b) in enumerate(zip(self._as_list(self.kernel(*inputs)), first)):
                if not torch.equal(a, b):
                    raise AssertionError(f"output {k} differs between run 0 and run {r + 1}")

    def do_bench(
        self,
        func=None,
        warmup: float = 25,
        rep: float = 100,
        n_warmup: int = 0,
        n_repeat: int = 0,
        input_tensors=None,
        backend: str = "event",
        quantiles=None,
        return_mode: str = "mean",
        dynamic_symbolic_constraints: dict | None = None,
        device=None,
        early_stop_baseline: float | None = None,
    ):
        """Milliseconds per call of the kernel (or ``func``) on the profiler's inputs.

        Arguments as :func:`tilelang.profiler.do_bench` (``warmup``/``rep`` in ms,
        ``n_warmup``/``n_repeat`` counts overriding them); ``input_tensors`` or
        ``dynamic_symbolic_constraints`` (``{"m": 2048}``: sizes for symbolic dimensions)
        choose the inputs. A CPU-target kernel is timed on the host clock.
        """
        if input_tensors is not None:
            inputs = list(input_tensors)
        else:
            inputs = self._inputs(dynamic_symbolic_constraints)
        fn = func or self.kernel
        if device is None and self.device == "cpu":
            device = "cpu"
        return do_bench(
            lambda: fn(*inputs),
            warmup=warmup,
            rep=rep,
            _n_warmup=n_warmup,
            _n_repeat=n_repeat,
            quantiles=quantiles,
            backend=backend,
            return_mode=return_mode,
            device=device,
            early_stop_baseline=early_stop_baseline,
        )


def _bind_symbols(param, constraints: dict):
    """``param`` with its symbolic dimensions replaced by ``constraints[name]``."""
    import dataclasses

    shape = []
    for dim in param.shape:
        if isinstance(dim, int):
            shape.append(dim)
            continue
        name = getattr(dim, "name", None) or str(dim)
        if name not in constraints:
            raise ValueError(
                f"dynamic_symbolic_constraints has no value for symbolic dimension {name!r} "
                f"of parameter {param.name!r} (given: {sorted(constraints)})"
            )
        shape.append(int(constraints[name]))
    return dataclasses.replace(param, shape=shape)

"""``@tilelang.autotune`` over ``@tilelang.jit``: pick the fastest config, remember it on disk.

    @tilelang.autotune(configs=[{"block_M": 64}, {"block_M": 128}], warmup=5, rep=20)
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128):
        ...
        return kernel_prim_func

    kernel = matmul(1024, 1024, 1024)      # tunes once, then returns the best JITKernel

A run: the candidates are traced one by one (tracing is not thread-safe), compiled in
parallel on a ``ThreadPoolExecutor`` (compilation is mostly C++ and the system
compiler, which run without the GIL), then checked against ``ref_prog`` (unless
``skip_check``) and timed one by one with the kernel's profiler, each within
``timeout`` seconds. The best config is stored as JSON under
``<cache dir>/autotuner/<key>.json``; the key covers the function's source, its
closure constants, the call's arguments, the configs, the compile options (target,
out_idx, pass configs, flags), the check options and the versions of tilelang and
TIRx. A later run (in any process) with the same key compiles only the stored config.
``TILELANG_DISABLE_CACHE=1`` or ``TILELANG_AUTO_TUNING_DISABLE_CACHE=1`` skip the record.

Environment (upstream names): ``TILELANG_AUTO_TUNING_CPU_COUNTS`` (compile workers),
``TILELANG_AUTO_TUNING_CPU_UTILITIES`` (share of the cores, default 0.9),
``TILELANG_AUTO_TUNING_MAX_CPU_COUNT``; ``TILELANG_AUTO_TUNING_PROGRESS=0`` hides the
progress bars.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable

from .. import errors
from ..cache import register_memory_cache
from ..profiler import TensorSupplyType
from .capture import get_autotune_inputs
from .param import AutotuneResult, CompileArgs, ProfileArgs, load_record, save_record
from .report import trial_rows

logger = logging.getLogger("tilelang.autotuner")

_MEMORY: dict[str, AutotuneResult] = {}
_MEMORY_LOCK = threading.Lock()


def clear_memory_cache() -> None:
    """Forget the results tuned in this process (``tilelang.cache.clear_cache`` calls it)."""
    with _MEMORY_LOCK:
        _MEMORY.clear()


register_memory_cache(clear_memory_cache)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def num_workers() -> int:
    """Compile workers: ``TILELANG_AUTO_TUNING_CPU_COUNTS`` or 90% of the usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    counts = int(os.environ.get("TILELANG_AUTO_TUNING_CPU_COUNTS", "-1"))
    if counts > 0:
        workers = min(counts, cores)
    else:
        share = float(os.environ.get("TILELANG_AUTO_TUNING_CPU_UTILITIES", "0.9"))
        workers = max(1, int(cores * share))
    cap = int(os.environ.get("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", "-1"))
    return min(workers, cap) if cap > 0 else workers


def _normalize(value):
    """A JSON-able, stable stand-in for an argument (tensors by dtype and shape)."""
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return ["tensor", str(value.dtype), [int(d) for d in value.shape]]
    return repr(value)


def _source_of(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return code.co_code.hex() if code is not None else repr(fn)


def _closure_constants(fn) -> dict:
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if value is None or isinstance(value, bool | int | float | str | tuple):
            out[name] = _normalize(value)
    return out


class _Timeout(Exception):
    pass


#: a config key that is not a parameter: the candidate's own pass configs (upstream's)
PASS_CONFIGS_KEY = "pass_configs"


def _params_of(config: dict) -> dict:
    """A config's function arguments (its ``pass_configs`` entry left out)."""
    return {k: v for k, v in config.items() if k != PASS_CONFIGS_KEY}


def _compile_one(compile_args, func, config: dict):
    """``func`` compiled with ``config``'s own pass configs, if it has any."""
    own = config.get(PASS_CONFIGS_KEY)
    return compile_args.compile_program(func, own) if own else compile_args.compile_program(func)


def _compile_all(compile_args, traced, timeout):
    """Compile the traced candidates in parallel; yield ``(i, config, func, kernel | error)``.

    At most ``num_workers()`` compiles run at once, each on its own daemon thread. A
    candidate still compiling ``timeout`` seconds after it started is reported as a
    :class:`_Timeout` and abandoned: a thread cannot be killed, so it finishes in the
    background (or dies with the interpreter) and its result is dropped, while its worker
    slot goes to the next candidate. A compiler that hangs on one config cannot stall a run.
    """
    results: queue.Queue = queue.Queue()

    def task(i, func):
        try:
            outcome = _compile_one(compile_args, func, by_index[i][0])
        except BaseException as err:  # noqa: BLE001 - reported per config
            outcome = err
        results.put((i, outcome))

    todo = list(traced)
    by_index = {i: (config, func) for i, config, func in traced}
    running: dict[int, float] = {}
    workers = max(1, num_workers())
    progress = _progress_bar(total=len(todo), desc="Compiling configurations")
    try:
        while todo or running:
            while todo and len(running) < workers:
                i, _, func = todo.pop(0)
                running[i] = time.perf_counter()
                threading.Thread(target=task, args=(i, func), daemon=True).start()
            try:
                i, outcome = results.get(timeout=0.2)
            except queue.Empty:
                i = None
            if i is not None and i in running:
                del running[i]
                progress.update(1)
                yield i, *by_index[i], outcome
            if timeout and timeout > 0:
                now = time.perf_counter()
                for j, began in list(running.items()):
                    if now - began > timeout:
                        del running[j]
                        progress.update(1)
                        yield j, *by_index[j], _Timeout(f"exceeded {timeout} s")
    finally:
        progress.close()


def _run_with_timeout(fn, timeout):
    """``fn()``, interrupted after ``timeout`` s on the main thread (SIGALRM); else checked after."""
    if not timeout or timeout <= 0:
        return fn()
    main = threading.current_thread() is threading.main_thread()
    if main and hasattr(signal, "setitimer"):

        def on_alarm(signum, frame):
            raise _Timeout(f"exceeded {timeout} s")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, float(timeout))
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    start = time.perf_counter()
    out = fn()
    if time.perf_counter() - start > timeout:
        raise _Timeout(f"exceeded {timeout} s")
    return out


class _NoProgress:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_enabled() -> bool:
    return os.environ.get("TILELANG_AUTO_TUNING_PROGRESS", "1").strip() not in {"0", "false", "off"}


def _progress_bar(total: int, desc: str):
    """A tqdm bar updated by hand (or a silent stand-in when progress bars are off)."""
    if not _progress_enabled():
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc)


def _progress(iterable, **kwargs):
    if not _progress_enabled():
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, **kwargs)


class AutoTuner:
    """Tune ``fn`` (a function returning a ``T.prim_func``) over ``configs``.

    ``configs`` is a list of dicts of keyword arguments of ``fn``, or a callable taking
    ``fn``'s fixed arguments and returning such a list.
    """

    def __init__(self, fn: Callable, configs):
        if not callable(fn):
            raise TypeError(f"fn must be a function returning a T.prim_func, got {fn!r}")
        self.fn = fn
        self.configs = configs
        self.compile_args = CompileArgs()
        self.profile_args = ProfileArgs()
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._jit = None  # the @jit factory, when tuning one (its eager form traces itself)

    @classmethod
    def from_kernel(cls, kernel: Callable, configs) -> AutoTuner:
        """An AutoTuner for ``kernel`` (a function returning a prim_func, or a ``@jit`` factory)."""
        tuner = cls(getattr(kernel, "fn", kernel), configs)
        if hasattr(kernel, "get_tir") and hasattr(kernel, "fn"):
            tuner._jit = kernel
        options = getattr(kernel, "options", None)
        if options:
            tuner.set_compile_args(**options)
        return tuner

    def set_compile_args(
        self,
        out_idx=None,
        target="auto",
        execution_backend="auto",
        target_host=None,
        verbose=False,
        pass_configs=None,
        compile_flags=None,
    ) -> AutoTuner:
        """Options each candidate is compiled with (as ``tilelang.compile``); returns self."""
        self.compile_args = CompileArgs(
            out_idx, target, execution_backend, target_host, verbose, pass_configs, compile_flags
        )
        return self

    def set_profile_args(self, **kwargs) -> AutoTuner:
        """Check/timing options (the fields of :class:`ProfileArgs`); returns self."""
        unknown = set(kwargs) - set(ProfileArgs.__dataclass_fields__)
        if unknown:
            raise TypeError(f"set_profile_args: unknown arguments {sorted(unknown)}")
        self.profile_args = ProfileArgs(**kwargs)
        return self

    def set_kernel_parameters(self, args: tuple = (), kwargs: dict | None = None) -> AutoTuner:
        """The fixed arguments ``fn`` gets besides each config's; returns self."""
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        return self

    # -- configs and key ---------------------------------------------------------
    def _config_list(self) -> list[dict]:
        configs = self.configs
        if callable(configs):
            configs = configs(*self._args, **self._kwargs)
        if isinstance(configs, dict):
            raise TypeError("configs must be a list of dicts (one per candidate), got one dict")
        configs = list(configs or [])
        if not configs:
            raise ValueError("configs is empty: give at least one {parameter: value} dict")
        params = inspect.signature(self.fn).parameters
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
        for i, config in enumerate(configs):
            if not isinstance(config, dict):
                raise TypeError(f"configs[{i}] must be a dict, got {type(config).__name__}")
            if not isinstance(config.get(PASS_CONFIGS_KEY, {}), dict):
                raise TypeError(f"configs[{i}]['pass_configs'] must be a dict of pass configs")
            unknown = [k for k in _params_of(config) if k not in params and not takes_kwargs]
            if unknown:
                raise ValueError(
                    f"configs[{i}] names {unknown}, which are not parameters of "
                    f"{self.fn.__qualname__}{inspect.signature(self.fn)}"
                )
        return configs

    def key_material(self, configs: list[dict]) -> dict:
        """Everything the stored best config depends on (see the module docstring)."""
        from ..backends.registry import resolve_target
        from ..cache.kernel_cache import versions
        from ..engine.pass_config import OBSERVATION_KEYS, normalize_pass_configs

        ca, pa = self.compile_args, self.profile_args
        pass_configs = {
            k: v
            for k, v in normalize_pass_configs(ca.pass_configs).items()
            if k not in OBSERVATION_KEYS
        }
        inputs = get_autotune_inputs()
        return {
            "format": 1,
            "versions": versions(),
            "function": f"{self.fn.__module__}.{self.fn.__qualname__}",
            "source": _source_of(self.fn),
            "closure": _closure_constants(self.fn),
            "args": _normalize(list(self._args)),
            "kwargs": _normalize(self._kwargs),
            "configs": _normalize(configs),
            "target": _normalize(resolve_target(ca.target)),
            "out_idx": _normalize(ca.out_idx),
            "execution_backend": str(ca.execution_backend),
            "pass_configs": _normalize(pass_configs),
            "compile_flags": _normalize(ca.compile_flags),
            "check": [pa.skip_check, pa.ref_prog is not None, pa.rtol, pa.atol],
            "supply": [_normalize(pa.supply_type), pa.supply_prog is not None],
            "inputs": None if inputs is None else _normalize(list(inputs)),
        }

    @staticmethod
    def _record_path(key: str):
        from ..cache.kernel_cache import get_cache_dir

        return get_cache_dir() / "autotuner" / f"{key}.json"

    @staticmethod
    def _disk_enabled() -> bool:
        from ..cache.kernel_cache import is_cache_enabled

        return is_cache_enabled() and not _env_flag("TILELANG_AUTO_TUNING_DISABLE_CACHE")

    # -- one candidate -----------------------------------------------------------
    def _inputs_for(self, kernel, profiler, shared: dict):
        captured = get_autotune_inputs()
        if captured is not None:
            return list(captured)
        pa = self.profile_args
        if pa.cache_input_tensors and "inputs" in shared:
            return shared["inputs"]
        if pa.supply_prog is not None:
            params = [p for i, p in enumerate(kernel.params) if i not in kernel.out_idx]
            inputs = list(pa.supply_prog(params))
        else:
            inputs = profiler._inputs()
        shared["inputs"] = inputs
        return inputs

    def _bench(self, kernel, warmup, rep, shared: dict, baseline=None) -> float:
        pa = self.profile_args
        profiler = kernel.get_profiler(pa.supply_type)
        inputs = self._inputs_for(kernel, profiler, shared)
        if not pa.skip_check and pa.ref_prog is not None:
            if pa.manual_check_prog is not None:
                pa.manual_check_prog(kernel(*inputs), pa.ref_prog(*inputs))
            else:
                profiler.assert_allclose(
                    pa.ref_prog,
                    input_tensors=inputs,
                    atol=pa.atol,
                    rtol=pa.rtol,
                    max_mismatched_ratio=pa.max_mismatched_ratio,
                )
        if baseline is not None:  # early stop: a short probe first
            probe = profiler.do_bench(
                n_warmup=1, n_repeat=3, input_tensors=inputs, return_mode="median"
            )
            if probe > baseline:
                return probe
        # median: robust to a stray slow call on a loaded machine (the ranking is what matters)
        latency = profiler.do_bench(
            warmup=warmup, rep=rep, input_tensors=inputs, return_mode="median"
        )
        if pa.ref_prog is not None and "ref_latency" not in shared:
            shared["ref_latency"] = profiler.do_bench(
                pa.ref_prog, warmup=warmup, rep=rep, input_tensors=inputs, return_mode="median"
            )
        return latency

    # -- the run -----------------------------------------------------------------
    def run(
        self,
        warmup: int | None = None,
        rep: int | None = None,
        timeout=None,
        enable_grouped_compile: bool = False,
        group_compile_size: int = 2,
        early_stop: bool | None = None,
        early_stop_factor: float | None = None,
    ):
        """Tune (or reuse the stored best config) and return an :class:`AutotuneResult`.

        ``early_stop``/``early_stop_factor``: see :class:`ProfileArgs`. Upstream's
        ``enable_grouped_compile``/``group_compile_size`` batch configs into shared
        compile units; here every config is its own unit, compiled in parallel threads,
        so they only are checked."""
        pa = self.profile_args
        warmup = pa.warmup if warmup is None else warmup
        rep = pa.rep if rep is None else rep
        timeout = pa.timeout if timeout is None else timeout
        if not isinstance(group_compile_size, int) or group_compile_size < 1:
            raise ValueError(
                f"group_compile_size must be a positive int, got {group_compile_size!r}"
            )
        early = {
            "early_stop": pa.early_stop if early_stop is None else bool(early_stop),
            "early_stop_factor": pa.early_stop_factor
            if early_stop_factor is None
            else early_stop_factor,
        }
        if early["early_stop_factor"] < 1.0:
            raise ValueError(f"early_stop_factor must be >= 1.0, got {early['early_stop_factor']}")
        self._early = early
        configs = self._config_list()
        material = self.key_material(configs)
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        with _MEMORY_LOCK:
            hit = _MEMORY.get(key)
        if hit is not None:
            return hit
        result = self._from_disk(key, configs) if self._disk_enabled() else None
        if result is None:
            result = self._tune(configs, warmup, rep, timeout)
            if self._disk_enabled():
                try:
                    save_record(self._record_path(key), key, result, material)
                except OSError as err:
                    logger.warning("could not store the autotuning result: %s", err)
        with _MEMORY_LOCK:
            _MEMORY[key] = result
        return result

    def _trace(self, config: dict):
        """The traced function of one candidate: the factory's result, or (an eager
        ``@jit`` body, whose ``T.const`` sizes may be given as keywords) its trace."""
        kwargs = {**self._kwargs, **_params_of(config)}
        jit = self._jit
        if jit is not None and jit._resolve_mode(self._args, kwargs) == "eager":
            return jit.get_tir(*self._args, **kwargs)
        return self.fn(*self._args, **kwargs)

    def _from_disk(self, key: str, configs) -> AutotuneResult | None:
        allowed = set().union(*(c.keys() for c in configs))
        record = load_record(self._record_path(key), key, allowed)
        if record is None:
            return None
        config = record["config"]
        try:
            func = self._trace(config)
            kernel = _compile_one(self.compile_args, func, config)
        except Exception as err:  # noqa: BLE001 - a stale record: tune again
            logger.warning("stored best config %s no longer compiles (%s); retuning", config, err)
            return None
        _annotate(kernel, record.get("latency"), config, record.get("ref_latency"))
        return AutotuneResult(
            latency=record.get("latency"),
            config=config,
            ref_latency=record.get("ref_latency"),
            libcode=kernel.get_kernel_source(),
            func=func,
            kernel=kernel,
            from_disk=True,
        )

    def _tune(self, configs, warmup, rep, timeout) -> AutotuneResult:
        failures: dict[int, str] = {}
        traced = []
        for i, config in enumerate(configs):  # tracing is not thread-safe: one at a time
            try:
                traced.append((i, config, self._trace(config)))
            except Exception as err:  # noqa: BLE001 - a config that does not trace is skipped
                failures[i] = f"trace: {err}"
        compiled = []
        for i, config, func, outcome in _compile_all(self.compile_args, traced, timeout):
            if isinstance(outcome, BaseException):
                failures[i] = f"compile: {type(outcome).__name__}: {outcome}"
            else:
                compiled.append((i, config, func, outcome))
        compiled.sort(key=lambda item: item[0])
        best = None
        shared: dict = {}
        latencies: dict[int, float] = {}
        for i, config, func, kernel in _progress(compiled, desc="Benchmarking configurations"):
            try:
                early = getattr(self, "_early", {})
                baseline = (
                    best[0] * early["early_stop_factor"]
                    if early.get("early_stop") and best is not None
                    else None
                )
                latency = _run_with_timeout(
                    lambda kernel=kernel, baseline=baseline: self._bench(
                        kernel, warmup, rep, shared, baseline
                    ),
                    timeout,
                )
            except Exception as err:  # noqa: BLE001 - includes timeouts and failed checks
                failures[i] = f"benchmark: {type(err).__name__}: {err}"
                continue
            logger.info("config %d %s: %.4f ms", i, config, latency)
            latencies[i] = latency
            if best is None or latency < best[0]:
                best = (latency, config, func, kernel)
        for i, reason in sorted(failures.items()):
            logger.warning("autotune: config %d %s rejected: %s", i, configs[i], reason)
        if best is None:
            detail = "; ".join(f"configs[{i}] {reason}" for i, reason in sorted(failures.items()))
            raise errors.CompileError(
                f"autotuning {self.fn.__qualname__}: no config compiled and passed its "
                f"benchmark ({detail[:2000]})"
            )
        latency, config, func, kernel = best
        ref_latency = shared.get("ref_latency")
        _annotate(kernel, latency, config, ref_latency)
        return AutotuneResult(
            latency=latency,
            config=config,
            ref_latency=ref_latency,
            libcode=kernel.get_kernel_source(),
            func=func,
            kernel=kernel,
            failures=failures,
            trials=trial_rows(configs, latencies, failures),
        )


def _annotate(kernel, latency, config, ref_latency) -> None:
    """Record the tuning outcome on the kernel (upstream's ``kernel.latency``/``.config``)."""
    kernel.latency, kernel.config, kernel.ref_latency = latency, config, ref_latency


class AutoTuneImpl:
    """What ``@tilelang.autotune`` returns: call it like the ``@jit`` factory, get the best kernel."""

    def __init__(self, jit_impl, configs, profile_args: ProfileArgs):
        self.jit_impl = jit_impl
        self.configs = configs
        self.profile_args = profile_args
        self._results: dict = {}
        self._lock = threading.Lock()
        self.__wrapped__ = jit_impl.fn
        self.__doc__ = jit_impl.fn.__doc__
        self.__name__ = getattr(jit_impl.fn, "__name__", "kernel")

    def _tunables(self, configs) -> set:
        return set().union(*(c.keys() for c in configs)) if configs else set()

    def tune(self, *args, **kwargs) -> AutotuneResult:
        """Tune for these arguments (or reuse the result) and return the AutotuneResult."""
        key = json.dumps([_normalize(list(args)), _normalize(kwargs)], sort_keys=True)
        with self._lock:
            hit = self._results.get(key)
        if hit is not None:
            return hit
        tuner = AutoTuner.from_kernel(self.jit_impl, self.configs)
        tuner.profile_args = self.profile_args
        tuner.set_kernel_parameters(args, kwargs)
        result = tuner.run()
        with self._lock:
            self._results[key] = result
        return result

    def _given_tunables(self, args, kwargs) -> set:
        """The tunable parameters these arguments fix. Keywords that are not parameters
        of the function (an eager body's ``T.const`` names, ``compile(M=1024, ...)``) fix
        none."""
        configs = self.configs if not callable(self.configs) else None
        if configs is None:
            return set()
        signature = inspect.signature(self.jit_impl.fn)
        params = signature.parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            named = kwargs
        else:
            named = {k: v for k, v in kwargs.items() if k in params}
        bound = signature.bind_partial(*args, **named)
        return self._tunables(configs) & set(bound.arguments)

    def __call__(self, *args, **kwargs):
        """The best kernel for these arguments; arguments that fix a tunable skip tuning."""
        given = self._given_tunables(args, kwargs)
        if given:
            logger.info("tunable parameters %s given explicitly: not tuning", sorted(given))
            return self.jit_impl(*args, **kwargs)
        return self.tune(*args, **kwargs).kernel

    def compile(self, *args, **kwargs):
        """The kernel for these arguments: compiled as given when they fix a tunable
        (``T.const`` values may come as keywords), else the best one after tuning."""
        given = self._given_tunables(args, kwargs)
        if given:
            logger.info("tunable parameters %s given explicitly: not tuning", sorted(given))
            return self.jit_impl.compile(*args, **kwargs)
        return self(*args, **kwargs)

    def get_tir(self, *args, **kwargs):
        """The traced function of the best config."""
        return self.tune(*args, **kwargs).func


def autotune(
    func=None,
    *,
    configs,
    warmup: int = 25,
    rep: int = 100,
    timeout: float = 100,
    supply_type: TensorSupplyType = TensorSupplyType.Auto,
    ref_prog: Callable | None = None,
    supply_prog: Callable | None = None,
    rtol: float = 1e-2,
    atol: float = 1e-2,
    max_mismatched_ratio: float = 0.01,
    skip_check: bool = False,
    manual_check_prog: Callable | None = None,
    cache_input_tensors: bool = False,
    early_stop: bool = False,
    early_stop_factor: float = 2.0,
):
    """Decorator stacked over ``@tilelang.jit``: tune ``configs`` on first call per arguments.

    ``configs``: list of ``{parameter: value}`` dicts (or a callable of the call's
    arguments returning one). ``warmup``/``rep``: timed calls per candidate; ``timeout``:
    seconds per candidate's check + timing. ``ref_prog`` (with ``rtol``/``atol``/
    ``max_mismatched_ratio``, or ``manual_check_prog(outputs, reference)``) rejects wrong
    candidates unless ``skip_check``. Inputs: ``set_autotune_inputs(...)``, else
    ``supply_prog(params)``, else random tensors of ``supply_type``. ``early_stop``: see
    :class:`ProfileArgs`. A config may carry ``"pass_configs": {...}``, compiled with
    those pass configs over the jit's.
    """
    if func is not None:
        raise TypeError("use @tilelang.autotune(configs=...) with arguments, over @tilelang.jit")
    profile = ProfileArgs(
        warmup=warmup,
        rep=rep,
        timeout=timeout,
        supply_type=supply_type,
        ref_prog=ref_prog,
        supply_prog=supply_prog,
        rtol=rtol,
        atol=atol,
        max_mismatched_ratio=max_mismatched_ratio,
        skip_check=skip_check,
        manual_check_prog=manual_check_prog,
        cache_input_tensors=cache_input_tensors,
        early_stop=early_stop,
        early_stop_factor=early_stop_factor,
    )

    def decorator(impl):
        if not (hasattr(impl, "fn") and hasattr(impl, "options")):
            raise TypeError(
                "@tilelang.autotune must be stacked over @tilelang.jit (autotune on top), "
                f"got {impl!r}"
            )
        return AutoTuneImpl(impl, configs, profile)

    return decorator

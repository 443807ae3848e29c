"""Named, observable pipeline stages: :func:`run_stages` and observation sessions.

Writing a pipeline
------------------
A backend's ``lower()`` is a list of named stages, each a function from a TIRx
``Function`` to a TIRx ``Function``, run by :func:`run_stages`::

    from ...transform.instrument import on_body, run_stages

    def lower(func, pass_configs=None):
        return run_stages(func, [
            ("lower_threads", on_body(lower_threads)),
            ("lower_tile_ops", on_body(LowerTileOps("cpu"))),
            ...
        ], pass_configs)

Rules for a stage:

- ``name``: short snake_case, unique in its pipeline; it names the dump file and the
  row of the timing table, and appears in error notes.
- ``fn(func) -> func``: takes and returns a TIRx ``Function``; :func:`on_body` turns a
  statement rewrite ``body -> body`` into one. It must not return None. It reads its options from ``pass_configs``
  captured by the caller, never from the environment (keep settings in the cache key).
- User errors are raised as ``tilelang.errors.CompileError`` naming the user's line
  (``errors.compile_error(msg, loc)`` with the tile op's ``loc``); any other exception
  leaving a stage gets a note ``(in pipeline stage 'name')``.

When nothing is observed, ``run_stages`` just calls the stages in order: no timers,
no copies, no printing.

Observing a build
-----------------
Observation is switched on per kernel by ``pass_configs`` (see
``tilelang.engine.pass_config.PassConfigKey``) or for every kernel by the
environment:

- ``TILELANG_DUMP_IR=<dir>`` / ``tl.enable_dump_ir`` + ``tl.dump_ir_path``: the IR after
  every stage goes to ``<dir>/<kernel>-<hash8>/NNN_<stage>.py`` (``000_trace.py`` is the
  traced kernel; numbered files of an earlier dump of the same kernel are replaced).
- ``TILELANG_PASS_TIMING=1`` / ``tl.pass_profile``: a table of the time spent in each
  stage is printed to stderr when the kernel's build ends
  (``tl.pass_profile_threshold_ms`` hides the fast ones).
- ``tilelang.lower()`` records every stage's IR and returns it.

A :func:`session` spans one kernel build: the kernel cache opens one around
``backend.build`` (and skips the disk cache while observing, so the build really
runs), ``tilelang.lower`` opens a recording one. Inside a session TIRx's own passes
(``tvm_tirx.tirx.compile``) are observed as well, through a ``PassContext`` instrument,
and numbered in the same sequence (origin ``"tirx"``). ``run_stages`` called outside a
session opens one for its own duration. Sessions are per thread.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import errors
from .pass_config import DUMP_DIR_ALIAS, PassConfigKey, normalize_pass_configs

__all__ = [
    "Observation",
    "Session",
    "StageRecord",
    "current",
    "observation",
    "on_body",
    "run_stages",
    "session",
]

DEFAULT_DUMP_DIR = "./dump_ir"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_DUMP_FILE = re.compile(r"^\d{3}_.*\.py$")
_LOCAL = threading.local()


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return bool(value)


@dataclass(frozen=True)
class Observation:
    """What to observe while building one kernel."""

    dump_dir: str | None = None
    timing: bool = False
    threshold_ms: float = 0.0
    record: bool = False

    @property
    def active(self) -> bool:
        return bool(self.dump_dir or self.timing or self.record)


def observation(pass_configs=None, record: bool = False) -> Observation:
    """The observation requested by ``pass_configs`` and the environment.

    A key given in ``pass_configs`` wins over the environment variable
    (``tl.enable_dump_ir: False`` turns off a ``TILELANG_DUMP_IR`` dump).
    """
    cfg = normalize_pass_configs(pass_configs)
    path = cfg.get(PassConfigKey.TL_DUMP_IR_DIR.value) or cfg.get(DUMP_DIR_ALIAS)
    enable = cfg.get(PassConfigKey.TL_ENABLE_DUMP_IR.value)
    if enable is not None and not _truthy(enable):
        dump_dir = None
    elif path or (enable is not None and _truthy(enable)):
        dump_dir = str(path or DEFAULT_DUMP_DIR)
    else:
        env = os.environ.get("TILELANG_DUMP_IR", "").strip()
        if env.lower() in _FALSE:
            dump_dir = None
        else:
            dump_dir = DEFAULT_DUMP_DIR if env.lower() in _TRUE else env
    if PassConfigKey.TL_PASS_PROFILE.value in cfg:
        timing = _truthy(cfg[PassConfigKey.TL_PASS_PROFILE.value])
    else:
        timing = _truthy(os.environ.get("TILELANG_PASS_TIMING", ""))
    try:
        threshold = float(cfg.get(PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS.value, 0) or 0)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"pass_configs[{PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS.value!r}] must be a "
            f"number of milliseconds, got {cfg[PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS.value]!r}"
        ) from err
    return Observation(dump_dir, timing, threshold, record)


@dataclass
class StageRecord:
    """One observed stage: its position, name, origin ("tilelang"/"tirx"), time and IR."""

    index: int
    name: str
    origin: str
    seconds: float
    ir: object = None  # kept only by recording sessions (``tilelang.lower``)
    depth: int = 0  # nesting of TIRx passes (a Sequential contains its passes)


def kernel_label(func) -> str:
    """``<global_symbol>-<8 hex of the structural hash>``: a kernel's dump folder name."""
    import tvm_ffi

    attrs = getattr(func, "attrs", None)
    name = str(attrs["global_symbol"]) if attrs and "global_symbol" in attrs else "kernel"
    try:
        digest = tvm_ffi.structural_hash(func) & 0xFFFFFFFF
    except Exception:  # noqa: BLE001 - a label is best effort
        digest = 0
    return f"{_safe(name)}-{digest:08x}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "stage"


def as_text(ir) -> str:
    """``ir`` as text: a string unchanged, IR through ``script()`` (TVMScript), else ``str``."""
    if isinstance(ir, str):
        return ir
    script = getattr(ir, "script", None)
    if callable(script):
        try:
            return script()
        except Exception:  # noqa: BLE001 - fall back to the generic printer
            pass
    return str(ir)


@dataclass
class Session:
    """The observation of one kernel build; see the module docstring."""

    observe: Observation
    label: str
    records: list[StageRecord] = field(default_factory=list)
    dump_path: Path | None = None
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None

    def __post_init__(self):
        if self.observe.dump_dir:
            self.dump_path = Path(self.observe.dump_dir) / self.label
            if self.dump_path.is_dir():  # replace an earlier dump of the same kernel
                for item in self.dump_path.iterdir():
                    if item.is_file() and _DUMP_FILE.match(item.name):
                        item.unlink(missing_ok=True)

    def add(self, name: str, ir, seconds: float, origin: str, depth: int = 0) -> None:
        """Record stage ``name``'s output ``ir``; dump it when dumping."""
        index = len(self.records)
        keep = ir if self.observe.record else None
        self.records.append(StageRecord(index, name, origin, seconds, keep, depth))
        if self.dump_path is not None:
            self.dump_path.mkdir(parents=True, exist_ok=True)
            text = as_text(ir)
            header = f"# stage {index}: {name} ({origin}), {seconds * 1e3:.3f} ms\n"
            (self.dump_path / f"{index:03d}_{_safe(name)}.py").write_text(header + text)

    def timing_table(self) -> str:
        """The per-stage timing table (stages under the threshold are hidden)."""
        top = [r for r in self.records if r.depth == 0]
        total = sum(r.seconds for r in top)
        wall = max((self.ended or time.perf_counter()) - self.started, total, 1e-12)
        lines = [
            f"tilelang pass timing: {self.label}",
            f"{'#':>4}  {'stage':<44} {'origin':<9} {'ms':>10} {'% wall':>6}",
        ]
        for r in self.records:
            ms = r.seconds * 1e3
            if r.index and ms < self.observe.threshold_ms:
                continue
            name = "  " * r.depth + r.name
            share = f"{100 * r.seconds / wall:6.1f}" if r.depth == 0 else " " * 6
            lines.append(f"{r.index:>4}  {name:<44} {r.origin:<9} {ms:>10.3f} {share}")
        other = max(wall - total, 0.0)
        lines.append(f"{'':>4}  {'stages':<44} {'':<9} {total * 1e3:>10.3f}")
        lines.append(f"{'':>4}  {'other (codegen, link, load)':<44} {'':<9} {other * 1e3:>10.3f}")
        lines.append(f"{'':>4}  {'wall':<44} {'':<9} {wall * 1e3:>10.3f}")
        return "\n".join(lines) + "\n"


def _stack() -> list[Session]:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


def current() -> Session | None:
    """The session observing the build running on this thread, or None."""
    stack = getattr(_LOCAL, "stack", None)
    return stack[-1] if stack else None


def _tirx_observer(sess: Session):
    from tvm_tirx.ir.transform import pass_instrument

    @pass_instrument
    class TirxObserver:
        """Reports every TIRx pass run in the session's PassContext to the session."""

        def __init__(self):
            self.starts = []

        def run_before_pass(self, mod, info):
            self.starts.append(time.perf_counter())

        def run_after_pass(self, mod, info):
            start = self.starts.pop() if self.starts else time.perf_counter()
            sess.add(str(info.name), mod, time.perf_counter() - start, "tirx", len(self.starts))

    return TirxObserver()


@contextlib.contextmanager
def session(pass_configs=None, *, label: str = "kernel", record: bool = False, func=None):
    """Observe one kernel build on this thread; yields the :class:`Session` (None when idle).

    ``label`` names the dump folder (``func``, when given, supplies it). ``record=True``
    keeps every stage's IR in ``Session.records``. The timing table, if requested, is
    printed to stderr when the block ends.
    """
    obs = observation(pass_configs, record)
    if not obs.active:
        yield None
        return
    from tvm_tirx.ir.transform import PassContext

    sess = Session(obs, kernel_label(func) if func is not None else _safe(label))
    if func is not None:
        sess.add("trace", func, 0.0, "tilelang")
    stack = _stack()
    stack.append(sess)
    try:
        with PassContext(instruments=[_tirx_observer(sess)]):
            yield sess
    finally:
        stack.pop()
        sess.ended = time.perf_counter()
        if obs.timing:
            sys.stderr.write(sess.timing_table())
            sys.stderr.flush()


def _call(name, fn, func, state=None):
    try:
        out = fn(func) if state is None else fn(func, state)
    except errors.TileLangError:
        raise
    except Exception as err:
        err.add_note(f"(in pipeline stage {name!r})")
        raise
    if out is None:
        raise TypeError(f"pipeline stage {name!r} returned None instead of the TIRx function")
    return out


def run_stages(func, stages, pass_configs=None, state=None):
    """Run ``stages`` (a list of ``(name, fn)``) over ``func`` in order and return the result.

    Each ``fn`` maps a TIRx Function to a TIRx Function: ``fn(func)``, or ``fn(func, state)``
    when a ``state`` object is given (the pipeline's typed state, handed to every stage). Under an active :func:`session`
    (or when ``pass_configs``/the environment ask for a dump or timing) every stage's
    output is recorded, dumped and timed; otherwise this is a plain loop. See the module
    docstring for the rules a stage follows.
    """
    for item in stages:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"stages: expected (name, fn) pairs, got {item!r}")
        if not callable(item[1]):
            raise TypeError(f"stages: stage {item[0]!r} is not callable")
    sess = current()
    if sess is None:
        if not observation(pass_configs).active:
            for name, fn in stages:
                func = _call(name, fn, func, state)
            return func
        with session(pass_configs, func=func) as own:
            return _observed(func, stages, own, state)
    if not sess.records:
        sess.add("trace", func, 0.0, "tilelang")
    return _observed(func, stages, sess, state)


def on_body(fn):
    """A stage from a statement rewrite ``fn(body) -> body``: ``f -> f.with_body(fn(f.body))``."""
    return lambda f: f.with_body(fn(f.body))


def _observed(func, stages, sess: Session, state=None):
    for name, fn in stages:
        start = time.perf_counter()
        func = _call(name, fn, func, state)
        sess.add(name, func, time.perf_counter() - start, "tilelang")
    return func

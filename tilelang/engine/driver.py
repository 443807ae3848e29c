"""``tilelang.lower``: build a kernel and keep what every pipeline stage produced.

    stages = tilelang.lower(matmul_func, target="cpu")
    stages.names()                     # ['trace', 'lower_threads', ..., 'source']
    print(stages["lower_tile_ops"])    # TVMScript of the IR after that stage
    print(stages.diff("lower_threads", "lower_tile_ops"))
    print(stages.timing_table())

The stages are, in order: ``trace`` (the traced TIRx function), each tilelang stage of
the backend's pipeline (``run_stages`` names them), each TIRx pass that ran inside
``tvm_tirx.tirx.compile`` (origin ``"tirx"``), and ``source`` (the generated source:
CUDA C for GPU targets, the lowered TIRx for the CPU). A name seen twice gets a
``#2`` suffix. Nothing is cached: the kernel is really compiled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import errors


@dataclass
class LoweredKernel:
    """The artifacts of every stage of one build, by stage name (in pipeline order)."""

    func: object
    target: dict
    artifact: object
    stages: dict = field(default_factory=dict)  # name -> IR (TIRx Function / IRModule) or str
    origins: dict = field(default_factory=dict)  # name -> "tilelang" | "tirx" | "backend"
    seconds: dict = field(default_factory=dict)  # name -> time spent in that stage
    timing_text: str = ""

    def names(self) -> list[str]:
        """Stage names in the order they ran."""
        return list(self.stages)

    def __getitem__(self, name: str) -> str:
        return self.script(name)

    def __contains__(self, name: str) -> bool:
        return name in self.stages

    def ir(self, name: str):
        """The IR object stage ``name`` produced (a string for ``source``)."""
        if name not in self.stages:
            raise KeyError(f"no stage {name!r}; stages are {self.names()}")
        return self.stages[name]

    def script(self, name: str) -> str:
        """Stage ``name``'s output as text (TVMScript for IR)."""
        from ..tools.ir_diff import as_text

        return as_text(self.ir(name))

    @property
    def kernel_source(self) -> str:
        """The generated source (``stages["source"]``)."""
        return self.script("source")

    def diff(self, a: str, b: str, context: int = 3) -> str:
        """Unified diff between the outputs of stages ``a`` and ``b``."""
        from ..tools.ir_diff import ir_diff

        return ir_diff(self.ir(a), self.ir(b), a_name=a, b_name=b, context=context)

    def timing_table(self) -> str:
        """Milliseconds per stage, as printed by ``TILELANG_PASS_TIMING=1``."""
        return self.timing_text


def _unique(stages: dict, name: str) -> str:
    if name not in stages:
        return name
    k = 2
    while f"{name}#{k}" in stages:
        k += 1
    return f"{name}#{k}"


def lower(func, target="auto", pass_configs=None, compile_flags=None, **_ignored) -> LoweredKernel:
    """Compile ``func`` for ``target`` and return every stage's IR (see the module docstring).

    ``func`` is a traced ``T.prim_func`` (or a JITKernel, whose function is used).
    ``pass_configs`` also accepts the dump/timing keys, so a dump folder can be written
    at the same time.
    """
    from ..backends.registry import get_backend, resolve_target
    from . import instrument

    func = getattr(func, "prim_func", func)
    if not hasattr(func, "body") or not hasattr(func, "params"):
        raise errors.CompileError(
            f"tilelang.lower: func must be a T.prim_func (a traced TIRx function), "
            f"got {type(func).__name__}"
        )
    resolved = resolve_target(target)
    backend = get_backend(resolved["kind"])
    with instrument.session(pass_configs, record=True, func=func) as sess:
        artifact = backend.build(
            func,
            target=resolved,
            pass_configs=dict(pass_configs or {}),
            compile_flags=list(compile_flags or []),
        )
        records = list(sess.records)
        timing_text = sess.timing_table()
    out = LoweredKernel(func=func, target=resolved, artifact=artifact, timing_text=timing_text)
    for rec in records:
        name = _unique(out.stages, rec.name)
        out.stages[name] = rec.ir
        out.origins[name] = rec.origin
        out.seconds[name] = rec.seconds
    source = getattr(artifact, "kernel_source", None)
    if source is not None:
        out.stages["source"] = source
        out.origins["source"] = "backend"
        out.seconds["source"] = 0.0
    host = getattr(artifact, "host_source", None)
    if host:
        out.stages["host_source"] = host
        out.origins["host_source"] = "backend"
        out.seconds["host_source"] = 0.0
    return out

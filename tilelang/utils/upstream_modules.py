"""Clear import errors for upstream TileLang modules that tilelang does not have.

Upstream programs import its internal packages (``from tilelang.cuda.intrinsics import ...``,
``import tilelang.rocm``, ``from tilelang.jit.adapter.cutedsl import ...``). Without help
they would stop at "No module named 'tilelang.cuda'". :func:`install` appends a finder to
``sys.meta_path`` (after the real ones, so an existing module always wins) that raises a
:class:`ModuleNotFoundError` naming the module, what it is upstream and what to use here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

_INTERNAL = "upstream's {what}, which tilelang does not reproduce"
_TARGET_PACKAGE = (
    "upstream's {target} target package (its dialect, intrinsic emitters, layouts and passes); "
    "tilelang's {target} backend is tilelang.backends.{backend} and its ops are the one T "
    "namespace (import tilelang.language as T)"
)

#: upstream module prefix -> why it is absent (the longest matching prefix is used)
ABSENT: dict[str, str] = {
    "tilelang.cuda": _TARGET_PACKAGE.format(target="CUDA", backend="cuda")
    + " (only tilelang.cuda.intrinsics, the hand-written mma.sync emitter, is provided)",
    "tilelang.rocm": _TARGET_PACKAGE.format(target="ROCm", backend="rocm"),
    "tilelang.metal": _TARGET_PACKAGE.format(target="Metal", backend="metal"),
    "tilelang.cpu": _TARGET_PACKAGE.format(target="CPU", backend="cpu"),
    "tilelang.webgpu": "upstream's WebGPU target package; tilelang has no WebGPU backend",
    "tilelang.ascend": "upstream's Ascend target package; tilelang has no Ascend backend",
    "tilelang.tileop": _INTERNAL.format(what="tile-op classes of its TVM fork")
    + "; tilelang's tile ops are tilelang.ops (T.GemmWarpPolicy is tilelang.language's)",
    "tilelang.ir": _INTERNAL.format(what="IR node classes and span helpers of its TVM fork"),
    "tilelang._ffi_api": _INTERNAL.format(what="FFI bindings of libtilelang.so"),
    "tilelang.jit.adapter": _INTERNAL.format(what="execution adapters")
    + "; tilelang has one kernel type, tilelang.JITKernel",
    "tilelang.contrib.cutedsl": "upstream's CuTe DSL backend; tilelang has none",
    "tilelang.tools.cuda": _INTERNAL.format(what="IKET CUDA event tracer"),
    "tilelang.backend": _INTERNAL.format(what="target/pass-pipeline registry")
    + "; see tilelang.utils.target.determine_target and tilelang.backends",
    "tilelang.engine.callback": "upstream's source post-processing hooks; not provided yet",
    "tilelang.language.tir": _INTERNAL.format(what="TIR export tables of its TVM fork")
    + "; every T.* name lives in tilelang.language",
    "tilelang.language.eager.ast": _INTERNAL.format(what="AST mutator of its eager builder"),
    "tilelang.utils.language": _INTERNAL.format(what="helpers over its TVM Buffer IR"),
    "tilelang.cuda.intrinsics.sparse_layout": _INTERNAL.format(
        what="2:4 sparse metadata layouts of T.gemm_sp (mma.sp / sparse wgmma)"
    )
    + "; tilelang does not lower sparse tensor-core GEMMs",
    "tilelang.carver.template": _INTERNAL.format(what="carver templates"),
    "tilelang.carver.roller": _INTERNAL.format(what="carver roller"),
}


#: top-level module names upstream makes importable -> the tilelang module they stand for.
#: Upstream puts its bundled TVM on ``sys.path``, so its examples write ``from tvm import
#: DataType`` after ``import tilelang``; here ``tvm`` is ``tilelang.tvm`` unless a real
#: ``tvm`` package is installed (the alias finder runs after the real ones).
ALIASES: dict[str, str] = {"tvm": "tilelang.tvm"}


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias as the module it stands for (the same object, not a copy)."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        """The target module itself (``target``: a module name, or the module object). An
        alias of a top-level package gets an empty ``__path__`` so that ``import tvm.tirx``
        reaches this finder, which hands out ``tilelang.tvm.tirx``."""
        if not isinstance(self.target, str):
            return self.target
        module = importlib.import_module(self.target)
        if not hasattr(module, "__path__"):
            module.__path__ = []
        return module

    def exec_module(self, module):
        """Nothing to run: the target module is already initialized."""


def _aliased_submodule(fullname: str):
    """``tvm.tirx`` -> ``tilelang.tvm.tirx`` when ``tvm`` is the alias and the attribute is a
    module (``import tvm.tirx``, ``from tvm.tirx import IndexMap``); else None."""
    top, _, rest = fullname.partition(".")
    if not rest or top not in ALIASES:
        return None
    module = sys.modules.get(top)
    if module is None or getattr(module, "__name__", None) != ALIASES[top]:
        return None
    for part in rest.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module if isinstance(module, types.ModuleType) else None


def reason(fullname: str) -> str | None:
    """Why upstream module ``fullname`` is absent here, or None when it is not listed."""
    for prefix in sorted(ABSENT, key=len, reverse=True):
        if fullname == prefix or fullname.startswith(prefix + "."):
            return ABSENT[prefix]
    return None


def attribute_error(module: str, name: str) -> AttributeError:
    """The AttributeError for ``module.name``: why it is absent when it is a listed upstream
    module, else Python's usual message (for a module-level ``__getattr__``)."""
    why = reason(f"{module}.{name}")
    if why is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return AttributeError(f"{module}.{name} is {why}. See docs/api-coverage.md.")


class UpstreamModuleFinder:
    """A ``sys.meta_path`` finder that explains the upstream modules listed in ABSENT."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        """A spec for an alias of :data:`ALIASES`; raise ModuleNotFoundError with the reason
        for a listed absent module; None otherwise."""
        if fullname in ALIASES:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(ALIASES[fullname]))
        sub = _aliased_submodule(fullname)
        if sub is not None:
            return importlib.util.spec_from_loader(fullname, _AliasLoader(sub))
        why = reason(fullname)
        if why is None:
            return None
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: it is {why}. See docs/api-coverage.md.",
            name=fullname,
        )


def install() -> None:
    """Append the finder to ``sys.meta_path`` once."""
    if not any(isinstance(f, UpstreamModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(UpstreamModuleFinder())

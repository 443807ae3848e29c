"""Upstream import paths its examples and language tests use: ``tilelang.language.common``,
``tilelang.language.dtypes``, ``tilelang.transform.simplify_prim_func``, and the clear
ModuleNotFoundError / AttributeError of upstream modules and passes tilelang does not have."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.utils import upstream_modules


def test_common_dialect_is_the_t_namespace(rng):
    import tilelang.language.common as T_comm

    assert T_comm.__tilelang_dialect__ == "common"
    assert T_comm.copy is T.copy and T_comm.prim_func is T.prim_func
    assert "alloc_local" in dir(T_comm)
    n = 37

    @T_comm.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
        with T_comm.Kernel(1, threads=32):
            buf = T_comm.alloc_shared((n,), "float32")
            T_comm.copy(x, buf)
            for i in T_comm.Parallel(n):
                y[i] = buf[i] * 2.0 - 1.0

    x = rng.standard_normal(n)
    y = torch.zeros(n)
    tilelang.compile(main, target="cpu")(torch.from_numpy(x).float(), y)
    xf = torch.from_numpy(x).float().double().numpy()
    np.testing.assert_allclose(y.double().numpy(), xf * 2.0 - 1.0, rtol=1e-6, atol=1e-6)
    with pytest.raises(AttributeError, match="T.alloc_tmem is not supported"):
        T_comm.alloc_tmem  # noqa: B018


def test_language_dtypes_import_path():
    import tilelang.language.dtypes as D
    from tilelang.language.dtypes import dtype

    assert D is T.dtypes is tilelang.dtypes
    assert dtype("float16").bits == 16 and isinstance(T.float16, dtype)


def test_simplify_prim_func_keeps_the_kernel(rng):
    from tilelang.transform import simplify_prim_func

    @simplify_prim_func
    def build(n):
        """Doc of the builder."""

        @T.prim_func
        def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=16):
                for i in T.Parallel(n):
                    y[i] = x[i] + 3.0

        return main

    assert build.__name__ == "build" and build.__doc__ == "Doc of the builder."
    x = rng.standard_normal(21)
    y = torch.zeros(21)
    tilelang.compile(build(21), target="cpu")(torch.from_numpy(x).float(), y)
    np.testing.assert_allclose(
        y.double().numpy(), torch.from_numpy(x).float().double().numpy() + 3.0, rtol=1e-6
    )


@pytest.mark.parametrize("name", ["Simplify", "FlattenBuffer", "LowerOpaqueBlock"])
def test_upstream_passes_explain_themselves(name):
    import tilelang.transform as transform

    with pytest.raises(AttributeError, match=f"tilelang.transform.{name} is a pass of upstream"):
        getattr(transform, name)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchPass'"):
        transform.NoSuchPass  # noqa: B018


@pytest.mark.parametrize(
    "module,words",
    [
        ("tilelang.cuda.intrinsics.macro.wgmma_macro_generator", "CUDA target package"),
        ("tilelang.rocm", "ROCm target package"),
        ("tilelang.tileop.base", "tile-op classes"),
        ("tilelang.jit.adapter.cutedsl.checks", "execution adapters"),
        ("tilelang.tools.cuda.iket", "IKET"),
        ("tilelang.language.tir.ir", "TIR export tables"),
    ],
)
def test_upstream_only_modules_raise_a_clear_import_error(module, words):
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(module)
    assert words in str(info.value)
    assert str(info.value).startswith(f"No module named '{info.value.name}': it is ")
    assert isinstance(info.value, ImportError)  # `except ImportError` keeps working


def test_from_import_of_an_upstream_module_names_it():
    code = (
        "import tilelang\n"
        "try:\n"
        "    from tilelang.cuda.intrinsics.macro.wgmma_macro_generator import X\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (
        "ModuleNotFoundError No module named 'tilelang.cuda.intrinsics.macro.wgmma_macro_generator'"
        ": it is upstream's CUDA" in out.stdout
    )


def test_unlisted_and_real_modules_are_untouched():
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module("tilelang.no_such_module")
    assert str(info.value) == "No module named 'tilelang.no_such_module'"
    assert importlib.import_module("tilelang.backends.cuda")  # a real module wins
    assert upstream_modules.reason("tilelang.backends") is None  # prefix match stops at dots
    assert upstream_modules.reason("tilelang.backend.target") is not None
    assert sum(isinstance(f, upstream_modules.UpstreamModuleFinder) for f in sys.meta_path) == 1
    upstream_modules.install()
    assert sum(isinstance(f, upstream_modules.UpstreamModuleFinder) for f in sys.meta_path) == 1


@pytest.mark.parametrize(
    "get,words",
    [
        (lambda: tilelang.rocm, "tilelang.rocm is upstream's ROCm target package"),
        (lambda: tilelang.tileop, "tilelang.tileop is upstream's tile-op classes"),
        (lambda: T.tir, "tilelang.language.tir is upstream's TIR export tables"),
    ],
    ids=["tilelang.rocm", "tilelang.tileop", "T.tir"],
)
def test_attribute_access_of_upstream_packages_explains(get, words):
    with pytest.raises(AttributeError, match=words):
        get()


def test_upstream_tvm_import_is_tilelang_tvm():
    """Upstream's examples write ``from tvm import DataType`` after ``import tilelang``; the
    ``tilelang.cuda`` package (upstream's mma emitter) is importable and an attribute."""
    code = (
        "import tilelang\n"
        "from tvm import DataType\n"
        "import tvm\n"
        "from tvm.tirx import IndexMap\n"
        "assert IndexMap is tilelang.tvm.tirx.IndexMap\n"
        "assert tvm is tilelang.tvm and DataType('float16').bits == 16\n"
        "assert tilelang.cuda.intrinsics.TensorCoreIntrinEmitter\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_unknown_attributes_keep_the_usual_message():
    with pytest.raises(AttributeError, match="module 'tilelang' has no attribute 'nope'"):
        tilelang.nope  # noqa: B018
    with pytest.raises(AttributeError, match="module 'tilelang.language' has no attribute 'nope'"):
        T.nope  # noqa: B018

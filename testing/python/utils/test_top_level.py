"""Upstream's top-level names that tilelang provides are importable the way upstream programs
import them (docs/api-coverage.md lists the rest and why)."""

from __future__ import annotations

import importlib

import pytest

import tilelang

PROVIDED = [
    "DataType",
    "Fragment",
    "JITKernel",
    "Layout",
    "PassConfigKey",
    "Profiler",
    "TensorSupplyType",
    "autotune",
    "autotuner",
    "build_date",
    "cache",
    "carver",
    "cdiv",
    "compile",
    "contrib",
    "deprecated",
    "disable_cache",
    "dtypes",
    "enable_cache",
    "engine",
    "env",
    "is_cache_enabled",
    "jit",
    "language",
    "layout",
    "logger",
    "lower",
    "math",
    "next_power_of_2",
    "par_compile",
    "profiler",
    "set_log_level",
    "tools",
    "transform",
    "tvm",
    "utils",
    "clear_cache",
]


@pytest.mark.parametrize("name", PROVIDED)
def test_top_level_name(name):
    assert getattr(tilelang, name) is not None


@pytest.mark.parametrize(
    "statement",
    [
        "from tilelang import tvm as tvm",
        "from tilelang.transform import PassConfigKey",
        "from tilelang.profiler import do_bench",
        "from tilelang.utils.tensor import torch_assert_close, map_torch_type, get_tensor_supply",
        "from tilelang.carver.arch import driver, CUDA, CDNA, auto_infer_current_arch",
        "from tilelang.contrib import nvcc",
        "from tilelang.tools import plot_layout",
        "from tilelang.env import env",
        "from tilelang.layout import Layout",
        "from tilelang.autotuner import autotune",
    ],
)
def test_upstream_import_statements(statement):
    exec(statement, {})  # noqa: S102 - the statements above, verbatim from upstream programs


def test_same_objects_under_both_names():
    from tilelang.engine.pass_config import PassConfigKey

    assert tilelang.transform.PassConfigKey is PassConfigKey is tilelang.PassConfigKey
    assert tilelang.math.cdiv is tilelang.cdiv
    assert importlib.import_module("tilelang.env").env is tilelang.env
    assert tilelang.Layout is importlib.import_module("tilelang.layout").Layout

"""Upstream helper names its language tests import: the FP4 dtype predicates, the torch
storage dtype, the 8x8 ldmatrix fragments, and a clear error for ``errors.enrich_error``."""

from __future__ import annotations

import itertools

import pytest
import torch

import tilelang.errors
import tilelang.language as T
from tilelang.language import dtypes
from tilelang.layout import make_gemm_fragment_8x8, make_gemm_fragment_8x8_transposed


def test_fp4_predicates():
    assert dtypes.is_float4_e2m1fn(T.float4_e2m1fn) and dtypes.is_float4("float4_e2m1fn")
    for name in ("float16", "float8_e4m3fn", "int4", "uint8"):
        assert not dtypes.is_float4(name) and not dtypes.is_float4_e2m1_unpacked(name)
    with pytest.raises(TypeError, match="unknown dtype"):
        dtypes.is_float4("float5")


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "int8", "bool"])
def test_torch_storage_dtype(name):
    got = dtypes.resolve_torch_storage_dtype(name)
    assert got.as_torch() == getattr(torch, name)


def _owners(frag):
    """(thread, index) of every element (i, j) of an 8x8 fragment."""
    return {
        (i, j): (int(frag.forward_thread_point(i, j)), int(frag.forward_point(i, j)[0]))
        for i, j in itertools.product(range(8), range(8))
    }


def test_8x8_fragments_are_ldmatrix_tiles_and_transposes():
    plain, trans = _owners(make_gemm_fragment_8x8()), _owners(make_gemm_fragment_8x8_transposed())
    for frag in (plain, trans):  # 32 lanes x 2 values, each element once
        assert sorted(frag.values()) == sorted(itertools.product(range(32), range(2)))
    for (i, j), owner in plain.items():
        assert owner == (i * 4 + j // 2, j % 2)  # PTX: row t/4, columns 2(t%4) + v
        assert trans[(j, i)] == owner


def test_enrich_error_is_a_clear_error():
    with pytest.raises(AttributeError, match="carry the line"):
        tilelang.errors.enrich_error  # noqa: B018

"""tilelang.cdiv / next_power_of_2, tilelang.env, set_log_level, build_date, deprecated."""

from __future__ import annotations

import logging
import math
import os
import warnings
from fractions import Fraction

import pytest

import tilelang
from tilelang.utils import build_date, deprecated


def test_cdiv_is_exact_ceiling():
    for a in range(-40, 41):
        for b in (-7, -3, -1, 1, 2, 3, 8, 64):
            assert tilelang.cdiv(a, b) == math.ceil(Fraction(a, b)), (a, b)


def test_cdiv_large_and_numpy_ints():
    import numpy as np

    big = 10**30 + 7
    assert tilelang.cdiv(big, 10**15) == math.ceil(Fraction(big, 10**15))
    assert tilelang.cdiv(np.int64(1000), np.int32(128)) == 8
    assert tilelang.math.cdiv is tilelang.cdiv


def test_cdiv_misuse_names_the_argument():
    with pytest.raises(TypeError, match=r"cdiv: a must be an int"):
        tilelang.cdiv(1.5, 2)
    with pytest.raises(TypeError, match=r"cdiv: b must be an int"):
        tilelang.cdiv(4, "2")
    with pytest.raises(ZeroDivisionError, match="b must not be zero"):
        tilelang.cdiv(4, 0)


def test_next_power_of_2():
    for x in range(1, 5000):
        p = tilelang.next_power_of_2(x)
        assert p & (p - 1) == 0 and p >= x and (p == 1 or p // 2 < x), x
    assert tilelang.next_power_of_2(2**40) == 2**40
    assert tilelang.next_power_of_2(2**40 + 1) == 2**41
    assert tilelang.next_power_of_2(0) == 1 and tilelang.next_power_of_2(-5) == 1
    with pytest.raises(TypeError, match=r"next_power_of_2: x must be an int"):
        tilelang.next_power_of_2(3.0)


def test_env_reads_live_and_assignment_sets_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("TILELANG_CACHE_DIR", raising=False)
    assert tilelang.env.TILELANG_CACHE_DIR == os.path.expanduser("~/.tilelang/cache")
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "a"))
    assert tilelang.env.TILELANG_CACHE_DIR == str(tmp_path / "a")
    tilelang.env.TILELANG_CACHE_DIR = str(tmp_path / "b")
    assert os.environ["TILELANG_CACHE_DIR"] == str(tmp_path / "b")
    assert tilelang.cache.get_cache_dir() == tmp_path / "b"


def test_env_cache_switches_share_state_with_tilelang_cache(monkeypatch):
    monkeypatch.delenv("TILELANG_DISABLE_CACHE", raising=False)
    try:
        tilelang.disable_cache()
        assert not tilelang.is_cache_enabled() and not tilelang.env.is_cache_enabled()
        assert not tilelang.cache.is_cache_enabled()
        tilelang.env.enable_cache()
        assert tilelang.is_cache_enabled() and tilelang.cache.is_cache_enabled()
        monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
        assert tilelang.env.is_cache_globally_disabled() and not tilelang.is_cache_enabled()
    finally:
        tilelang.enable_cache()


def test_env_flags(monkeypatch):
    monkeypatch.setenv("TILELANG_VERBOSE", "yes")
    assert tilelang.env.get_default_verbose() is True
    monkeypatch.setenv("TILELANG_VERBOSE", "0")
    assert tilelang.env.get_default_verbose() is False
    monkeypatch.delenv("TILELANG_DEFAULT_TARGET", raising=False)
    assert tilelang.env.get_default_target() == "auto"
    assert tilelang.env.is_light_import() is False


def test_set_log_level():
    old = tilelang.logger.level
    try:
        assert tilelang.logger.name == "tilelang"
        tilelang.set_log_level("debug")
        assert tilelang.logger.level == logging.DEBUG
        tilelang.set_log_level(logging.ERROR)
        assert tilelang.logger.level == logging.ERROR
        with pytest.raises(ValueError, match="set_log_level: level must be one of"):
            tilelang.set_log_level("LOUD")
        with pytest.raises(TypeError, match="set_log_level: level must be a str or int"):
            tilelang.set_log_level(1.5)
    finally:
        tilelang.logger.setLevel(old)


def test_build_date():
    assert build_date("0.1.7.post3+cuda.d20260127.gita17230e4") == 20260127
    assert build_date("0.1.7+d20251231") is None  # no ".d" date field
    assert build_date("1.0.0") is None
    with pytest.raises(TypeError, match="version_str must be a str"):
        build_date(3)


def test_deprecated_warns_and_forwards():
    @deprecated("old_add", "new_add", "0.2")
    def old_add(a, b=1):
        """Adds."""
        return a + b

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert old_add(2, b=3) == 5
    assert len(caught) == 1 and caught[0].category is DeprecationWarning
    assert (
        str(caught[0].message)
        == "old_add is deprecated, use new_add instead and will be removed in 0.2"
    )
    assert old_add.__name__ == "old_add" and old_add.__doc__ == "Adds."
    with pytest.raises(TypeError, match="new_method_name must be a str"):
        deprecated("a", None)


def test_cdiv_of_a_symbolic_size_is_an_expression():
    """Upstream's NSA backward sizes a loop with ``tilelang.cdiv(seq_len, BS)`` where
    ``seq_len`` is a ``T.dynamic``/``T.const`` dimension: the ceiling-division expression."""
    from tvm_tirx import ir, sym

    import tilelang.language as T
    from tilelang.lowering.stmt import substitute

    n = T.dynamic("n")
    expr = tilelang.cdiv(n, 32)
    analyzer = sym.Analyzer()
    for value in (1, 31, 32, 33, 100, 4096):
        got = analyzer.simplify(substitute(expr, {n: ir.const(value, "int32")}))
        assert int(got.value) == math.ceil(Fraction(value, 32))
    with pytest.raises(ZeroDivisionError):
        tilelang.cdiv(n, 0)
    with pytest.raises(TypeError, match=r"cdiv: a must be an int"):
        tilelang.cdiv(1.5, n)

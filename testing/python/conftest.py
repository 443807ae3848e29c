"""Shared fixtures of the tilelang test suite: seeded random inputs per test."""

from __future__ import annotations

import os
import tempfile
import zlib

import numpy as np
import pytest

# A kernel cache private to this test session: tests that patch lowering rules must never be
# served a kernel an earlier run (or another checkout) stored under the same key.
os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tilelang-test-cache-"))


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A numpy Generator seeded from the test's id: fresh inputs per test, reproducible runs.

    Also seeds torch, so tests that draw with ``torch`` are reproducible too.
    """
    seed = zlib.crc32(request.node.nodeid.encode())
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a test dependency
        pass
    return np.random.default_rng(seed)


@pytest.fixture
def randn(rng):
    """``randn(*shape, dtype="float32", scale=1.0)``: a CPU torch tensor of normal samples.

    Samples are drawn in float64 from the test's seeded generator, then cast to ``dtype``
    (any torch dtype name, e.g. "float16", "bfloat16", "int32" rounds to integers).
    """
    import torch

    def make(*shape, dtype="float32", scale=1.0):
        data = rng.standard_normal(shape) * scale
        t = torch.from_numpy(np.ascontiguousarray(data))
        if not getattr(torch, dtype).is_floating_point:
            t = t.round()
        return t.to(getattr(torch, dtype))

    return make

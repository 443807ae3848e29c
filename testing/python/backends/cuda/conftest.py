"""Test setup for the CUDA backend: import path and the `cuda` marker's skip."""

import sys
import zlib
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parents[3]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `cuda` under this directory when torch sees no GPU."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if (
            item.get_closest_marker("cuda") is not None
            and _HERE in Path(str(item.path)).resolve().parents
        ):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_torch(request):
    """Seed torch from the test id so random inputs are reproducible."""
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))

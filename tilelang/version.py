"""tilelang's version (``__version__``): the ``VERSION`` file, else the installed metadata.

On the ground floor with ``errors``: imports nothing of tilelang.
"""

from __future__ import annotations

import os as _os


def _read_version() -> str:
    here = _os.path.dirname(__file__)
    for path in (_os.path.join(here, "VERSION"), _os.path.join(here, "..", "VERSION")):
        if _os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
    try:
        from importlib.metadata import version

        return version("tilelang")
    except Exception:  # noqa: BLE001
        return "0.0.0"


__version__ = _read_version()

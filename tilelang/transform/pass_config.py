"""Pass-config keys: ``pass_configs={tilelang.PassConfigKey.X: value}`` on ``jit``/``compile``.

Names follow upstream TileLang where the option exists there. Keys not listed here are
passed through to the pipelines unchanged (a pipeline documents the keys it reads).
Every key is part of the kernel cache key, except the observation-only ones in
:data:`OBSERVATION_KEYS` (IR dumps and pass timing), which change no generated code.
"""

from __future__ import annotations

from enum import Enum


class PassConfigKey(str, Enum):
    """Pass configuration keys understood by tilelang (upstream spellings)."""

    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    """Write the IR after every pipeline stage to a folder. Default: False.

    The folder is ``TL_DUMP_IR_DIR`` (default ``./dump_ir``); the environment variable
    ``TILELANG_DUMP_IR=<dir>`` does the same for every kernel. See
    ``tilelang.transform.instrument``.
    """

    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    """Folder for ``TL_ENABLE_DUMP_IR``; setting it alone also enables the dump.

    ``"tl.dump_ir_dir"`` is accepted as a synonym.
    """

    TL_PASS_PROFILE = "tl.pass_profile"
    """Print a table of the time spent in each pipeline stage. Default: False.

    The environment variable ``TILELANG_PASS_TIMING=1`` does the same for every kernel.
    """

    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    """Only list stages slower than this many milliseconds in the timing table. Default: 0."""


DUMP_DIR_ALIAS = "tl.dump_ir_dir"

OBSERVATION_KEYS = frozenset(
    {
        PassConfigKey.TL_ENABLE_DUMP_IR.value,
        PassConfigKey.TL_DUMP_IR_DIR.value,
        PassConfigKey.TL_PASS_PROFILE.value,
        PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS.value,
        DUMP_DIR_ALIAS,
    }
)


def normalize_pass_configs(pass_configs) -> dict:
    """``pass_configs`` with every key as a plain string (``PassConfigKey`` members unwrapped).

    Raises ``TypeError`` naming ``pass_configs`` when it is not a mapping.
    """
    if pass_configs is None:
        return {}
    if not hasattr(pass_configs, "items"):
        raise TypeError(
            f"pass_configs must be a dict {{key: value}}, got {type(pass_configs).__name__}"
        )
    return {
        (k.value if isinstance(k, PassConfigKey) else str(k)): v for k, v in pass_configs.items()
    }

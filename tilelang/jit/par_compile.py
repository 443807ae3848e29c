"""``tilelang.par_compile``: compile several ``T.prim_func``s on a thread pool."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

__all__ = ["par_compile"]


def par_compile(
    funcs,
    out_idx=None,
    execution_backend=None,
    target=None,
    target_host=None,
    verbose=None,
    pass_configs=None,
    compile_flags=None,
    num_workers: int | None = None,
    ignore_error: bool = False,
):
    """``[tilelang.compile(f, ...) for f in funcs]``, built concurrently, in ``funcs``' order.

    ``num_workers``: threads (default: CPU count); with ``ignore_error`` a function that fails
    to compile gives ``None`` and a warning instead of raising.
    """
    from ..utils.device import get_available_cpu_count
    from . import compile as compile_one

    funcs = list(funcs)
    if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
        raise ValueError(f"par_compile: num_workers must be a positive int, got {num_workers!r}")
    options = dict(
        out_idx=out_idx,
        execution_backend=execution_backend or "auto",
        target=target or "auto",
        target_host=target_host,
        verbose=bool(verbose),
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )

    def one(index_func):
        index, func = index_func
        try:
            return compile_one(func, **options)
        except Exception as err:
            if not ignore_error:
                raise
            warnings.warn(f"par_compile: function {index} failed to compile: {err}", stacklevel=3)
            return None

    workers = num_workers or min(len(funcs), get_available_cpu_count()) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, enumerate(funcs)))

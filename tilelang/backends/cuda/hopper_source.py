"""Source fix-ups the explicit Hopper API needs in generated CUDA code.

``setmaxnreg`` takes effect only when the kernel has a register cap at entry: a kernel
whose body calls ``tl::set_max_nreg`` (``T.set_max_nreg``) gets
``__launch_bounds__(threads, 1)`` instead of TIRx's ``__launch_bounds__(threads)``
(otherwise ptxas ignores the instruction with warning C7508).

A kernel launched in thread-block clusters calls the no-op marker
``tl::cluster_dims<X, Y, Z>()`` (``cluster.h``, emitted by ``backends/cuda/cluster.py``);
:func:`with_cluster_dims` puts ``__cluster_dims__(X, Y, Z)`` on its definition, so every
launch of it (TIRx's packed call and the direct ``cuLaunchKernel`` alike) forms clusters.
"""

from __future__ import annotations

import re

_KERNEL_RE = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(')


def _kernels_calling(code: str, helper: str) -> set[str]:
    """Names of the kernels whose definition (up to the next kernel) mentions ``helper``."""
    starts = [(m.start(), m.group(2)) for m in _KERNEL_RE.finditer(code)]
    names = set()
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
        if helper in code[pos:end]:
            names.add(name)
    return names


def with_register_cap(code: str) -> str:
    """``code`` with ``__launch_bounds__(n, 1)`` on every kernel that calls setmaxnreg."""
    if "tl::set_max_nreg<" not in code:
        return code
    names = _kernels_calling(code, "tl::set_max_nreg<")

    def repl(m):
        if m.group(2) not in names:
            return m.group(0)
        return f'extern "C" __global__ void __launch_bounds__({m.group(1)}, 1) {m.group(2)}('

    return _KERNEL_RE.sub(repl, code)


_BOUNDS_RE = re.compile(r'extern "C" __global__ void __launch_bounds__\((\d+)(?:, \d+)?\) (\w+)\(')


def with_kernel_hints(code: str, min_blocks: int | None = None, non_restrict=()) -> str:
    """``code`` with the user's hints (``language/hints.py``): ``__launch_bounds__(n, m)`` on
    every kernel for ``T.annotate_min_blocks_per_sm(m)``, and no ``__restrict__`` on the
    parameters named in ``non_restrict`` (``T.annotate_restrict_buffers``)."""
    if min_blocks:
        code = _BOUNDS_RE.sub(
            lambda m: (
                f'extern "C" __global__ void __launch_bounds__({m.group(1)}, {min_blocks}) '
                f"{m.group(2)}("
            ),
            code,
        )
    for name in non_restrict:
        code = re.sub(rf"\*\s*__restrict__\s+({re.escape(name)}(?:_ptr)?)\b", r"* \1", code)
    return code


_ANY_KERNEL_RE = re.compile(r'extern "C" __global__ void ((?:__launch_bounds__\([^)]*\) )?)(\w+)\(')
_CLUSTER_MARK_RE = re.compile(r"tl::cluster_dims<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>")


def with_cluster_dims(code: str) -> str:
    """``code`` with ``__cluster_dims__(X, Y, Z)`` on every kernel whose body calls the
    marker ``tl::cluster_dims<X, Y, Z>()``; a kernel with two different markers is an error
    (ValueError)."""
    if "tl::cluster_dims<" not in code:
        return code
    starts = [(m.start(), m.group(2)) for m in _ANY_KERNEL_RE.finditer(code)]
    dims = {}
    for i, (pos, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(code)
        found = {m.groups() for m in _CLUSTER_MARK_RE.finditer(code, pos, end)}
        if len(found) > 1:
            raise ValueError(f"kernel {name}: conflicting cluster shapes {sorted(found)}")
        if found:
            dims[name] = found.pop()

    def repl(m):
        if m.group(2) not in dims:
            return m.group(0)
        x, y, z = dims[m.group(2)]
        return (
            f'extern "C" __global__ void {m.group(1)}__cluster_dims__({x}, {y}, {z}) {m.group(2)}('
        )

    return _ANY_KERNEL_RE.sub(repl, code)

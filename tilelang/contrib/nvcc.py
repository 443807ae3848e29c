"""CUDA toolkit and compute-capability helpers (upstream's ``tilelang.contrib.nvcc`` names).

Compute versions are strings ``"major.minor"`` (``"9.0"``). Targets may be tilelang target
dicts (``{"kind": "cuda", "arch": "sm_90a"}``), target strings (``"cuda -arch=sm_80"``) or
objects with an ``attrs["arch"]`` (TVM targets).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import warnings

__all__ = [
    "CUDA_HOME",
    "compile_cuda",
    "get_ptx_from_source",
    "have_cudagraph",
    "have_mbarrier",
    "have_pdl",
    "find_cuda_path",
    "get_cuda_version",
    "get_nvcc_compiler",
    "get_target_arch",
    "get_target_compute_version",
    "have_bf16",
    "have_fp16",
    "have_fp8",
    "have_int8",
    "have_tensorcore",
    "have_tma",
    "is_hopper",
    "parse_compute_version",
]


def _cuda_home() -> str:
    from ..env import _find_cuda_home

    return _find_cuda_home()


CUDA_HOME = _cuda_home()


def find_cuda_path() -> str:
    """The CUDA toolkit root (``CUDA_HOME``, ``nvcc`` on PATH, or /usr/local/cuda)."""
    from ..env import _find_cuda_home

    path = _find_cuda_home()
    if not path:
        raise RuntimeError(
            "Failed to find a CUDA toolkit: set CUDA_HOME (e.g. export CUDA_HOME=/usr/local/cuda)"
        )
    return path


def get_nvcc_compiler() -> str:
    """Path of ``nvcc`` in the CUDA toolkit."""
    return os.path.join(find_cuda_path(), "bin", "nvcc")


def get_cuda_version(cuda_path: str | None = None) -> tuple[int, ...]:
    """The toolkit's version as a tuple, e.g. ``(13, 0, 88)`` (from ``nvcc --version``)."""
    nvcc = os.path.join(cuda_path or find_cuda_path(), "bin", "nvcc")
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise RuntimeError(f"cannot run {nvcc} --version: {err}") from err
    match = re.search(r"release [\d.]+, V(\d+(?:\.\d+)*)", out)
    if not match:
        raise RuntimeError(f"cannot read the CUDA version from: {out.strip()!r}")
    return tuple(int(x) for x in match.group(1).split("."))


def _target_arch(target) -> str | None:
    if target is None:
        return None
    if isinstance(target, dict):
        return target.get("arch")
    if isinstance(target, str):
        match = re.search(r"-arch=(\S+)", target)
        return match.group(1) if match else None
    attrs = getattr(target, "attrs", None)
    if attrs is not None and "arch" in attrs:
        return str(attrs["arch"])
    return getattr(target, "arch", None)


def _arch_to_version(arch: str) -> str:
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)[a-zA-Z]*", arch.strip())
    if not match or len(match.group(1)) < 2:
        raise ValueError(f"unsupported CUDA arch {arch!r} (expected e.g. 'sm_80' or 'sm_90a')")
    digits = match.group(1)
    return f"{digits[:-1]}.{digits[-1]}"


def get_target_compute_version(target=None) -> str:
    """Compute capability ``"major.minor"`` of ``target``'s arch, else of GPU 0.

    Raises ValueError when the target names no arch and there is no GPU (upstream's behaviour).
    """
    arch = _target_arch(target)
    if arch:
        return _arch_to_version(arch)
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return f"{major}.{minor}"
    except ImportError:
        pass
    raise ValueError(
        "No CUDA architecture was specified or GPU detected: pass a target such as "
        "{'kind': 'cuda', 'arch': 'sm_90a'}"
    )


def parse_compute_version(compute_version) -> tuple[int, int]:
    """``"8.6"`` -> ``(8, 6)``; RuntimeError for anything else (upstream's error type)."""
    try:
        major, minor = str(compute_version).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, TypeError) as err:
        raise RuntimeError(f"Compute version parsing error: {compute_version!r}") from err


def get_target_arch(compute_version) -> str:
    """The arch number nvcc takes for a compute version: ``"8.0"`` -> ``"80"``, ``"9.0"`` ->
    ``"90a"`` (Hopper and later get the architecture-specific ``a`` suffix)."""
    if isinstance(compute_version, tuple):
        major, minor = compute_version
    else:
        major, minor = parse_compute_version(compute_version)
    return f"{major * 10 + minor}" + ("a" if major >= 9 else "")


def have_fp16(compute_version) -> bool:
    """Native fp16 arithmetic: compute capability 5.3, or 6.0 and later."""
    major, minor = parse_compute_version(compute_version)
    return (major == 5 and minor >= 3) or major >= 6


def have_int8(compute_version) -> bool:
    """int8 dot products (dp4a): compute capability 6.1 and later (upstream: major >= 6)."""
    return parse_compute_version(compute_version)[0] >= 6


def have_bf16(compute_version) -> bool:
    """bf16 tensor cores: compute capability 8.0 and later."""
    return parse_compute_version(compute_version)[0] >= 8


def have_fp8(compute_version) -> bool:
    """fp8 tensor cores: compute capability 8.9 (Ada) and later."""
    major, minor = parse_compute_version(compute_version)
    return (major == 8 and minor >= 9) or major >= 9


def have_tensorcore(compute_version=None, target=None) -> bool:
    """Tensor cores: compute capability 7.0 and later (of ``target`` or GPU 0 if not given)."""
    if compute_version is None:
        try:
            compute_version = get_target_compute_version(target)
        except ValueError:
            warnings.warn("Tensor cores disabled: no CUDA arch given and no GPU", stacklevel=2)
            return False
    return parse_compute_version(compute_version)[0] >= 7


def _is_cuda_target(target) -> bool:
    if isinstance(target, dict):
        return target.get("kind") == "cuda"
    if isinstance(target, str):
        return target.split()[0] == "cuda" if target.split() else False
    kind = getattr(target, "kind", None)
    return getattr(kind, "name", kind) == "cuda"


def have_tma(target) -> bool:
    """Tensor Memory Accelerator: a CUDA target of compute capability 9.0 and later."""
    return (
        _is_cuda_target(target)
        and parse_compute_version(get_target_compute_version(target))[0] >= 9
    )


def have_pdl(target) -> bool:
    """Programmatic dependent launch: a CUDA target of compute capability 9.0 and later."""
    return have_tma(target)


def have_mbarrier(target) -> bool:
    """Hardware mbarriers (as upstream uses them): a CUDA target of compute capability >= 9.0."""
    return have_tma(target)


def have_cudagraph() -> bool:
    """CUDA graphs: a CUDA toolkit of version 10.0 or later is installed."""
    try:
        return get_cuda_version() >= (10, 0)
    except RuntimeError:
        return False


def is_hopper(target) -> bool:
    """Whether ``target`` is a CUDA target of compute capability exactly 9.0."""
    return _is_cuda_target(target) and get_target_compute_version(target) == "9.0"


def compile_cuda(
    code: str,
    target_format: str = "ptx",
    arch=None,
    options=None,
    path_target: str | None = None,
    verbose: bool = False,
) -> bytes:
    """Compile CUDA C++ ``code`` with nvcc to ``target_format`` (``"ptx"``, ``"cubin"``,
    ``"fatbin"``) and return the bytes (also written to ``path_target`` when given).

    ``arch``: e.g. ``"sm_80"`` or a list of nvcc arch flags; default: GPU 0's arch (unless
    ``options`` names one).
    ``options``: extra nvcc flags (str or list).
    """
    if target_format not in ("ptx", "cubin", "fatbin"):
        raise ValueError(
            f"compile_cuda: target_format must be 'ptx', 'cubin' or 'fatbin', got {target_format!r}"
        )
    if not isinstance(code, str):
        raise TypeError(f"compile_cuda: code must be a str, got {type(code).__name__}")
    if isinstance(options, str):
        options = [options]
    names_arch = any(
        o.startswith(("-arch", "--gpu-architecture", "-gencode")) for o in options or []
    )
    if arch is None:
        arch = [] if names_arch else ["-arch=sm_" + get_target_arch(get_target_compute_version())]
    elif isinstance(arch, str):
        arch = [arch if arch.startswith("-") else f"-arch={arch}"]
    with tempfile.TemporaryDirectory(prefix="tilelang-nvcc-") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        out = path_target or os.path.join(tmp, f"kernel.{target_format}")
        with open(src, "w") as f:
            f.write(code)
        cmd = [
            get_nvcc_compiler(),
            f"--{target_format}",
            "-O3",
            *arch,
            *(options or []),
            "-o",
            out,
            src,
        ]
        if verbose:
            print(" ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
        with open(out, "rb") as f:
            return f.read()


def get_ptx_from_source(code: str, compile_flags=None, verbose: bool = False) -> str:
    """The PTX nvcc generates for CUDA C++ ``code`` (``compile_flags``: extra nvcc flags)."""
    return compile_cuda(code, "ptx", options=compile_flags, verbose=verbose).decode()

"""T.print and T.device_assert on CUDA (``tilelang/ops/debug_cuda.py``).

Without a GPU: the lowered IR runs in the numpy emulator (device ``printf`` goes to stdout,
``__trap`` raises DeviceTrap) and nvcc compiles the generated source. On a GPU (marked
``cuda``): a fresh process prints and fails an assertion (a trap leaves the process's CUDA
context unusable, so it never runs inside the test process).
"""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import DeviceTrap, emulate

TARGET = {"kind": "cuda", "arch": "sm_90a"}
REPO = Path(__file__).resolve().parents[4]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def printing(M=64):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32"), B: T.Tensor((4, 4), "float16")):
        with T.Kernel(2, threads=64) as bx:
            T.print(A[bx], msg="a")
            T.print(T.get_thread_binding() + 100 * bx, msg="t")
            s = T.alloc_shared((2, 2), "float16")
            T.copy(B[0:2, 0:2], s)
            T.print(s, msg='tile "%"')
            f = T.alloc_fragment((4,), "int32")
            for i in T.Parallel(4):
                f[i] = i * 10
            T.print(f, msg="frag")
            T.print(B[3, 1:3], warp_id=1)

    return main


def asserting(M=64):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32")):
        with T.Kernel(2, threads=64) as bx:
            T.device_assert(A[bx] < 100.0, "A too large")  # BLOCK ASSERT
            T.device_assert(A[T.get_thread_binding()] >= 0.0, "A negative")  # THREAD ASSERT

    return main


def _line_of(marker):
    text = Path(__file__).read_text().splitlines()
    return next(k for k, line in enumerate(text, 1) if marker in line and "_line_of" not in line)


def test_print_lines_emulated(capsys):
    lowered = pipeline.lower(printing(), TARGET)
    a = np.arange(64, dtype=np.float32) / 4
    b = np.arange(16, dtype=np.float16).reshape(4, 4)
    emulate(lowered, a, b, blocks=[(1,)])
    out = capsys.readouterr().out.splitlines()
    where = "[block (1, 0, 0), thread {}]".format
    assert out[0] == f"{where(0)} a: 0.25"
    assert out[1:65] == [f"{where(t)} t: {t + 100}" for t in range(64)]
    assert out[65:69] == [
        f'{where(0)} tile "%": s[{i}, {j}] = {float(b[i, j]):.8g}'
        for i in range(2)
        for j in range(2)
    ]
    assert out[69:73] == [f"{where(i)} frag: f[{i}] = {i * 10}" for i in range(4)]
    assert out[73:] == [f"{where(32)} B[3, {j}] = {float(b[3, j]):.8g}" for j in (1, 2)]


def test_device_assert_emulated(capsys):
    lowered = pipeline.lower(asserting(), TARGET)
    a = np.arange(64, dtype=np.float32)
    emulate(lowered, a)  # passes
    assert capsys.readouterr().out == ""
    a[1] = 1000.0
    with pytest.raises(DeviceTrap, match=r"block \{'blockIdx.x': 1\}"):
        emulate(lowered, a)
    out = capsys.readouterr().out.splitlines()
    line = _line_of("# BLOCK ASSERT")
    want = f"test_debug_cuda.py:{line}: T.device_assert failed: A too large [block (1, 0, 0), "
    assert len(out) == 2 and all(want in x for x in out)  # block-uniform: one line per warp
    a[1], a[5] = 1.0, -1.0
    with pytest.raises(DeviceTrap):
        emulate(lowered, a)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{__file__}:{_line_of('# THREAD ASSERT')}: T.device_assert failed: A negative "
        "[block (0, 0, 0), thread 5]"
    ]


def test_print_rejects_a_missing_warp():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=64) as bx:  # noqa: F841
            T.print(A[0], warp_group_id=1)

    with pytest.raises(Exception, match="selects thread 128, but the block has 64 threads"):
        pipeline.lower(main, TARGET)


@needs_nvcc
def test_debug_source_compiles():
    for func in (printing(), asserting()):
        art = pipeline.build(func, TARGET, compiler="nvcc")
        src = art.get_kernel_source()
        assert "printf(" in src
    assert "__trap();" in src


_GPU_SCRIPT = """
import sys, torch
sys.path.insert(0, {repo!r})
sys.path.insert(0, {here!r})
import tilelang
from test_debug_cuda import asserting, printing
a = torch.arange(64, device="cuda", dtype=torch.float32) / 4
b = torch.arange(16, device="cuda", dtype=torch.float16).reshape(4, 4)
tilelang.compile(printing(), target="cuda")(a, b)
torch.cuda.synchronize()
print("PRINTED", flush=True)
a[1] = 1000.0
kernel = tilelang.compile(asserting(), target="cuda")
try:
    kernel(a)
    torch.cuda.synchronize()
except Exception as err:
    print("RAISED", type(err).__name__, err, flush=True)
"""


@pytest.mark.no_sanitizer  # a deliberate device assert (trap) the sanitizer reports
@pytest.mark.cuda
def test_print_and_assert_on_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    script = textwrap.dedent(_GPU_SCRIPT).format(repo=str(REPO), here=str(Path(__file__).parent))
    env = dict(os.environ, TILELANG_DISABLE_CACHE="1")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    out = proc.stdout + proc.stderr
    assert "[block (1, 0, 0), thread 0] a: 0.25" in out, out
    assert "[block (0, 0, 0), thread 63] t: 63" in out, out
    assert "[block (1, 0, 0), thread 3] frag: f[3] = 30" in out, out
    assert "PRINTED" in out, out
    assert "RAISED" in out, out
    assert "T.device_assert failed: A too large [block (1, 0, 0), thread" in out, out

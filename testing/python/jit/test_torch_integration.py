"""Kernels as torch custom ops (``kernel.as_torch_op``) and forward/backward pairs as autograd
Functions (``tilelang.autograd_function``): eager, ``torch.compile(fullgraph=True)``, dynamic
shapes, ``torch.library.opcheck``; CUDA graphs on a GPU (``cuda``-marked).
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T
from tilelang.jit.torch_op import written_params

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from example_loader import load_example  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _skip_without_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _gemm_bias(M, N, K, bm=32, bn=32, bk=16, target="cpu", dtype="float32", threads=64):
    """``C = A @ B`` (``dtype`` in, float32 out, tiles that do not divide the shapes), out_idx = C."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            As = T.alloc_shared((bm, bk), dtype)
            Bs = T.alloc_shared((bk, bn), dtype)
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=1):
                T.copy(A[by * bm, k * bk], As)
                T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bm, bx * bn])

    return tilelang.compile(main, out_idx=[-1], target=target)


@tilelang.jit(out_idx=[-1], target="cpu")
def scale_and_stash(M, N, bm=16):
    """``C = 2 * A`` returned; ``B`` overwritten with ``A + 1`` (a mutated argument)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((M, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bm), threads=16) as bx:
            t = T.alloc_fragment((bm, N), "float32")
            T.copy(A[bx * bm, 0], t)
            for i, j in T.Parallel(bm, N):
                B[bx * bm + i, j] = t[i, j] + 1
            for i, j in T.Parallel(bm, N):
                t[i, j] = t[i, j] * 2
            T.copy(t, C[bx * bm, 0])

    return main


def dyn_rowscale():
    """``C[i, j] = A[i, j] * s[j]`` with a dynamic row count ``m`` (a prim_func)."""
    M = T.dynamic("m")

    @T.prim_func
    def main(
        A: T.Tensor((M, 6), "float32"),
        s: T.Tensor((6,), "float32"),
        C: T.Tensor((M, 6), "float32"),
    ):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(M, 6):
                C[i, j] = A[i, j] * s[j]

    return main


# ------------------------------------------------------------------ custom ops


def test_fullgraph_compile_model_matches_float64(randn):
    """A tilelang GEMM between torch ops, compiled with fullgraph=True, vs float64."""
    M, N, K = 45, 37, 29
    op = _gemm_bias(M, N, K).as_torch_op()
    x, w, b = randn(M, K), randn(K, N), randn(N)

    def model(x, w, b):
        h = op(torch.tanh(x), w * 0.5)
        return F.gelu(h + b).softmax(dim=-1)

    got = torch.compile(model, fullgraph=True)(x, w, b)
    xd, wd, bd = x.double(), w.double(), b.double()
    want = F.gelu(torch.tanh(xd) @ (wd * 0.5) + bd).softmax(dim=-1)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert op.qualname.startswith("tilelang::main_")


def test_plain_kernel_call_inside_fullgraph_compile(randn):
    """A JITKernel called directly (no as_torch_op) inside torch.compile(fullgraph=True)
    runs as its custom op: one graph, no recompilation for fresh inputs, float64 check."""
    from torch._dynamo.testing import CompileCounter

    M, N, K = 45, 37, 29
    kernel = _gemm_bias(M, N, K)
    counter = CompileCounter()
    f = torch.compile(
        lambda x, w: F.gelu(kernel(torch.tanh(x), w * 0.5)), backend=counter, fullgraph=True
    )
    for _ in range(2):
        x, w = randn(M, K), randn(K, N)
        want = F.gelu(torch.tanh(x.double()) @ (w.double() * 0.5))
        torch.testing.assert_close(f(x, w).double(), want, rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 1
    assert kernel._traced_op is kernel.as_torch_op()  # the op registered at trace time
    x, w = randn(M, K), randn(K, N)  # eager calls still take the direct path
    torch.testing.assert_close(kernel(x, w).double(), x.double() @ w.double(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strict", [True, False])
def test_plain_kernel_call_in_torch_export(randn, strict):
    """torch.export, strict (dynamo) or not (no dynamo: the op is registered at the call)."""
    M, N, K = 21, 10, 17
    kernel = _gemm_bias(M, N, K)

    class Model(torch.nn.Module):
        def forward(self, x, w):
            return kernel(x.sin(), w) * 2

    x, w = randn(M, K), randn(K, N)
    program = torch.export.export(Model(), (x, w), strict=strict)
    x, w = randn(M, K), randn(K, N)
    want = (x.double().sin() @ w.double()) * 2
    torch.testing.assert_close(program.module()(x, w).double(), want, rtol=1e-5, atol=1e-6)


def test_plain_kernel_mutating_an_argument_inside_fullgraph_compile(randn):
    M, N = 40, 11
    kernel = scale_and_stash(M, N)

    def f(a, b):
        c = kernel(a, b)  # writes b in place
        return c + b * 3  # must read the new b

    a, b = randn(M, N), randn(M, N)
    got = torch.compile(f, fullgraph=True)(a, b)
    ad = a.double()
    torch.testing.assert_close(b.double(), ad + 1)
    torch.testing.assert_close(got.double(), 2 * ad + 3 * (ad + 1), rtol=1e-6, atol=1e-6)


def test_mutated_argument_is_declared_and_seen_by_compiled_code(randn):
    M, N = 40, 11
    kernel = scale_and_stash(M, N)
    op = kernel.as_torch_op()
    assert op.mutated == ["B"]
    assert "Tensor(a1!) B" in op.schema and op.schema.endswith("-> Tensor")

    def f(a, b):
        c = op(a, b)  # writes b in place
        return c + b * 3  # must read the new b

    a = randn(M, N)
    b = randn(M, N)
    got = torch.compile(f, fullgraph=True)(a, b)
    ad = a.double()
    torch.testing.assert_close(b.double(), ad + 1)
    torch.testing.assert_close(got.double(), 2 * ad + 3 * (ad + 1), rtol=1e-6, atol=1e-6)


def test_opcheck_schema_fake_and_dispatch(randn):
    """torch.library.opcheck: the declared mutation, the fake outputs and AOT dispatch agree."""
    op = scale_and_stash(33, 5).as_torch_op()
    torch.library.opcheck(op.overload, (randn(33, 5), randn(33, 5)))
    gemm = _gemm_bias(20, 18, 9).as_torch_op()
    torch.library.opcheck(gemm.overload, (randn(20, 9), randn(9, 18)))


def test_written_params_of_flash_attention_backward():
    fa = load_example("flash_attention/example_mha_bwd_bshd.py")
    func = fa.flashattn_bwd.get_tir(1, 2, 64, 32, True, 32, 32)
    assert written_params(func) == ["dQ", "dK", "dV"]
    func = fa.flashattn_fwd.get_tir(1, 2, 64, 32, False, 32, 32)
    assert written_params(func) == ["Output", "LSE"]


@pytest.mark.parametrize("write_b", [True, False])
def test_written_params_follow_views(write_b):
    """A write through ``T.reshape``/``T.view`` of a parameter counts for the parameter; a view
    that is only read does not."""

    @T.prim_func
    def main(A: T.Tensor((4, 6), "float32"), B: T.Tensor((4, 6), "float32")):
        with T.Kernel(1, threads=1):
            Af = T.reshape(A, (24,))
            Bg = T.view(T.reshape(B, (24,)), (6, 4))
            for i in T.serial(6):
                if write_b:
                    Bg[i, 0] = Af[i]
                else:
                    Af[i] = Bg[i, 0]

    assert written_params(main) == (["B"] if write_b else ["A"])


def test_registering_twice_returns_the_same_op():
    kernel = scale_and_stash(24, 3)
    op = kernel.as_torch_op()
    assert kernel.as_torch_op() is op
    assert scale_and_stash.as_torch_op(24, 3).name.startswith("scale_and_stash_")
    assert tilelang.torch_op(kernel) is op
    # a separately compiled, identical kernel gets the same name
    again = tilelang.compile(scale_and_stash.get_tir(24, 3), out_idx=[-1], target="cpu")
    assert again.as_torch_op().qualname == op.qualname
    # another shape, another op
    assert scale_and_stash(25, 3).as_torch_op().qualname != op.qualname
    # an explicit name is a prefix; the hash keeps it unique
    named = kernel.as_torch_op(name="stash")
    assert named.name.startswith("stash_") and named is kernel.as_torch_op(name="stash")


def test_op_name_is_stable_across_processes():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import tilelang, test_torch_integration as t;"
        "print(t.scale_and_stash(24, 3).as_torch_op().qualname)"
    )
    here = str(Path(__file__).resolve().parent)
    env_path = f"{REPO}"
    run = subprocess.run(
        [sys.executable, "-c", code, here],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        env={**__import__("os").environ, "PYTHONPATH": env_path},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == scale_and_stash(24, 3).as_torch_op().qualname


def test_dynamic_rows_compile_once(randn):
    """Symbolic dims of the outputs come from the inputs' (symbolic) shapes: one graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    op = tilelang.compile(dyn_rowscale(), out_idx=[-1], target="cpu").as_torch_op()
    counter = CompileCounterWithBackend("inductor")
    f = torch.compile(lambda a, s: op(a * 2, s) - 1, backend=counter, fullgraph=True, dynamic=True)
    for m in (5, 13, 8):
        a, s = randn(m, 6), randn(6)
        got = f(a, s)
        assert got.shape == (m, 6)
        torch.testing.assert_close(got.double(), a.double() * 2 * s.double() - 1)
    assert counter.frame_count == 1


def test_fake_names_the_wrong_argument(randn):
    op = _gemm_bias(20, 18, 9).as_torch_op()
    with pytest.raises(Exception, match="argument 'B': dimension 0 must be 9, got 10"):
        torch.compile(lambda a, b: op(a, b), fullgraph=True)(randn(20, 9), randn(10, 18))
    with pytest.raises(Exception, match="argument 'A': expected dtype float32"):
        torch.compile(lambda a, b: op(a, b), fullgraph=True)(randn(20, 9).double(), randn(9, 18))


def test_misuse_names_the_argument():
    kernel = scale_and_stash(24, 3)
    with pytest.raises(tilelang.KernelArgumentError, match="'kernel' must be a JITKernel"):
        tilelang.torch_op(scale_and_stash)
    with pytest.raises(tilelang.KernelArgumentError, match="mutates_args names 'C'"):
        kernel.as_torch_op(mutates_args=["C"])
    with pytest.raises(tilelang.KernelArgumentError, match="'name' must be a non-empty string"):
        kernel.as_torch_op(name=3)
    with pytest.raises(tilelang.KernelArgumentError, match="argument 'forward'"):
        tilelang.autograd_function(forward=3, backward=lambda *a: a)
    with pytest.raises(tilelang.KernelArgumentError, match="argument 'returns'"):
        tilelang.autograd_function(forward=kernel, backward=lambda *a: a, returns="x")


def test_explicit_mutates_args_overrides_the_analysis(randn):
    op = scale_and_stash(24, 3).as_torch_op(mutates_args=["A", "B"])
    assert op.mutated == ["A", "B"] and "Tensor(a0!) A" in op.schema
    assert op.name != scale_and_stash(24, 3).as_torch_op().name
    a, b = randn(24, 3), randn(24, 3)
    torch.testing.assert_close(op(a, b), 2 * a)


def test_non_contiguous_inputs_are_made_dense(randn):
    M, N = 40, 11
    op = scale_and_stash(M, N).as_torch_op()
    a = randn(N, M).t()  # a transposed view
    b = randn(N, M).t()
    c = op(a, b)
    torch.testing.assert_close(c, 2 * a)
    torch.testing.assert_close(b, a + 1)  # written back into the strided view


# ------------------------------------------------------------------ autograd


def _flash_attention_function(batch, heads, seq_len, dim, causal, target, block=32):
    """The FlashAttention example's kernels as one autograd Function (O returned, LSE kept)."""
    fa = load_example("flash_attention/example_mha_bwd_bshd.py")
    args = (batch, heads, seq_len, dim, causal)
    fwd = tilelang.compile(
        fa.flashattn_fwd.get_tir(*args, block_M=block, block_N=block), out_idx=[3, 4], target=target
    )
    prep = tilelang.compile(
        fa.flashattn_bwd_preprocess.get_tir(batch, heads, seq_len, dim, block=block),
        out_idx=[2],
        target=target,
    ).as_torch_op()
    bwd = tilelang.compile(fa.flashattn_bwd.get_tir(*args, block, block), target=target)
    bwd = bwd.as_torch_op()

    def backward(q, k, v, o, lse, do):
        do = do.contiguous()
        delta = prep(o, do)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        bwd(q, k, v, do, lse, delta, dq, dk, dv)
        return dq.to(q.dtype), dk, dv

    return tilelang.autograd_function(
        forward=fwd, backward=backward, returns=[0], name="FlashAttention"
    )


def _sdpa_reference(q, k, v, w, causal):
    """Output and gradients of ``sum(attention(q, k, v) * w)`` in float64 (bshd layout)."""
    q, k, v = (x.detach().double().transpose(1, 2).requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
    (out * w.double()).sum().backward()
    return out.detach(), [x.grad.transpose(1, 2) for x in (q, k, v)]


def _check_attention(Attn, batch, heads, seq_len, dim, causal, device, compiled):
    q, k, v = (
        torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float16).requires_grad_()
        for _ in range(3)
    )
    w = torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float64)

    def loss_fn(q, k, v):
        out = Attn.apply(q, k, v)
        return out, (out.double() * w).sum()

    fn = torch.compile(loss_fn, fullgraph=True) if compiled else loss_fn
    out, loss = fn(q, k, v)
    loss.backward()
    ref_out, ref_grads = _sdpa_reference(q, k, v, w, causal)
    torch.testing.assert_close(out.double(), ref_out, rtol=1e-2, atol=1e-2)
    for name, x, ref in zip("qkv", (q, k, v), ref_grads):
        assert x.grad is not None and x.grad.dtype == torch.float16, name
        torch.testing.assert_close(x.grad.double(), ref, rtol=2e-2, atol=2e-2, msg=f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_flash_attention_autograd_cpu(causal, compiled):
    """batch 2, 3 heads, 96 tokens (3 blocks of 32), head dim 48: gradients vs float64 SDPA."""
    torch.manual_seed(1234 + 2 * causal + compiled)
    Attn = _flash_attention_function(2, 3, 96, 48, causal, target="cpu")
    _check_attention(Attn, 2, 3, 96, 48, causal, "cpu", compiled)


def test_autograd_function_generic_pair(randn):
    """forward = a kernel with a mutated scratch input; backward = a Python function of ops."""
    M, N, K = 30, 21, 13
    gemm = _gemm_bias(M, N, K)
    gemm_t = _gemm_bias(M, K, N)  # dA = dC @ B^T: (M, N) @ (N, K)
    gemm_w = _gemm_bias(K, N, M)  # dB = A^T @ dC: (K, M) @ (M, N)
    ga, gw = gemm_t.as_torch_op(), gemm_w.as_torch_op()

    def backward(a, b, c, dc):
        return ga(dc.contiguous(), b.t().contiguous()), gw(a.t().contiguous(), dc.contiguous())

    MatMul = tilelang.autograd_function(forward=gemm, backward=backward)
    a = randn(M, K).requires_grad_()
    b = randn(K, N).requires_grad_()
    up = randn(M, N)
    (MatMul.apply(a, b).sin() * up).sum().backward()
    ad, bd = (x.detach().double().requires_grad_() for x in (a, b))
    ((ad @ bd).sin() * up.double()).sum().backward()
    torch.testing.assert_close(a.grad.double(), ad.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.double(), bd.grad, rtol=1e-5, atol=1e-5)


def test_backward_with_wrong_gradient_count_says_so(randn):
    gemm = _gemm_bias(8, 8, 8)
    Bad = tilelang.autograd_function(forward=gemm, backward=lambda a, b, c, dc: dc)
    out = Bad.apply(randn(8, 8).requires_grad_(), randn(8, 8))
    with pytest.raises(tilelang.KernelArgumentError, match="returned 1 gradients for 2 inputs"):
        out.sum().backward()


# ------------------------------------------------------------------ GPU


def _bounded(seconds):
    """Decorator: the test runs under :func:`_watchdog`."""

    def wrap(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            with _watchdog(seconds, test.__name__):
                return test(*args, **kwargs)

        return run

    return wrap


@contextlib.contextmanager
def _inductor_in_process():
    import torch._inductor.config as inductor_config

    with inductor_config.patch(compile_threads=1):
        yield


@contextlib.contextmanager
def _watchdog(seconds, what):
    """Bound a GPU test that could hang (CUDA-graph capture, inductor's compile workers):
    past ``seconds`` every thread's stack is printed and the process exits, so the run
    shows where it hung instead of silently using up its shard's time."""
    import faulthandler

    print(f"watchdog: {what} has {seconds} s", file=sys.stderr)
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.mark.no_sanitizer  # graph capture: memcheck turns torch's caching allocator off
@pytest.mark.cuda
def test_cuda_graph_capture_of_compiled_model_replays():
    """torch.compile(mode="reduce-overhead") records CUDA graphs; a manual capture replays too."""
    _skip_without_cuda()
    M, N, K = 200, 136, 72
    op = _gemm_bias(
        M, N, K, bm=64, bn=64, bk=32, target="cuda", dtype="float16", threads=128
    ).as_torch_op()

    def model(x, w, b):  # fp16 operands (x * 0.5 is exact), fp32 accumulation and output
        return torch.relu(op(x * 0.5, w) + b)

    def ref(x, w, b):
        return torch.relu((x.double() * 0.5) @ w.double() + b.double())

    def fresh():
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        return [x, w, torch.randn(N, device="cuda")]

    # inductor compiles in this process (no worker pool to wait on); the whole test is bounded
    with _watchdog(240, "reduce-overhead capture"), _inductor_in_process():
        compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
        for _ in range(4):  # warm-up, recording, replays: fresh inputs each time
            x, w, b = fresh()
            torch.testing.assert_close(
                compiled(x, w, b).double(), ref(x, w, b), rtol=1e-3, atol=1e-3
            )

        static = fresh()
        plain = torch.compile(model, fullgraph=True)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                plain(*static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = plain(*static)
        for _ in range(3):
            new = fresh()
            for t, f in zip(static, new):
                t.copy_(f)
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(out.double(), ref(*new), rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@_bounded(240)
def test_plain_kernel_inside_fullgraph_compile_cuda():
    """A JITKernel called directly inside torch.compile(fullgraph=True) on the GPU."""
    _skip_without_cuda()
    M, N, K = 200, 136, 72
    kernel = _gemm_bias(M, N, K, bm=64, bn=64, bk=32, target="cuda", dtype="float16", threads=128)
    f = torch.compile(lambda x, w, b: torch.relu(kernel(x, w) + b), fullgraph=True)
    for _ in range(2):
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = torch.randn(K, N, device="cuda", dtype=torch.float16)
        b = torch.randn(N, device="cuda")
        want = torch.relu(x.double() @ w.double() + b.double())
        torch.testing.assert_close(f(x, w, b).double(), want, rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@_bounded(240)
def test_fullgraph_compile_and_dynamic_rows_cuda():
    _skip_without_cuda()
    M, N, K = 200, 136, 72
    op = _gemm_bias(
        M, N, K, bm=64, bn=64, bk=32, target="cuda", dtype="float16", threads=128
    ).as_torch_op()
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16)
    b = torch.randn(N, device="cuda")
    got = torch.compile(lambda x, w, b: F.gelu(op(x, w) + b).softmax(-1), fullgraph=True)(x, w, b)
    want = F.gelu(x.double() @ w.double() + b.double()).softmax(-1)
    torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-4)

    dyn = tilelang.compile(dyn_rowscale(), out_idx=[-1], target="cuda").as_torch_op()
    f = torch.compile(lambda a, s: dyn(a * 2, s) - 1, fullgraph=True, dynamic=True)
    for m in (5, 13, 8):
        a, s = torch.randn(m, 6, device="cuda"), torch.randn(6, device="cuda")
        torch.testing.assert_close(f(a, s).double(), a.double() * 2 * s.double() - 1)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
@_bounded(240)
def test_flash_attention_autograd_cuda(causal, compiled):
    _skip_without_cuda()
    torch.manual_seed(99 + 2 * causal + compiled)
    Attn = _flash_attention_function(2, 3, 192, 64, causal, target="cuda", block=64)
    _check_attention(Attn, 2, 3, 192, 64, causal, "cuda", compiled)


@tilelang.jit(out_idx=[-1], target="cpu")
def axpb(M, N):
    """``Y = alpha * X + b`` with a float scalar and an int scalar parameter."""

    @T.prim_func
    def main(
        X: T.Tensor((M, N), "float32"), alpha: T.float32, b: T.int32, Y: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(M, N):
                Y[i, j] = X[i, j] * alpha + b

    return main


def test_scalar_parameters_in_schema_compile_and_autograd(randn):
    M, N = 13, 7
    op = axpb.as_torch_op(M, N)
    assert op.schema == "(Tensor X, float alpha, int b) -> Tensor"
    assert op.mutated == []
    x = randn(M, N)
    f = torch.compile(lambda x, alpha: op(x.cos(), alpha, 3) * 2, fullgraph=True)
    for alpha in (0.5, -1.25):
        torch.testing.assert_close(f(x, alpha).double(), (x.double().cos() * alpha + 3) * 2)

    # d(alpha * x + b)/dx = alpha: the same kernel with b = 0 computes the gradient
    Axpb = tilelang.autograd_function(
        forward=axpb(M, N),
        backward=lambda x, alpha, b, y, dy: (op(dy.contiguous(), alpha, 0), None, None),
    )
    xg = x.clone().requires_grad_()
    up = randn(M, N)
    loss = torch.compile(lambda x: (Axpb.apply(x, 1.5, 2) * up).sum(), fullgraph=True)(xg)
    loss.backward()
    torch.testing.assert_close(xg.grad.double(), 1.5 * up.double())
    torch.testing.assert_close(loss.double(), ((x.double() * 1.5 + 2) * up.double()).sum())


def test_mutation_bumps_the_version_counter_and_bare_backward_is_refused(randn):
    op = scale_and_stash(24, 3).as_torch_op()
    a, b = randn(24, 3), randn(24, 3)
    before = b._version
    op(a, b)
    assert b._version == before + 1 and a._version == 0
    out = op(randn(24, 3).requires_grad_(), b)
    with pytest.raises(tilelang.KernelArgumentError, match="has no derivative: wrap the kernel"):
        out.sum().backward()


def test_an_op_of_that_name_registered_elsewhere_is_reported(monkeypatch):
    module = sys.modules["tilelang.jit.torch_op"]

    kernel = scale_and_stash(26, 3)
    name = kernel.as_torch_op().qualname
    monkeypatch.setattr(module, "_REGISTRY", {})  # as if another registry had defined it
    with pytest.raises(tilelang.KernelArgumentError, match=f"{name} exists already"):
        kernel.as_torch_op()

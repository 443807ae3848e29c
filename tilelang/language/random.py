"""Random numbers: ``T.rng_init(seed, seq=None, off=0)``, ``T.rng_rand()``,
``T.rng_rand_float(bit=32, dist="uniform")`` (upstream's names and arguments).

Upstream keeps a curand state per thread. tilelang defines its own deterministic stream, the
same on every backend: draw ``n`` of the stream ``(seed, seq)`` is the Philox4x32-10 block
of counter ``(n_lo, n_hi, seq_lo, seq_hi)`` under key ``(seed_lo, seed_hi)`` (Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC'11), with ``n`` counting up from ``off``.
``T.rng_init`` stores ``(seed, seq, off)`` in a per-thread cell; every ``T.rng_rand*`` call
reads the counter, advances it by one and returns a pure function of the four words, so a
program gets the same numbers on the CPU and on CUDA whenever each stream is drawn in the same
order (per-thread code; or ``T.Parallel`` loops run by one thread). ``seq`` defaults to the
global thread id ``tx + bx * threads`` as upstream's. The ``generator`` argument (a curand
state name) is accepted and checked; the numbers are Philox4x32-10's for all three.

- ``T.rng_rand()``: uint32, word 0.
- ``T.rng_rand_float(32, "uniform")``: float32 in (0, 1]: ``((w0 >> 8) + 1) * 2^-24``.
- ``T.rng_rand_float(64, "uniform")``: float64 in (0, 1] from 53 bits of ``w0:w1``.
- ``"normal"``: a standard normal by Box-Muller, ``sqrt(-2 ln u1) * cos(2 pi u2)`` with
  ``u1`` from ``w0`` (``w0:w1`` for 64 bits) and ``u2`` from ``w2`` (``w2:w3``).
"""

from __future__ import annotations

import math

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import dtypes, errors
from . import builder

GENERATORS = ("curandStatePhilox4_32_10_t", "curandStateMRG32k3a_t", "curandStateXORWOW_t")
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def _u32(x):
    return ir.const(x, "uint32") if isinstance(x, int) else dtypes.convert(x, "uint32")


def _u64(x):
    return ir.const(x, "uint64") if isinstance(x, int) else dtypes.convert(x, "uint64")


def _let(value, body_fn, name="r"):
    """``body_fn(v)`` with ``v`` bound once to ``value`` (a Let expression: no duplication)."""
    var = ir.Var(name, value.ty)
    return _tirx.Let(var, value, body_fn(var))


def _mulhilo(a, m):
    """(hi, lo) 32-bit halves of the 64-bit product of uint32 ``a`` and constant ``m``."""
    p = _u64(a) * ir.const(m, "uint64")
    return p


def philox4x32_10(c, k, use):
    """``use(words)`` for the Philox4x32-10 block of counter ``c`` (4 uint32) and key ``k``
    (2 uint32); intermediate words are Let-bound so the expression stays linear in size."""

    def rounds(c, k, left):
        if left == 0:
            return use(c)

        def after_products(p0, p1):
            hi0 = _u32(_tirx.shift_right(p0, ir.const(32, "uint64")))
            lo0 = _u32(p0)
            hi1 = _u32(_tirx.shift_right(p1, ir.const(32, "uint64")))
            lo1 = _u32(p1)
            nxt = [
                _tirx.bitwise_xor(_tirx.bitwise_xor(hi1, c[1]), k[0]),
                lo1,
                _tirx.bitwise_xor(_tirx.bitwise_xor(hi0, c[3]), k[1]),
                lo0,
            ]
            nk = [k[0] + ir.const(PHILOX_W[0], "uint32"), k[1] + ir.const(PHILOX_W[1], "uint32")]
            return _bind_all(nxt + nk, lambda vs: rounds(vs[:4], vs[4:], left - 1))

        return _let(
            _mulhilo(c[0], PHILOX_M[0]),
            lambda p0: _let(_mulhilo(c[2], PHILOX_M[1]), lambda p1: after_products(p0, p1), "p1"),
            "p0",
        )

    return rounds(list(c), list(k), 10)


def _bind_all(values, body_fn, bound=()):
    if not values:
        return body_fn(list(bound))
    if isinstance(values[0], ir.IntImm | ir.Var):
        return _bind_all(values[1:], body_fn, (*bound, values[0]))
    return _let(values[0], lambda v: _bind_all(values[1:], body_fn, (*bound, v)), "w")


def philox_reference(seed: int, seq: int, n: int) -> list[int]:
    """Pure-Python Philox4x32-10 of draw ``n`` of stream ``(seed, seq)`` (for tests)."""
    mask = 0xFFFFFFFF
    c = [n & mask, (n >> 32) & mask, seq & mask, (seq >> 32) & mask]
    k = [seed & mask, (seed >> 32) & mask]
    for _ in range(10):
        p0, p1 = PHILOX_M[0] * c[0], PHILOX_M[1] * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & mask, (p0 >> 32) ^ c[3] ^ k[1], p0 & mask]
        k = [(k[0] + PHILOX_W[0]) & mask, (k[1] + PHILOX_W[1]) & mask]
    return c


# ---------------------------------------------------------------------------------------
def _kernel():
    from .kernel import _current

    return _current()


def rng_init(seed, seq=None, off=0, generator="curandStatePhilox4_32_10_t"):
    """Start this thread's random stream ``(seed, seq)`` at draw ``off`` (module docstring)."""
    from .allocate import alloc_local

    builder.state()
    if generator not in GENERATORS:
        raise errors.TraceError(
            f"T.rng_init: generator must be one of {', '.join(GENERATORS)}, got {generator!r}"
        )
    frame = _kernel()
    if seq is None:
        seq = frame.thread_vars[0] + frame.block_vars[0] * frame.threads[0]
    for name, v in (("seed", seed), ("seq", seq), ("off", off)):
        v = builder.unwrap(v)
        if isinstance(v, float) or (builder.is_expr(v) and dtypes.is_float(str(v.ty))):
            raise errors.TraceError(f"T.rng_init: {name} must be an integer, got {v!r}")
        if isinstance(v, int) and v < 0:
            raise errors.TraceError(f"T.rng_init: {name} must be non-negative, got {v}")
    state = getattr(frame, "_tl_rng_state", None)
    if state is None:
        state = alloc_local((3,), "uint64")
        frame._tl_rng_state = state
    builder.store(state, [0], _u64(builder.unwrap(seed)))
    builder.store(state, [1], _u64(builder.unwrap(seq)))
    builder.store(state, [2], _u64(builder.unwrap(off)))


def _draw(use, name):
    """Read and advance this thread's counter; ``use(words)`` of the Philox block."""
    from tvm_tirx.script import tirx as _T

    builder.state()
    state = getattr(_kernel(), "_tl_rng_state", None)
    if state is None:
        raise errors.TraceError(f"T.{name} needs a T.rng_init(seed, ...) earlier in the kernel")
    n = ir.Var("rng_n", "uint64")
    _T.emit_(ir.Bind(n, ir.TensorLoad(state, [ir.const(2, "int32")]), loc=builder.user_loc()))
    builder.store(state, [2], n + ir.const(1, "uint64"))
    seed = ir.TensorLoad(state, [ir.const(0, "int32")])
    seq = ir.TensorLoad(state, [ir.const(1, "int32")])
    shift = ir.const(32, "uint64")
    counter = [_u32(n), _u32(_tirx.shift_right(n, shift)), _u32(seq), None]
    counter[3] = _u32(_tirx.shift_right(seq, shift))
    key = [_u32(seed), _u32(_tirx.shift_right(seed, shift))]
    return _bind_all(counter + key, lambda vs: philox4x32_10(vs[:4], vs[4:], use))


def rng_rand():
    """A uniformly distributed uint32 (word 0 of the next Philox block of this thread)."""
    return _draw(lambda w: w[0], "rng_rand")


def _unit(words, bits):
    """A uniform value in (0, 1] from 24 bits of one word (32) or 53 bits of two (64)."""
    if bits == 32:
        top = _tirx.shift_right(words[0], ir.const(8, "uint32"))
        return (top.astype("float32") + ir.const(1.0, "float32")) * ir.const(2.0**-24, "float32")
    hi = _tirx.shift_right(words[0], ir.const(11, "uint32")).astype("uint64")  # 21 bits
    x = _tirx.bitwise_or(_tirx.shift_left(hi, ir.const(32, "uint64")), words[1].astype("uint64"))
    return (x.astype("float64") + ir.const(1.0, "float64")) * ir.const(2.0**-53, "float64")


def rng_rand_float(bit=32, dist="uniform"):
    """A float32/float64 (``bit``) uniform in (0, 1] or standard normal (``dist``)."""
    if bit not in (32, 64):
        raise errors.TraceError(f"T.rng_rand_float: bit must be 32 or 64, got {bit!r}")
    if dist not in ("uniform", "normal"):
        raise errors.TraceError(
            f"T.rng_rand_float: dist must be 'uniform' or 'normal', got {dist!r}"
        )
    dt = f"float{bit}"

    def use(w):
        u1 = _unit(w, bit)
        if dist == "uniform":
            return u1
        u2 = _unit(w[2:], bit) - ir.const(1.0, dt) * ir.const(2.0 ** -(24 if bit == 32 else 53), dt)
        radius = _tirx.sqrt(ir.const(-2.0, dt) * _tirx.log(u1))
        return radius * _tirx.cos(ir.const(2.0 * math.pi, dt) * u2)

    return _draw(use, "rng_rand_float")

"""Random numbers: ``T.rng_init(seed, seq=None, off=0)``, ``T.rng_rand()``,
``T.rng_rand_float(bit=32, dist="uniform")`` (upstream's names and arguments).

Upstream keeps a curand ``curandStatePhilox4_32_10_t`` per thread; tilelang produces the
same stream on every backend without curand. The stream ``(seed, seq)`` is a sequence of
uint32 words: word ``g`` is word ``g % 4`` of the Philox4x32-10 block of counter
``(g // 4 as 64 bits, seq as 64 bits)`` under key ``(seed_lo, seed_hi)`` (Salmon et al., SC'11;
curand's ``skipahead_sequence(seq)`` + ``skipahead(off)``), and ``T.rng_init`` starts the
thread at word ``off``. ``T.rng_init`` stores ``(seed, seq, next word)`` in a per-thread
cell; each ``T.rng_*`` call takes the next word(s), so a program gets the same numbers on
the CPU and on CUDA (and as upstream's curand) whenever each stream is drawn in the same
order (per-thread code; or ``T.Parallel`` loops run by one thread). ``seq`` defaults to the
global thread id ``tx + bx * threads`` as upstream's. The ``generator`` argument (a curand
state name) is accepted and checked; the numbers are Philox4x32-10's for all three.

- ``T.rng_rand()``: the next word (``curand``).
- ``T.rng_rand_float(32, "uniform")``: float32 in (0, 1]: ``float(x) * 2^-32 + 2^-33``
  (``curand_uniform``).
- ``T.rng_rand_float(64, "uniform")``: two words ``x, y``: ``z = x ^ (y << 21)``,
  ``z * 2^-53 + 2^-54`` (``curand_uniform_double``).
- ``"normal"``: Box-Muller of a pair, as ``curand_normal`` / ``curand_normal_double``: a call
  with no value pending takes two words (32 bits) or four (64 bits), returns ``s * sin(v)``
  and keeps ``s * cos(v)`` for the next normal call of the same width, which takes no words.
"""

from __future__ import annotations

import math

import numpy as np
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
        # seed, seq, next word, normal32/64 pending flags, their values' bits
        state = alloc_local((7,), "uint64")
        frame._tl_rng_state = state
    builder.store(state, [0], _u64(builder.unwrap(seed)))
    builder.store(state, [1], _u64(builder.unwrap(seq)))
    builder.store(state, [2], _u64(builder.unwrap(off)))
    builder.store(state, [3], ir.const(0, "uint64"))
    builder.store(state, [4], ir.const(0, "uint64"))


def _state(name):
    builder.state()
    frame = _kernel()
    state = getattr(frame, "_tl_rng_state", None)
    if state is None:
        raise errors.TraceError(f"T.{name} needs a T.rng_init(seed, ...) earlier in the kernel")
    return frame, state


def _bind(value, name):
    """Emit ``name = value`` at the user's line and return the bound variable."""
    from tvm_tirx.script import tirx as _T

    var = ir.Var(name, value.ty)
    _T.emit_(ir.Bind(var, value, loc=builder.user_loc()))
    return var


def _word_at(n, state):
    """Word ``n`` of this thread's stream: word ``n % 4`` of Philox block ``n // 4``."""
    seed = ir.TensorLoad(state, [ir.const(0, "int32")])
    seq = ir.TensorLoad(state, [ir.const(1, "int32")])
    shift = ir.const(32, "uint64")
    block = _tirx.shift_right(n, ir.const(2, "uint64"))
    which = _u32(_tirx.bitwise_and(n, ir.const(3, "uint64")))
    counter = [_u32(block), _u32(_tirx.shift_right(block, shift)), _u32(seq), None]
    counter[3] = _u32(_tirx.shift_right(seq, shift))
    key = [_u32(seed), _u32(_tirx.shift_right(seed, shift))]

    def pick(w):
        return _tirx.Select(
            which == ir.const(0, "uint32"),
            w[0],
            _tirx.Select(
                which == ir.const(1, "uint32"),
                w[1],
                _tirx.Select(which == ir.const(2, "uint32"), w[2], w[3]),
            ),
        )

    return _bind_all(counter + key, lambda vs: philox4x32_10(vs[:4], vs[4:], pick))


def _words(count, name, advance=None):
    """The next ``count`` words (bound variables); the counter advances by ``advance``
    (an expression: 0 when a pending normal value is returned instead), else ``count``."""
    _, state = _state(name)
    n = _bind(ir.TensorLoad(state, [ir.const(2, "int32")]), "rng_n")
    step = ir.const(count, "uint64") if advance is None else advance
    builder.store(state, [2], n + step)
    return [
        _bind(_word_at(n + ir.const(i, "uint64") if i else n, state), "rng_w") for i in range(count)
    ]


def rng_rand():
    """The next uint32 of this thread's stream (``curand``)."""
    return _words(1, "rng_rand")[0]


def _uniform32(x):
    scale = ir.const(2.0**-32, "float32")
    return x.astype("float32") * scale + ir.const(2.0**-33, "float32")


def _uniform53(x, y, step, offset):
    z = _tirx.bitwise_xor(
        x.astype("uint64"), _tirx.shift_left(y.astype("uint64"), ir.const(21, "uint64"))
    )
    return z.astype("float64") * ir.const(step, "float64") + ir.const(offset, "float64")


def _normal(bit):
    """curand_normal(_double): Box-Muller pairs, the second value kept for the next call."""
    frame, state = _state("rng_rand_float")
    dt = f"float{bit}"
    slot = 3 if bit == 32 else 4
    pending = _bind(ir.TensorLoad(state, [ir.const(slot, "int32")]), "rng_pending")
    is_pending = pending != ir.const(0, "uint64")
    count = 2 if bit == 32 else 4
    advance = _tirx.Select(is_pending, ir.const(0, "uint64"), ir.const(count, "uint64"))
    w = _words(count, "rng_rand_float", advance)
    if bit == 32:
        u = _uniform32(w[0])
        step = ir.const(float(np.float32(2.0**-32 * 2 * math.pi)), "float32")
        v = w[1].astype("float32") * step + step * ir.const(0.5, "float32")
        radius = _bind(_tirx.sqrt(ir.const(-2.0, dt) * _tirx.log(u)), "rng_s")
        first, second = radius * _tirx.sin(v), radius * _tirx.cos(v)
    else:
        u = _uniform53(w[0], w[1], 2.0**-53, 2.0**-54)
        v = _bind(_uniform53(w[2], w[3], 2.0**-52, 2.0**-53) * ir.const(math.pi, dt), "rng_v")
        radius = _bind(_tirx.sqrt(ir.const(-2.0, dt) * _tirx.log(u)), "rng_s")
        first, second = radius * _tirx.sin(v), radius * _tirx.cos(v)
    bits = ir.TensorLoad(state, [ir.const(slot + 2, "int32")])
    bits = _u32(bits) if bit == 32 else bits
    kept = _bind(_tirx.reinterpret(bits, ty=dt), "rng_kept")
    result = _bind(_tirx.Select(is_pending, kept, first), "rng_normal")
    keep = _tirx.reinterpret(_tirx.Select(is_pending, kept, second), ty=f"uint{bit}")
    builder.store(state, [slot + 2], _u64(keep))
    builder.store(
        state, [slot], _tirx.Select(is_pending, ir.const(0, "uint64"), ir.const(1, "uint64"))
    )
    return result


def rng_rand_float(bit=32, dist="uniform"):
    """A float32/float64 (``bit``) uniform in (0, 1] or standard normal (``dist``)."""
    if bit not in (32, 64):
        raise errors.TraceError(f"T.rng_rand_float: bit must be 32 or 64, got {bit!r}")
    if dist not in ("uniform", "normal"):
        raise errors.TraceError(
            f"T.rng_rand_float: dist must be 'uniform' or 'normal', got {dist!r}"
        )
    if dist == "normal":
        return _normal(bit)
    if bit == 32:
        return _uniform32(_words(1, "rng_rand_float")[0])
    x, y = _words(2, "rng_rand_float")
    return _uniform53(x, y, 2.0**-53, 2.0**-54)

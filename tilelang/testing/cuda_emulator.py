"""A numpy emulator of the CUDA pipeline's thread-level IR (tests without a GPU).

``emulate(lowered_func, *arrays)`` runs the function ``pipeline.lower`` returns on
numpy arrays: blocks one after another, the threads of a block in lockstep as numpy
vectors (one lane per thread), so ``__syncthreads`` is implicit and
``__shfl_xor_sync`` is exact. It checks what a GPU would not report:

- every index of an access by an active thread is inside its tensor (per dimension);
- two threads never store different values to the same shared/global address in one
  statement (a write race);
- ``__syncthreads`` is never reached by only part of the block (divergent barrier), nor a
  ``*_sync`` warp intrinsic by part of the lanes its member mask names
  (``cuda_emulator_warp.check_converged``);
- reads of shared/local memory nobody wrote give NaN (floats are pre-filled with NaN).

It covers the subset the tilelang CUDA lowerings emit for non-gemm kernels (with the
vector copies ``tl::copy_vec``/``tl::zero_vec``, whose alignment it checks,
cp.async, done at once, device ``printf`` to stdout and ``__trap``, raised as
:class:`DeviceTrap`), and the mma.sync gemm helpers: ``tl::ptx_ldmatrix_x{1,2,4}[_trans]``,
``tl::float_to_tf32`` and the ``tl::mma_*`` wrappers of :data:`MMA_SHAPES` (one warp-wide
call per warp, by the PTX ISA fragment tables; all 32 lanes of a warp, or none, must be
active; bfloat16 through ``ml_dtypes``); anything else
(other ``tl::`` helpers) raises :class:`EmulationError` naming it.
Lockstep execution hides missing barriers; ``race_check=True`` finds them instead
(``cuda_emulator_race``: two warps touching a shared byte with no barrier between).
The numpy types, elementwise operation tables and errors live in ``cuda_emulator_values``
(re-exported here).
A persistent kernel's grid (``tl.persistent_tiles``) is ``min(tiles, __tl_sm_count())``:
the emulated device has ``TILELANG_EMULATOR_SM_COUNT`` SMs (default 132).
A cluster launch runs cluster by cluster, its blocks as cooperative tasks
(``cuda_emulator_cluster``: TMA multicast, remote mbarrier arrivals, cluster barriers).
"""

from __future__ import annotations

import os
import re
import sys
import threading

import numpy as np
from tvm_tirx import ir
from tvm_tirx.ir.prim import expr as P

from ..lowering.stmt import launch_of
from . import cuda_emulator_cluster as _cluster
from . import cuda_emulator_tma as _tma
from . import cuda_emulator_ws as _ws
from .cuda_emulator_atomic import atomic_add_x2, atomic_add_xn_ret
from .cuda_emulator_mma import (  # noqa: F401 - re-exported (tests use them from here)
    MMA_SHAPES,
    _is_tf32,
    tf32_round,
    wgmma_a_coords,
    wgmma_a_tiles,
)
from .cuda_emulator_race import RaceChecker
from .cuda_emulator_values import (  # noqa: F401 - re-exported (tests and emulators use them)
    _BIN,
    _CMP,
    _MATH,
    _NP,
    ATOMICS,
    MATH2,
    DeviceTrap,
    EmulationError,
    _c_unescape,
    _floating,
    np_dtype,
)
from .cuda_emulator_warp import check_converged, warp_extern


def whole_warpgroups(mask, lanes: int, fname: str) -> list:
    """Indices of the warpgroups whose 128 threads are all in ``mask``; EmulationError when
    a warpgroup is only partly active (a warpgroup instruction reached by part of it).
    Warpgroups with no active thread (e.g. a warp-specialized producer) are left out."""
    active = np.broadcast_to(mask, (lanes,))
    if lanes % 128:
        raise EmulationError(f"{fname}: the block is not a whole number of warpgroups")
    out = []
    for w in range(lanes // 128):
        part = active[128 * w : 128 * w + 128]
        if part.all():
            out.append(w)
        elif part.any():
            raise EmulationError(f"{fname}: reached by part of a warpgroup")
    if not out:
        raise EmulationError(f"{fname}: reached by no whole warpgroup")
    return out


class _Buf:
    """A tensor's storage: flat ``data`` (shared/global) or ``(threads, n)`` (local)."""

    def __init__(self, name, data, shape, local, shared=False, strides=None):
        self.name, self.data, self.shape, self.local = name, data, shape, local
        self.shared, self.strides = shared, strides  # strides: a strided T.view's, else None


class _Machine:
    error_type = EmulationError

    def __init__(self, func, arrays, blocks=None, aligned=True, write_once=False, race=False):
        self.func, self.env, self.bufs = func, {}, {}
        self.cluster_dims = _cluster.cluster_dims_of(func)  # cluster launch (cuda_emulator_cluster)
        self.cluster = None
        self.race = RaceChecker(EmulationError) if race else None
        self.aligned = aligned  # what tl::is_aligned answers (False: scalar fallbacks run)
        self.write_once = write_once
        self.lanes = 1
        self.blocks = None if blocks is None else {tuple(b) for b in blocks}
        self.block_index: dict = {}
        self.param_handles = {param.__chandle__() for param in func.params}
        self.barriers = _tma.Barriers(EmulationError)  # TMA pipelining (cuda_emulator_tma)
        self.task = threading.local()  # the running task (cuda_emulator_cluster.Scheduler)
        self.mbarrier_users: dict = {}  # statement handle -> uses mbarriers (cuda_emulator_ws)
        for param, arr in zip(func.params, arrays):
            self._bind_global(param, arr)

    # ------------------------------------------------------------------ storage
    def _bind_global(self, var, arr):
        if not hasattr(var.ty, "shape"):  # a scalar parameter (e.g. ``max_seqlen: T.int32``)
            self.env[var.__chandle__()] = np.asarray(arr).astype(np_dtype(var.ty.dtype))[()]
            return
        shape = list(arr.shape)
        for dim, size in zip(var.ty.shape, shape):
            if isinstance(dim, ir.Var):
                self.env[dim.__chandle__()] = np.int64(size)
        self.bufs[var.__chandle__()] = _Buf(var.name, arr.reshape(-1), var.ty.shape, False)

    def _fresh(self, var):
        dtype = np_dtype(var.ty.dtype)
        shape = [int(self.scalar(s)) for s in var.ty.shape]
        n = int(np.prod(shape)) if shape else 1
        local = str(var.ty.scope).startswith("local")
        size = (self.lanes, n) if local else (n,)
        data = np.empty(size, dtype)
        if _floating(dtype):
            data.fill(np.nan)
        else:
            data.fill(np.iinfo(dtype).max if dtype is not np.bool_ else 0)
        shared = str(var.ty.scope).startswith("shared")
        self.bufs[var.__chandle__()] = _Buf(var.name, data, var.ty.shape, local, shared)

    def _view(self, var, call):
        """A ``decl_tensor`` view: of a scratch buffer (the shared-memory pool, at a byte
        offset; its floating views start as NaN, except in a cluster launch) or of a kernel parameter (a reshape of the
        caller's data, e.g. ``T.Tensor(shape, dtype, X.data)``)."""
        ptr = call.args[0]
        fresh = True  # a tile placed in a scratch buffer: nothing written there yet
        if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.ptr_byte_offset":
            data_ptr, offset = ptr.args
            base_var, offset = data_ptr.args[0], int(self.scalar(offset))
        elif isinstance(ptr, ir.Call) and ptr.op.name == "tirx.tensor_data_ptr":
            base_var, offset = ptr.args[0], 0
            # T.reshape/T.view of a tile: the same bytes, already written
            fresh = str(self.bufs[base_var.__chandle__()].data.dtype) == "uint8"
        else:
            raise EmulationError(f"decl_tensor of {var.name}: unsupported pointer {ptr}")
        base = self.bufs[base_var.__chandle__()]
        dtype = np_dtype(var.ty.dtype)
        shape = [int(self.scalar(s)) for s in var.ty.shape]
        layout = var.ty.layout  # explicit strides (T.view(..., strides=)): span of the view
        strides = None if layout is None else [int(self.scalar(i.stride)) for i in layout.shard]
        n = (
            int(np.prod(shape))
            if strides is None
            else 1 + sum((e - 1) * st for e, st in zip(shape, strides))
        )
        raw = base.data.view(np.uint8)
        view = raw[offset : offset + n * np.dtype(dtype).itemsize].view(dtype)
        if view.size != n:
            raise EmulationError(f"{var.name} does not fit in {base.name} at byte {offset}")
        # (not in a cluster launch's shared memory: a peer's multicast may already have
        # landed in these bytes, and declaring a view writes nothing on the GPU)
        peers_write = base.shared and self.cluster is not None
        if (
            _floating(dtype)
            and fresh
            and base_var.__chandle__() not in self.param_handles
            and not peers_write
        ):
            view.fill(np.nan)
        self.bufs[var.__chandle__()] = _Buf(
            var.name, view, var.ty.shape, base.local, base.shared, strides
        )

    def buf(self, var) -> _Buf:
        b = self.bufs.get(var.__chandle__())
        if b is None:
            raise EmulationError(f"tensor {var.name} is used before it is allocated")
        return b

    def flat(self, b, indices, mask, what):
        idx = [
            np.broadcast_to(np.asarray(self.eval(i, mask), np.int64), (self.lanes,))
            for i in indices
        ]
        shape = [int(self.scalar(s)) for s in b.shape]
        if len(idx) != len(shape):
            raise EmulationError(f"{what} {b.name}: {len(idx)} indices for {len(shape)} dims")
        active = np.broadcast_to(mask, (self.lanes,))
        flat = np.zeros(self.lanes, np.int64)
        for axis, (i, size) in enumerate(zip(idx, shape)):
            bad = active & ((i < 0) | (i >= size))
            if bad.any():
                t = int(np.argmax(bad))
                raise EmulationError(
                    f"{what} {b.name}: thread {t} (block {self.block_index}) index "
                    f"{[int(x[t]) for x in idx]} is outside shape {shape} (axis {axis})"
                )
            flat = flat + i * b.strides[axis] if b.strides else flat * size + i
        return np.where(active, flat, 0), active

    def _track(self, b, flat, active, kind, what, nbytes=None, in_bytes=False):
        """Report a shared access to the race checker (``race_check``); ``flat``: element
        (or, ``in_bytes``, byte) offsets per thread, ``active``: the threads accessing."""
        if self.race is None or not b.shared:
            return
        rows = np.nonzero(np.broadcast_to(active, (self.lanes,)))[0]
        size = b.data.dtype.itemsize
        starts = flat[rows] if in_bytes else flat[rows] * size
        self.race.access(b, starts, nbytes or size, rows, kind, what)

    # ------------------------------------------------------------------ expressions
    def scalar(self, e):
        v = self.eval(e, True)
        arr = np.asarray(v)
        if arr.ndim and not np.all(arr == arr.flat[0]):
            raise EmulationError(f"{e} must be the same in every thread")
        return arr.flat[0] if arr.ndim else arr[()]

    def eval(self, e, mask):
        if isinstance(e, int | float | bool | np.generic | np.ndarray):
            return e
        if isinstance(e, ir.IntImm):
            return np.asarray(e.value, np_dtype(e.ty)) if str(e.ty) in _NP else e.value
        if isinstance(e, ir.FloatImm):
            return np.asarray(e.value, np_dtype(e.ty))
        if isinstance(e, ir.Var):
            h = e.__chandle__()
            if h not in self.env:
                raise EmulationError(f"variable {e.name} has no value")
            return self.env[h]
        if isinstance(e, ir.TensorLoad):
            b = self.buf(e.source)
            flat, active = self.flat(b, e.indices, mask, "load from")
            self._track(b, flat, active, "read", "a load")
            if b.local:
                return b.data[np.arange(self.lanes), flat]
            return b.data[flat]
        with np.errstate(all="ignore"):
            return self._eval_op(e, mask)

    def _eval_op(self, e, mask):
        t = type(e)
        if t in _BIN:
            out = _BIN[t](self.eval(e.a, mask), self.eval(e.b, mask))
            return self._as(out, e.ty)
        if t in _CMP:
            return _CMP[t](self.eval(e.a, mask), self.eval(e.b, mask))
        if t in (P.FloorDiv, P.Div, P.Mod):
            a, b = self.eval(e.a, mask), self.eval(e.b, mask)
            if _floating(np_dtype(e.ty)):
                out = a / b if t is not P.Mod else np.fmod(a, b)
            elif t is P.FloorDiv:
                out = np.floor_divide(a, np.where(b == 0, 1, b))
            elif t is P.Div:
                q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
                out = np.where((np.asarray(a) < 0) ^ (np.asarray(b) < 0), -q, q)
            else:
                out = np.fmod(a, np.where(b == 0, 1, b))
            return self._as(out, e.ty)
        if t is P.And:
            return np.logical_and(self.eval(e.a, mask), self.eval(e.b, mask))
        if t is P.Or:
            return np.logical_or(self.eval(e.a, mask), self.eval(e.b, mask))
        if t is P.Not:
            return np.logical_not(self.eval(e.a, mask))
        if t is P.Cast:
            return np.asarray(self.eval(e.value, mask)).astype(np_dtype(e.ty))
        if t is P.Select:  # printed as C's ?:, so each arm runs in the lanes that take it
            c = self.eval(e.condition, mask)
            yes = self.eval(e.true_value, np.logical_and(mask, c))
            no = self.eval(e.false_value, np.logical_and(mask, np.logical_not(c)))
            return np.where(c, yes, no)
        if t is P.Let:
            self.env[e.var.__chandle__()] = self.eval(e.value, mask)
            return self.eval(e.body, mask)
        if isinstance(e, ir.Call):
            return self._call(e, mask)
        raise EmulationError(f"the emulator does not handle {t.__name__}: {e}")

    @staticmethod
    def _as(value, ty):
        name = str(ty)
        return np.asarray(value).astype(_NP[name]) if name in _NP else value

    def _call(self, e, mask):
        name = e.op.name
        if name in ("tirx.if_then_else", "prim.if_then_else"):
            c = self.eval(e.args[0], mask)
            a = self.eval(e.args[1], np.logical_and(mask, c))
            b = self.eval(e.args[2], np.logical_and(mask, np.logical_not(c)))
            return self._as(np.where(c, a, b), e.ty)
        if name in ("tirx.call_extern", "tirx.call_pure_extern"):
            return self._extern(str(e.args[0].value), e.args[1:], e, mask)
        if name == _tma.ENCODE_OP:  # host-side tensor map encoding (TMA)
            self.env[e.args[0].__chandle__()].encode(self, e, EmulationError)
            return np.int32(0)
        if name == "tirx.reinterpret" and _tma.is_address(e.args[0]):  # TMA base alignment
            return _tma.address_value(self, e.args[0], mask)
        if name == "tirx.reinterpret":  # the same bits read as another type of one width
            value = np.asarray(self.eval(e.args[0], mask)).astype(np_dtype(e.args[0].ty))
            return value.view(np_dtype(e.ty))
        short = name.split(".")[-1]
        if short in _MATH:
            return self._as(_MATH[short](self.eval(e.args[0], mask)), e.ty)
        if short == "pow":
            return self._as(np.power(self.eval(e.args[0], mask), self.eval(e.args[1], mask)), e.ty)
        raise EmulationError(f"the emulator does not handle the call {name}")

    def _extern(self, fname, args, e, mask):
        if "cluster" in fname or "multicast" in fname:  # cuda_emulator_cluster
            done = _cluster.cluster_extern(self, fname, args, mask)
            if done is not NotImplemented:
                return done
        if fname == SM_COUNT_FUNC:  # host: the device's SM count (persistent kernels)
            return np.int32(emulated_sm_count())
        if fname == "tl::grid_dim_x":
            return np.int32(self.grid_dims["blockIdx.x"])
        if fname == "__longlong_as_double":  # exact float64 constants (exact_float_constants)
            return np.asarray(self.eval(args[0], mask), dtype=np.int64).view(np.float64)
        if fname in ("__shfl_xor_sync", "__shfl_sync", "__shfl_down_sync"):
            check_converged(self, fname, args[0], mask)
            value = np.broadcast_to(self.eval(args[1], mask), (self.lanes,))
            k = int(self.scalar(args[2]))
            width = int(self.scalar(args[3])) if len(args) > 3 else 32
            lane = np.arange(self.lanes)
            if fname == "__shfl_xor_sync":  # a partner in a later width-group: own value
                src = np.where((lane ^ k) < lane - lane % width + width, lane ^ k, lane)
            elif fname == "__shfl_sync":
                src = (lane - lane % width) + np.broadcast_to(np.asarray(k), lane.shape) % width
            else:
                src = np.where(lane % width + k < width, lane + k, lane)
            return value[src]
        if fname in _MATH:
            return self._as(_MATH[fname](self.eval(args[0], mask)), e.ty)
        if fname in MATH2:
            return self._as(MATH2[fname](self.eval(args[0], mask), self.eval(args[1], mask)), e.ty)
        warp = warp_extern(self, fname, args, e, mask)  # votes, warp reductions, shfl_up
        if warp is not None:
            return warp
        if fname in ATOMICS:
            return self._atomic(fname, args, mask)
        if fname == "tl::AtomicAddx2":
            return atomic_add_x2(self, fname, args, mask)
        if fname in ("tl::AtomicAddx2Ret", "tl::AtomicAddx4Ret"):
            return atomic_add_xn_ret(self, fname, args, mask)
        if fname.startswith("tl::cp_async_gs"):
            return self._cp_async(fname, args, mask)
        if fname.startswith(("tl::cp_async_commit", "tl::cp_async_wait")):
            return None  # copies are done synchronously
        if fname.startswith("tl::tma_load_"):
            return _tma.tma_load(self, self.barriers, fname, args, mask, EmulationError)
        if fname.startswith("tl::tma_store_"):  # TMA stores and their bulk groups
            if fname.startswith(("tl::tma_store_commit", "tl::tma_store_wait_read<")):
                return _tma.bulk_group_op(self, fname, mask, EmulationError)
            return _tma.tma_store(self, fname, args, mask, EmulationError)
        if fname.startswith("tl::ptx_stmatrix_x"):
            return _tma.stmatrix(self, fname, args, mask, EmulationError)
        if fname.startswith("tl::st_shared_pair<"):
            return _tma.st_shared_pair(self, fname, args, mask, EmulationError)
        if fname.startswith("tl::mbarrier_"):
            op = fname[len("tl::mbarrier_") :]
            if op == "init_fence":
                return None
            result = getattr(self.barriers, op)(self, args, mask)
            if "wait" in op and self.race is not None:
                # the acquire point: after the wait returned (a cooperative task may have
                # blocked in it while another task wrote and arrived)
                self.race.barrier()
            return result
        if fname.startswith(("tl::fence_proxy_async", "tl::set_max_nreg<")):
            if fname.startswith("tl::fence_proxy_async") and self.race is not None:
                self.race.proxy_fence(np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0])
            return None  # ordering / register budget only (hopper.h)
        if fname.startswith(("tl::copy_vec<", "tl::zero_vec<")):
            return self._copy_vec(fname, args, mask)
        if fname == "tl::is_aligned":
            return np.bool_(self.aligned)
        if fname.startswith("tl::ptx_ldmatrix_x"):
            return self._ldmatrix(fname, args, mask)
        if fname in MMA_SHAPES:
            return self._mma(fname, args, mask)
        if fname == "tl::float_to_tf32":
            return tf32_round(self.eval(args[0], mask))
        if fname == "printf":
            return self._printf(args, mask)
        if fname in (
            "__syncwarp",
            "tl::named_barrier_sync",
            "tl::named_barrier_arrive",
            "tl::ws_turn_wait",  # ping-pong turns: issue order only, no epoch end
            "tl::ws_turn_arrive",
        ):
            if fname == "tl::named_barrier_sync" and self.race is not None:
                # the consumers' barrier in a specialized kernel, a thread-range branch's
                threads = np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0]
                self.race.barrier(threads, self.lanes)
            return None  # lanes run in lockstep here (a warp, a named barrier's threads)
        if fname == "__trap":
            threads = np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0].tolist()
            raise DeviceTrap(f"__trap() in block {self.block_index}, threads {threads}")
        raise EmulationError(f"the emulator does not handle the extern call {fname}")

    def _pointer(self, e, mask):
        """(buffer, flat element offset per thread) of a pointer expression."""
        if isinstance(e, ir.Call) and e.op.name == "tirx.address_of":
            b = self.buf(e.args[0].source)
            flat, _ = self.flat(b, e.args[0].indices, mask, "address of")
            return b, flat
        if isinstance(e, ir.Call) and e.op.name == "tirx.ptr_byte_offset":
            b, flat = self._pointer(e.args[0], mask)
            size = b.data.dtype.itemsize
            nbytes = np.broadcast_to(np.asarray(self.eval(e.args[1], mask), np.int64), flat.shape)
            if np.any(nbytes % size):
                raise EmulationError(f"byte offset into {b.name} is not a multiple of {size}")
            return b, flat + nbytes // size
        raise EmulationError(f"the emulator does not handle the pointer {e}")

    def _cp_async(self, fname, args, mask):
        """``tl::cp_async_gs[_conditional]<N>(smem, gmem[, pred])``, done at once."""
        nbytes = int(fname[fname.index("<") + 1 : fname.index(">")])
        sb, sflat = self._pointer(args[0], mask)
        active = np.broadcast_to(mask, (self.lanes,))
        pred = active
        if "conditional" in fname:
            pred = active & np.broadcast_to(self.eval(args[2], mask), (self.lanes,))
        gb, gflat = self._pointer(args[1], pred)
        n = nbytes // sb.data.dtype.itemsize
        self._track(sb, sflat, active, "write", fname, nbytes)
        for t in np.nonzero(active)[0]:
            dst = slice(int(sflat[t]), int(sflat[t]) + n)
            if sflat[t] + n > sb.data.size:
                raise EmulationError(f"{fname}: thread {t} writes past {sb.name}")
            if pred[t]:
                if gflat[t] + n > gb.data.size:
                    raise EmulationError(f"{fname}: thread {t} reads past {gb.name}")
                sb.data[dst] = gb.data[int(gflat[t]) : int(gflat[t]) + n]
            else:
                sb.data[dst] = 0
        return None

    def _printf(self, args, mask):
        """Device ``printf``: one line per active thread, in thread order, to stdout."""
        fmt = re.sub(r"%ll([du])", r"%\1", _c_unescape(str(args[0].value)))
        values = []
        for a in args[1:]:
            if isinstance(a, ir.StringImm):
                values.append([_c_unescape(str(a.value))] * self.lanes)
                continue
            arr = np.broadcast_to(np.asarray(self.eval(a, mask)), (self.lanes,))
            kind = float if _floating(arr.dtype) else int
            values.append([kind(x) for x in arr])
        for t in np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0]:
            sys.stdout.write(fmt % tuple(col[t] for col in values))
        return np.int32(0)

    def _check_once(self, b, addr):
        """``write_once``: no global element is stored by two threads in one statement."""
        uniq, counts = np.unique(addr, return_counts=True)
        if uniq.size and counts.max() > 1:
            k = int(np.argmax(counts))
            raise EmulationError(
                f"{b.name}[flat {int(uniq[k])}] is written by {int(counts[k])} threads in one "
                f"statement (block {self.block_index})"
            )

    def _copy_vec(self, fname, args, mask):
        """``tl::copy_vec<N>(dst, src)`` / ``tl::zero_vec<N>(dst)``: N bytes per thread.

        Checks that both pointers are N-byte aligned relative to their tensor's first
        element (what the lowering proved) and stay inside it.
        """
        nbytes = int(fname[fname.index("<") + 1 : fname.index(">")])
        active = np.broadcast_to(mask, (self.lanes,))
        rows = np.nonzero(active)[0]
        db, dflat = self._pointer(args[0], mask)
        n = nbytes // db.data.dtype.itemsize
        lanes = np.arange(n)

        def where(b, flat, what):
            size = b.data.shape[-1]
            bad = active & ((flat % n != 0) | (flat < 0) | (flat + n > size))
            if bad.any():
                t = int(np.argmax(bad))
                raise EmulationError(
                    f"{fname}: thread {t} (block {self.block_index}) {what} {b.name} at "
                    f"element {int(flat[t])}: not a {n}-element aligned vector inside it"
                )
            idx = flat[rows, None] + lanes[None, :]
            return (rows[:, None], idx) if b.local else (idx,)

        if fname.startswith("tl::zero_vec"):
            values = np.zeros((rows.size, n), db.data.dtype)
        else:
            sb, sflat = self._pointer(args[1], mask)
            if sb.data.dtype.itemsize * n != nbytes:
                raise EmulationError(f"{fname}: {sb.name} and {db.name} differ in element size")
            values = sb.data[where(sb, sflat, "reads")].astype(db.data.dtype)
            self._track(sb, sflat, active, "read", fname, nbytes)
        self._track(db, dflat, active, "write", fname, nbytes)
        if self.write_once and not db.local:
            self._check_once(db, dflat[rows])
        db.data[where(db, dflat, "writes")] = values
        return None

    def _warps(self, fname, mask):
        """Lane indices ``(warps, 32)`` of the warps running a warp-wide call (all lanes).

        A warp reaches the call with all its lanes or none of them.
        """
        active = np.broadcast_to(mask, (self.lanes,))
        if self.lanes % 32:
            raise EmulationError(f"{fname}: the block is not a whole number of warps")
        per_warp = active.reshape(-1, 32)
        partial = per_warp.any(axis=1) & ~per_warp.all(axis=1)
        if partial.any():
            raise EmulationError(
                f"{fname}: reached by part of warp {int(np.argmax(partial))} (block "
                f"{self.block_index}); ldmatrix/mma need all 32 lanes"
            )
        # warps whose lanes are all inactive skip the call (a warp-uniform branch)
        return np.arange(self.lanes).reshape(-1, 32)[per_warp.all(axis=1)]

    def _local_bytes(self, ptr, mask, nbytes, fname):
        """(uint8 view of a local tensor's rows, byte offset per thread) of ``ptr``."""
        b, flat = self._pointer(ptr, mask)
        if not b.local:
            raise EmulationError(f"{fname}: register operand {b.name} is not a local tensor")
        size = b.data.dtype.itemsize
        raw = b.data.view(np.uint8)
        off = flat * size
        if np.any(off + nbytes > raw.shape[-1]) or np.any(off < 0):
            raise EmulationError(f"{fname}: {nbytes} bytes at {b.name} run past it")
        return raw, off

    def _ldmatrix(self, fname, args, mask):
        """``tl::ptx_ldmatrix_x{1,2,4}[_trans](smem_ptr, regs)``: PTX ``ldmatrix .m8n8 .b16``.

        Lanes ``8 q .. 8 q + 7`` give the 16-byte row addresses of matrix ``q``; lane ``l``
        receives 32-bit word ``l % 4`` of row ``l // 4`` of every matrix (register ``q``),
        or with ``.trans`` the 16-bit elements ``(2 (l % 4) + h, l // 4)``, ``h = 0, 1``.
        """
        m = re.fullmatch(r"tl::ptx_ldmatrix_x([124])(_trans)?", fname)
        if m is None:
            raise EmulationError(f"the emulator does not handle the extern call {fname}")
        nmat, trans = int(m.group(1)), m.group(2) is not None
        warps = self._warps(fname, mask)
        sb, sflat = self._pointer(args[0], mask)
        if sb.local:
            raise EmulationError(f"{fname}: {sb.name} is not in shared memory")
        smem = sb.data.view(np.uint8)
        saddr = sflat * sb.data.dtype.itemsize
        raw, doff = self._local_bytes(args[1], mask, 4 * nmat, fname)
        rows_read = np.zeros(self.lanes, bool)
        rows_read[warps.reshape(-1)[(np.arange(warps.size) % 32) < 8 * nmat]] = True
        self._track(sb, saddr, rows_read, "read", fname, 16, in_bytes=True)
        for lanes in warps:
            rows = np.zeros((nmat, 8, 16), np.uint8)
            for q in range(nmat):
                for r in range(8):
                    a = int(saddr[lanes[8 * q + r]])
                    if a % 16 or a < 0 or a + 16 > smem.size:
                        raise EmulationError(
                            f"{fname}: row address {a} of {sb.name} (lane {8 * q + r}, block "
                            f"{self.block_index}) is not a 16-byte row inside it"
                        )
                    rows[q, r] = smem[a : a + 16]
            for lo, t in enumerate(lanes):
                for q in range(nmat):
                    if trans:  # 16-bit elements (2 (lo%4) + h, lo//4) of the 8x8 matrix
                        col = lo // 4
                        word = np.concatenate(
                            [rows[q, 2 * (lo % 4) + h, 2 * col : 2 * col + 2] for h in (0, 1)]
                        )
                    else:
                        word = rows[q, lo // 4, 4 * (lo % 4) : 4 * (lo % 4) + 4]
                    o = int(doff[t]) + 4 * q
                    raw[t, o : o + 4] = word
        return None

    def _mma(self, fname, args, mask):
        """``tl::mma_*(d, a, b, c)``: one ``mma.sync`` per warp (PTX fragment tables).

        Products are summed in float64 (int8: exactly); tf32 operands must already be
        rounded (``tl::float_to_tf32``), as ``cvt.rna.tf32.f32`` leaves them.
        """
        k, dt, ct, a_elem, b_elem, na, nb = MMA_SHAPES[fname]
        warps = self._warps(fname, mask)
        isz, csz = np.dtype(dt).itemsize, np.dtype(ct).itemsize
        d_raw, d_off = self._local_bytes(args[0], mask, 4 * csz, fname)
        a_raw, a_off = self._local_bytes(args[1], mask, na * isz, fname)
        b_raw, b_off = self._local_bytes(args[2], mask, nb * isz, fname)
        c_raw, c_off = self._local_bytes(args[3], mask, 4 * csz, fname)

        def regs(raw, off, t, n, size, dtype):
            o = int(off[t])
            return raw[t, o : o + n * size].copy().view(dtype)

        for lanes in warps:
            a, b, c = np.zeros((16, k)), np.zeros((k, 8)), np.zeros((16, 8))
            for lo, t in enumerate(lanes):
                g, tq = lo // 4, lo % 4
                av = regs(a_raw, a_off, t, na, isz, dt).astype(np.float64)
                bv = regs(b_raw, b_off, t, nb, isz, dt).astype(np.float64)
                cv = regs(c_raw, c_off, t, 4, csz, ct).astype(np.float64)
                for i in range(na):
                    a[a_elem(g, tq, i)] = av[i]
                for i in range(nb):
                    b[b_elem(g, tq, i)] = bv[i]
                for i in range(4):
                    c[g + 8 * (i // 2), 2 * tq + i % 2] = cv[i]
            if dt is np.float32 and not (_is_tf32(a).all() and _is_tf32(b).all()):
                raise EmulationError(f"{fname}: an operand is not rounded to tf32")
            d = a @ b + c
            for lo, t in enumerate(lanes):
                g, tq = lo // 4, lo % 4
                out = np.array([d[g + 8 * (i // 2), 2 * tq + i % 2] for i in range(4)])
                o = int(d_off[t])
                d_raw[t, o : o + 4 * csz] = out.astype(ct).view(np.uint8)
        return None

    def wgmma_register_a(self, ptr, mask, dtype, fname="wgmma (register A)"):
        """The 64 x 16 A tile each warpgroup passes to an RS-form wgmma through ``ptr``.

        ``ptr`` addresses each thread's 8 consecutive 16-bit elements ``a0..a7`` (four
        32-bit registers) in a local tensor; element ``a_i`` of lane ``l`` of warp ``w``
        is A[:func:`wgmma_a_coords`]. Returns float64 ``(warpgroups, 64, 16)``; every thread
        of a warpgroup must be active and every element written (NaN when not).
        """
        whole_warpgroups(mask, self.lanes, fname)
        raw, off = self._local_bytes(ptr, mask, 16, fname)
        return wgmma_a_tiles(raw, off, dtype)

    def _atomic(self, fname, args, mask):
        addr = args[0]
        if not (isinstance(addr, ir.Call) and addr.op.name == "tirx.address_of"):
            raise EmulationError(f"{fname}: unsupported address {addr}")
        load = addr.args[0]
        b = self.buf(load.source)
        flat, active = self.flat(b, load.indices, mask, fname)
        value = np.broadcast_to(self.eval(args[1], mask), (self.lanes,)).astype(b.data.dtype)
        old = b.data[flat].copy()
        ufunc = ATOMICS[fname]
        hit = flat[active]
        if len(np.unique(hit)) == len(hit):
            ufunc.at(b.data, hit, value[active])
            return old
        # lanes updating one address: one after another in lane order, each returning
        # the value the lanes before it left (CUDA serializes them in some order)
        for lane in np.flatnonzero(active):
            old[lane] = b.data[flat[lane]]
            b.data[flat[lane]] = ufunc(b.data[flat[lane]], value[lane])
        return old

    # ------------------------------------------------------------------ statements
    def run(self, stmt, mask):
        method = getattr(self, "_run_" + type(stmt).__name__, None)
        if method is None:
            raise EmulationError(f"the emulator does not handle {type(stmt).__name__}")
        method(stmt, mask)

    def _run_SeqStmt(self, stmt, mask):
        for s in stmt.seq:
            self.run(s, mask)

    def _run_RegionStmt(self, stmt, mask):
        launch = launch_of(stmt)
        if launch is None:
            raise EmulationError(f"the emulator does not handle region {stmt.op}")
        tag, extent, var = launch
        n = int(self.scalar(extent))
        if tag.startswith("threadIdx"):
            self.lanes = n
            if self.race is not None:
                self.race.new_block(self.block_index)
            self.env[var.__chandle__()] = np.arange(n, dtype=np.int32)
            self.run(stmt.body, np.ones(n, bool))
            _tma.bulk_stores(self, EmulationError).end_of_block(self.block_index)
            return
        if self.cluster_dims is not None and self.cluster is None:  # blocks run by cluster
            return _cluster.run_clusters(self, stmt, self.cluster_dims, mask)
        self.grid_dims = {**getattr(self, "grid_dims", {}), tag: n}
        inner = stmt.body
        while isinstance(inner, ir.SeqStmt) and len(inner.seq) == 1:
            inner = inner.seq[0]
        nested = launch_of(inner)
        innermost = nested is None or not nested[0].startswith("blockIdx")
        for i in range(n):
            self.block_index[tag] = i
            if self.blocks is not None and innermost and not self._block_wanted():
                continue
            self.env[var.__chandle__()] = np.int32(i)
            self.run(stmt.body, mask)

    def _block_wanted(self):
        """Whether the block at ``block_index`` is one of ``blocks`` (decided innermost)."""
        key = tuple(self.block_index.get(f"blockIdx.{a}", 0) for a in "xyz")
        return any(key[: len(b)] == b[: len(key)] for b in self.blocks)

    def _run_Bind(self, stmt, mask):
        value = stmt.value
        if isinstance(value, ir.Call) and value.op.name == "tirx.alloc_tensor":
            self._fresh(stmt.var)
        elif isinstance(value, ir.Call) and value.op.name == "tirx.decl_tensor":
            self._view(stmt.var, value)
        elif isinstance(value, ir.Call) and value.op.name == "tirx.stack_alloca":
            self.env[stmt.var.__chandle__()] = _tma.TensorMapState()  # a TMA tensor map
        else:
            self.env[stmt.var.__chandle__()] = self.eval(value, mask)

    def _run_For(self, stmt, mask):
        begin, end = int(self.scalar(stmt.begin)), int(self.scalar(stmt.end))
        step = int(self.scalar(stmt.step)) if stmt.step is not None else 1
        for i in range(begin, end, step):
            self.env[stmt.var.__chandle__()] = np.int32(i)
            self.run(stmt.body, mask)

    def _run_While(self, stmt, mask):
        while bool(self.scalar(stmt.condition)):
            self.run(stmt.body, mask)

    def _run_If(self, stmt, mask):
        if stmt.else_case is not None:
            parts = _ws.branches(self, stmt, mask)
            if parts is not None:  # warp-specialized branches: run them interleaved
                _ws.run_branches(self, parts)
                return
        c = np.broadcast_to(self.eval(stmt.condition, mask), (self.lanes,))
        then = np.logical_and(mask, c)
        if then.any():
            self.run(stmt.then_case, then)
        other = np.logical_and(mask, np.logical_not(c))
        if stmt.else_case is not None and other.any():
            self.run(stmt.else_case, other)

    def _run_Evaluate(self, stmt, mask):
        v = stmt.value
        if isinstance(v, ir.Call) and v.op.name == "tirx.call_extern":
            fname = str(v.args[0].value)
            if fname == "__syncthreads":
                if not np.all(mask):
                    raise EmulationError(
                        f"__syncthreads reached by only part of block {self.block_index}"
                    )
                if self.race is not None:
                    self.race.barrier()
                return
        if isinstance(v, ir.IntImm):
            return
        self.eval(v, mask)

    def _run_AssertStmt(self, stmt, mask):
        c = np.broadcast_to(self.eval(stmt.condition, mask), (self.lanes,))
        if not np.all(c[np.broadcast_to(mask, (self.lanes,))]):
            text = " ".join(str(getattr(p, "value", p)) for p in stmt.message_parts)
            raise EmulationError(f"assertion failed: {text}")

    def _run_TensorStore(self, stmt, mask):
        b = self.buf(stmt.dest)
        flat, active = self.flat(b, stmt.indices, mask, "store to")
        value = np.broadcast_to(self.eval(stmt.value, mask), (self.lanes,)).astype(b.data.dtype)
        if b.local:
            rows = np.nonzero(active)[0]
            b.data[rows, flat[rows]] = value[rows]
            return
        self._track(b, flat, active, "write", "a store")
        addr, val = flat[active], value[active]
        if self.write_once and str(stmt.dest.ty.scope) == "global":
            self._check_once(b, addr)
        if addr.size > 1:
            order = np.argsort(addr, kind="stable")
            a, v = addr[order], val[order]
            dup = a[1:] == a[:-1]
            differ = dup & ~((v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1])))
            if _floating(v.dtype) and differ.any():
                k = int(np.argmax(differ))
                raise EmulationError(
                    f"write race on {b.name}[flat {int(a[k])}] in block {self.block_index}"
                )
        b.data[addr] = val


#: ``__tl_sm_count()`` (the host's SM count query of persistent kernels,
#: ``tl.persistent_tiles``) answers this environment variable, default 132 (an H100/H200).
SM_COUNT_ENV = "TILELANG_EMULATOR_SM_COUNT"
SM_COUNT_FUNC = "__tl_sm_count"


def emulated_sm_count() -> int:
    """The SM count the emulated device reports (:data:`SM_COUNT_ENV`, default 132)."""
    value = os.environ.get(SM_COUNT_ENV, "132")
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise EmulationError(f"{SM_COUNT_ENV}={value!r}: a positive integer expected")
    return count


def emulate(func, *arrays, blocks=None, aligned=True, write_once=False, race_check=None):
    """Run the lowered CUDA ``func`` on numpy ``arrays`` (modified in place; also returned).

    ``blocks``: optional list of (bx[, by[, bz]]) block indices to run (default: all).
    ``aligned``: the answer of ``tl::is_aligned`` (whether tensor base pointers are
    16-byte aligned); False runs the scalar fallbacks of vectorized code.
    ``write_once``: also fail when two threads store the same global element in one
    statement, even with equal values (replicated loops must write once).
    ``race_check``: also fail when two warps access a shared byte, one of them writing,
    with no barrier between (``cuda_emulator_race``; lockstep hides such races). Default:
    on when the environment sets ``TILELANG_EMULATOR_RACE_CHECK=1``.
    """
    if race_check is None:
        race_check = os.environ.get("TILELANG_EMULATOR_RACE_CHECK", "0") == "1"
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if len(arrays) != len(func.params):
        raise EmulationError(f"{len(func.params)} arguments expected, got {len(arrays)}")
    m = _Machine(func, arrays, blocks, aligned, write_once, race_check)
    m.run(func.body, True)
    return arrays


__all__ = ["DeviceTrap", "EmulationError", "emulate", "np_dtype", "whole_warpgroups"]

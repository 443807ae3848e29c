"""Which shared tiles a statement touches, and in which role (one classifier for the
passes that reason about shared memory: ``backends/cuda/passes/insert_sync.py`` places
barriers, ``backends/cuda/passes/proxy_fences.py`` drops proxy fences).

Plain ``TensorLoad`` / ``TensorStore`` of a shared tensor are reads / writes. A device
helper call (``call_extern`` / ``call_intrin``) gets a *role* from its name
(:func:`extern_role`), and the pass says what that role means in its model: the walk
(:func:`shared_accesses`) hands each call to the pass's ``on_call``, which records the
call's effect and says whether the walk still descends into its operands (where value
loads are plain reads). Pointer operands are ``address_of(tile[...])``;
:func:`shared_handles` names every shared tensor under a node, :func:`shared_pointers`
only those passed by address.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .thread_utils import is_shared

#: roles of device helpers (:func:`extern_role`)
RELEASE = "release"  # mbarrier arrive: hands a pipeline stage back to its producer
BARRIER_WORD = "barrier_word"  # other mbarrier operations: their words are no data
NEUTRAL = "neutral"  # no shared data: barriers, wgmma fences/groups, shuffles, ...
READ = "read"  # reads every shared operand (ldmatrix)
ASYNC_READ = "async_read"  # async-proxy reads of every shared operand (wgmma, TMA store)
WRITE = "write"  # writes every shared operand (stmatrix)
CP_ASYNC = "cp_async"  # cp.async family: generic-proxy async copy into operand 0
TMA_LOAD = "tma_load"  # async-proxy copy into operand 0 (a release of that stage too)
STAGE_COPY = "stage_copy"  # ROCm's register -> LDS pipeline-stage store into operand 0
WRITE_FIRST = "write_first"  # synchronous vector copy: operand 0 written, the rest read
UNKNOWN = "unknown"

# Name prefixes, first match wins. (tl::wgmma_m64n*: wgmma.mma_async reads its shared A/B
# through the descriptors; tl::stage_copy: backends/rocm/pipelining.py; tl::copy_vec /
# tl::zero_vec: lowering/vectorize.py.)
_ROLES = (
    ("tl::mbarrier_arrive", RELEASE),
    ("tl::mbarrier_", BARRIER_WORD),
    ("tl::wgmma_m64n", ASYNC_READ),
    ("tl::tma_store_commit", NEUTRAL),
    ("tl::tma_store_wait", NEUTRAL),
    ("tl::tma_store_", ASYNC_READ),
    ("tl::tma_load_", TMA_LOAD),
    ("tl::ptx_ldmatrix", READ),
    ("tl::ptx_stmatrix", WRITE),
    ("tl::cp_async", CP_ASYNC),
    ("tl::stage_copy", STAGE_COPY),
    ("tl::copy_vec", WRITE_FIRST),
    ("tl::zero_vec", WRITE_FIRST),
    ("tl::wgmma_arrive", NEUTRAL),
    ("tl::wgmma_commit", NEUTRAL),
    ("tl::wgmma_wait", NEUTRAL),
    ("tl::wgmma_fence_operand", NEUTRAL),
    ("tl::named_barrier", NEUTRAL),
    ("__syncthreads", NEUTRAL),
    ("tl::set_max_nreg", NEUTRAL),
    ("__shfl", NEUTRAL),
)


def extern_role(name: str) -> str:
    """The role of the device helper called ``name`` (one of this module's role constants)."""
    for prefix, role in _ROLES:
        if name.startswith(prefix):
            return role
    return UNKNOWN


def call_name(call) -> str:
    """The helper name of ``call_extern(name, ...)`` ("" when the first argument is none)."""
    head = call.args[0] if call.args else None
    return str(head.value) if isinstance(head, ir.StringImm) else ""


def shared_handles(node) -> frozenset:
    """Handles of the shared tensors named anywhere under ``node``."""
    out = set()
    tvm_ffi.structural_walk(
        node, [(ir.Var, lambda v: out.add(v.__chandle__()) if is_shared(v) else None)]
    )
    return frozenset(out)


def shared_pointers(node) -> frozenset:
    """Shared tensors ``node`` passes by address (not the ones it only loads values of)."""
    out = set()

    def call(x):
        if getattr(x.op, "name", "") == "tirx.address_of":
            out.update(shared_handles(x))
            return tvm_ffi.WalkResult.SKIP
        return None

    def var(v):
        if is_shared(v):
            out.add(v.__chandle__())

    skip = lambda x: tvm_ffi.WalkResult.SKIP  # noqa: E731 - a value load, not an address
    tvm_ffi.structural_walk(node, [(ir.TensorLoad, skip), (ir.Call, call), (ir.Var, var)],
                            order="pre")  # fmt: skip
    return frozenset(out)


def shared_accesses(stmt, on_call):
    """``(reads, writes)``: handles of the shared tensors ``stmt`` loads / stores, walking
    in pre-order. Each helper call is handed to ``on_call(role, call, reads, writes)``,
    which adds its effect (to these sets or its own) and returns True when the call's
    operands are accounted for (the walk skips them) or False to walk into them."""
    reads, writes = set(), set()

    def load(x):
        if is_shared(x.source):
            reads.add(x.source.__chandle__())

    def store(x):
        if is_shared(x.dest):
            writes.add(x.dest.__chandle__())

    def call(x):
        if getattr(x.op, "name", "") not in ("tirx.call_extern", "tirx.call_intrin"):
            return None
        if on_call(extern_role(call_name(x)), x, reads, writes):
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(
        stmt, [(ir.TensorLoad, load), (ir.TensorStore, store), (ir.Call, call)], order="pre"
    )
    return reads, writes

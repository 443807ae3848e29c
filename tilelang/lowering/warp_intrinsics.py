"""Names of the warp/block exchange intrinsics as the IR spells them (``call_extern`` of the
CUDA intrinsic or ``tl::`` helper) and the ``T.*`` name each comes from. Shared by the
frontend (``tilelang/language/warp.py``) and the CPU backend's ``warp_ops`` pass; with
:data:`REDUCTION_COMBINE`, the binary operation of each warp reduction, also the passes that
lower the reductions themselves (``warp_ops``, ``vendor_exchange``)."""

from __future__ import annotations

from tvm_tirx import tirx as _tirx

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF

# IR spelling -> the T.* name it comes from
SHUFFLES = {
    "__shfl_xor_sync": "shfl_xor",
    "__shfl_down_sync": "shfl_down",
    "__shfl_up_sync": "shfl_up",
    "__shfl_sync": "shfl_sync",
}
VOTES = {
    "__any_sync": "any_sync",
    "__all_sync": "all_sync",
    "__ballot_sync": "ballot_sync",
    "__activemask": "activemask",
    "__match_any_sync": "match_any_sync",
    "tl::match_all_sync": "match_all_sync",
}
BLOCK_VOTES = {
    "__syncthreads_count": "syncthreads_count",
    "__syncthreads_and": "syncthreads_and",
    "__syncthreads_or": "syncthreads_or",
}
REDUCTIONS = {
    "tl::warp_reduce_sum<32, 1>": "warp_reduce_sum",
    "tl::warp_reduce_max<32, 1>": "warp_reduce_max",
    "tl::warp_reduce_min<32, 1>": "warp_reduce_min",
    "tl::warp_reduce_bitand<32, 1>": "warp_reduce_bitand",
    "tl::warp_reduce_bitor<32, 1>": "warp_reduce_bitor",
}
EXCHANGES = {**SHUFFLES, **VOTES, **BLOCK_VOTES, **REDUCTIONS}
# kind of a warp reduction (the T.* name after ``warp_reduce_``) -> its binary operation
REDUCTION_COMBINE = {
    "sum": lambda a, b: a + b,
    "max": _tirx.max,
    "min": _tirx.min,
    "bitand": _tirx.bitwise_and,
    "bitor": _tirx.bitwise_or,
}
SYNC_WARP = "__syncwarp"

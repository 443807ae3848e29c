"""Kernels written against upstream's warp-specialization schedule API (``T.WSSchedule``,
``T.WSID``, ``T.ws_op``), for test_ws_schedule.py. Each factory takes ``edit(parts)``: a hook
that may rewrite the schedule's parts (a dict of ``roles``, ``pipelines``, ``bodies``,
``root``, ``num_warps``) before it is attached, to build the invalid schedules."""

from __future__ import annotations

import tilelang.language as T


def _schedule(parts):
    return T.WSSchedule(
        num_warps=parts["num_warps"],
        roles=parts["roles"],
        pipelines=parts["pipelines"],
        scopes=[T.WSScope("loop_k", parts["bodies"])]
        + ([T.WSScope(T.WSScope.ROOT, parts["root"])] if parts["root"] is not None else [])
        + parts.get("extra_scopes", []),
    )


def gemm_ws(
    M,
    N,
    K,
    bM=64,
    bN=64,
    bK=32,
    depth=3,
    dtype="float16",
    consumer=(4, 8, 232),
    producer=(0, 1, 40),
    num_warps=8,
    consumer_stage=None,
    edit=None,
):
    """``C = A @ B`` (float32 accumulation) in upstream's schedule style: a producer role
    loads the A and B tiles of each k step through the ``smem`` pipeline (``depth`` versions),
    a consumer role clears the accumulator, runs the gemm and stores C."""
    cs = depth - 1 if consumer_stage is None else consumer_stage

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            parts = {
                "num_warps": num_warps,
                "roles": [
                    T.WSRole(
                        "Producer", warps_lo=producer[0], warps_hi=producer[1], max_nreg=producer[2]
                    ),
                    T.WSRole(
                        "Consumer", warps_lo=consumer[0], warps_hi=consumer[1], max_nreg=consumer[2]
                    ),
                ],
                "pipelines": [T.WSPipeline("smem", [A_s, B_s], depth=depth)],
                "bodies": {
                    "Producer": [
                        T.WSSync.producer_acquire("smem", stage=0),
                        "copy_A",
                        "copy_B",
                        T.WSSync.producer_commit("smem", stage=0),
                    ],
                    "Consumer": [
                        T.WSSync.consumer_wait("smem", stage=cs),
                        "gemm",
                        T.WSSync.consumer_release("smem", stage=cs),
                    ],
                },
                "root": {"Producer": ["loop_k"], "Consumer": ["clear", "loop_k", "store"]},
                "A_s": A_s,
                "B_s": B_s,
            }
            if edit is not None:
                edit(parts)
            T.annotate_ws_schedule(_schedule(parts))
            T.fill(C_l, 0, annotations={T.WSID: "clear"})
            for k in T.Pipelined(
                T.ceildiv(K, bK), num_stages=depth, annotations={T.WSID: "loop_k"}
            ):
                T.copy(A[by * bM, k * bK], A_s, annotations={T.WSID: "copy_A"})
                T.copy(B[k * bK, bx * bN], B_s, annotations={T.WSID: "copy_B"})
                T.gemm(A_s, B_s, C_l, annotations={T.WSID: "gemm"})
            T.copy(C_l, C[by * bM, bx * bN], annotations={T.WSID: "store"})

    return main


def copy_ws(M, N, bM=64, depth=2, dtype="float32", edit=None, unannotated=False):
    """``B = 2 A + i`` row block by row block: the producer stages each ``bM x N`` block of
    A into ``A_s`` (pipeline ``buf``), the consumer copies it to a fragment, releases the
    stage, scales it and stores it (upstream's two-role producer/consumer copy kernel)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((bM, N), dtype)
            A_f = T.alloc_fragment((bM, N), dtype)
            parts = {
                "num_warps": 8,
                "roles": [
                    T.WSRole("Producer", warps_lo=0, warps_hi=1, max_nreg=40),
                    T.WSRole("Consumer", warps_lo=4, warps_hi=8, max_nreg=224),
                ],
                "pipelines": [T.WSPipeline("buf", [A_s], depth=depth)],
                "bodies": {
                    "Producer": [
                        T.WSSync.producer_acquire("buf"),
                        "copy_in",
                        T.WSSync.producer_commit("buf"),
                    ],
                    "Consumer": [
                        T.WSSync.consumer_wait("buf"),
                        "copy_frag",
                        T.WSSync.consumer_release("buf"),
                        "scale",
                        "copy_out",
                    ],
                },
                "root": {"Producer": ["loop_k"], "Consumer": ["loop_k"]},
                "A_s": A_s,
                "A_f": A_f,
            }
            if edit is not None:
                edit(parts)
            T.annotate_ws_schedule(_schedule(parts))
            for i in T.Pipelined(
                T.ceildiv(M, bM), num_stages=depth, annotations={T.WSID: "loop_k"}
            ):
                T.copy(A[i * bM, 0], A_s, annotations={T.WSID: "copy_in"})
                T.copy(A_s, A_f, annotations={T.WSID: "copy_frag"})
                for r, c in T.Parallel(bM, N, annotations={T.WSID: "scale"}):
                    A_f[r, c] = A_f[r, c] * 2.0 + T.cast(i, dtype)
                if unannotated:
                    T.copy(A_f, B[i * bM, 0])
                else:
                    T.copy(A_f, B[i * bM, 0], annotations={T.WSID: "copy_out"})

    return main


def while_scope(n, chunk=32):
    """``out[j] = sum of x over the chunks visited`` with a ``T.ws_op``-wrapped while loop
    as a scope (upstream's persistent-loop form) and a ``T.ws_op`` scalar op inside it;
    one role, no pipeline (runs in program order)."""

    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), out: T.Tensor((chunk,), "float32")):
        with T.Kernel(1, threads=32) as _:
            acc = T.alloc_fragment((chunk,), "float32")
            xs = T.alloc_shared((chunk,), "float32")
            it = T.alloc_var("int32", 0)
            T.annotate_ws_schedule(
                T.WSSchedule(
                    num_warps=4,
                    roles=[T.WSRole("Worker", warps_lo=0, warps_hi=1)],
                    pipelines=[],
                    scopes=[
                        T.WSScope("loop_w", {"Worker": ["load", "add", "next"]}),
                        T.WSScope(T.WSScope.ROOT, {"Worker": ["clear", "loop_w", "store"]}),
                    ],
                )
            )
            T.fill(acc, 0, annotations={T.WSID: "clear"})
            with T.ws_op("loop_w"):
                while it * chunk < n:
                    T.copy(x[it * chunk], xs, annotations={T.WSID: "load"})
                    for j in T.Parallel(chunk, annotations={T.WSID: "add"}):
                        acc[j] = acc[j] + xs[j]
                    with T.ws_op("next"):
                        it = it + 1
            T.copy(acc, out, annotations={T.WSID: "store"})

    return main


def persistent_gemm(M, N, K, bM=64, bN=64, bK=32, stages=3, workers=3, dtype="float16"):
    """upstream's ``examples/aws/gemm.py`` shape on Hopper tiles: a persistent tile loop
    (``T.ws_op``-wrapped ``while sched.valid()``) around a pipelined k loop, three roles
    (TMA, MMA, Epilogue), two pipelines (``smem`` for the A/B tiles in ``loop_k``, ``acc``
    for the accumulator in ``loop_wave``) and ops every role runs (``sched_init``,
    ``tile_idx``, ``sched_next``). Runs in program order."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(workers, threads=128) as block_id:
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bN, bK), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            sched = T.PersistentTileScheduler(
                T.ceildiv(M, bM), T.ceildiv(N, bN), num_workers=workers, name="sched"
            )
            T.annotate_ws_schedule(
                T.WSSchedule(
                    num_warps=8,
                    roles=[
                        T.WSRole("TMA", warps_lo=0, warps_hi=1, max_nreg=40),
                        T.WSRole("MMA", warps_lo=1, warps_hi=2, max_nreg=40),
                        T.WSRole("Epilogue", warps_lo=4, warps_hi=8, max_nreg=224),
                    ],
                    pipelines=[
                        T.WSPipeline("smem", [A_s, B_s], depth=stages),
                        T.WSPipeline("acc", [C_l], depth=1),
                    ],
                    scopes=[
                        T.WSScope(
                            "loop_k",
                            {
                                "TMA": [
                                    T.WSSync.producer_acquire("smem", stage=0),
                                    "copy_A",
                                    "copy_B",
                                    T.WSSync.producer_commit("smem", stage=0),
                                ],
                                "MMA": [
                                    T.WSSync.consumer_wait("smem", stage=stages - 1),
                                    "gemm_C",
                                    T.WSSync.consumer_release("smem", stage=stages - 1),
                                ],
                                "Epilogue": [],
                            },
                        ),
                        T.WSScope(
                            "loop_wave",
                            {
                                "TMA": ["tile_idx", "loop_k", "sched_next"],
                                "MMA": [
                                    "tile_idx",
                                    T.WSSync.producer_acquire("acc"),
                                    "clear",
                                    "loop_k",
                                    T.WSSync.producer_commit("acc"),
                                    "sched_next",
                                ],
                                "Epilogue": [
                                    "tile_idx",
                                    T.WSSync.consumer_wait("acc"),
                                    "store",
                                    T.WSSync.consumer_release("acc"),
                                    "sched_next",
                                ],
                            },
                        ),
                        T.WSScope(
                            T.WSScope.ROOT,
                            {
                                "TMA": ["sched_init", "loop_wave"],
                                "MMA": ["sched_init", "loop_wave"],
                                "Epilogue": ["sched_init", "loop_wave"],
                            },
                        ),
                    ],
                )
            )
            with T.ws_op("sched_init"):
                sched.init(block_id)
            with T.ws_op("loop_wave"):
                while sched.valid():
                    with T.ws_op("tile_idx"):
                        bx = sched.m_idx
                        by = sched.n_idx
                    T.fill(C_l, 0, annotations={T.WSID: "clear"})
                    for k in T.Pipelined(
                        T.ceildiv(K, bK), num_stages=stages, annotations={T.WSID: "loop_k"}
                    ):
                        T.copy(A[bx * bM, k * bK], A_s, annotations={T.WSID: "copy_A"})
                        T.copy(B[by * bN, k * bK], B_s, annotations={T.WSID: "copy_B"})
                        T.gemm(A_s, B_s, C_l, transpose_B=True, annotations={T.WSID: "gemm_C"})
                    T.copy(C_l, C[bx * bM, by * bN], annotations={T.WSID: "store"})
                    with T.ws_op("sched_next"):
                        sched.next_tile()

    return main


def chained_ws(
    N1, bN=64, M=64, K=64, N2=64, dtype="float16", pv_stage=1, depth=2, cast_first=False
):
    """O = cast(Q @ Kt^T) @ V over blocks of N1 (FlashAttention's gemm chain), scheduled:
    the producer loads K and V tiles (pipelines ``k`` and ``v``); the consumer runs
    ``Q @ K^T`` of step i, then ``P @ V`` of step ``i - pv_stage`` (its ``v`` span sits at
    stage ``pv_stage``), then ``P = cast(S)`` of step i (``cast_first``: before ``P @ V``,
    which would overwrite the P that ``P @ V`` of step i - 1 reads)."""

    @T.prim_func
    def main(
        Q: T.Tensor((M, K), dtype),
        Kt: T.Tensor((N1, K), dtype),
        V: T.Tensor((N1, N2), dtype),
        O: T.Tensor((M, N2), "float32"),
    ):
        with T.Kernel(1, threads=128):
            Q_s = T.alloc_shared((M, K), dtype)
            K_s = T.alloc_shared((bN, K), dtype)
            V_s = T.alloc_shared((bN, N2), dtype)
            S = T.alloc_fragment((M, bN), "float32")
            P = T.alloc_fragment((M, bN), dtype)
            acc = T.alloc_fragment((M, N2), "float32")
            acq, com = T.WSSync.producer_acquire, T.WSSync.producer_commit
            wait, rel = T.WSSync.consumer_wait, T.WSSync.consumer_release
            T.annotate_ws_schedule(
                T.WSSchedule(
                    num_warps=8,
                    roles=[
                        T.WSRole("Producer", warps_lo=4, warps_hi=5, max_nreg=40),
                        T.WSRole("Consumer", warps_lo=0, warps_hi=4, max_nreg=232),
                    ],
                    pipelines=[T.WSPipeline("k", [K_s], depth), T.WSPipeline("v", [V_s], depth)],
                    scopes=[
                        T.WSScope(
                            "loop",
                            {
                                "Producer": [
                                    acq("k"),
                                    "copy_k",
                                    com("k"),
                                    acq("v"),
                                    "copy_v",
                                    com("v"),
                                ],
                                "Consumer": [wait("k"), "clear_s", "qk", rel("k")]
                                + (["cast"] if cast_first else [])
                                + [wait("v", stage=pv_stage), "pv", rel("v", stage=pv_stage)]
                                + ([] if cast_first else ["cast"]),
                            },
                        ),
                        T.WSScope(
                            T.WSScope.ROOT,
                            {
                                "Producer": ["loop"],
                                "Consumer": ["load_q", "clear_acc", "loop", "store"],
                            },
                        ),
                    ],
                )
            )
            T.copy(Q, Q_s, annotations={T.WSID: "load_q"})
            T.fill(acc, 0, annotations={T.WSID: "clear_acc"})
            for k in T.Pipelined(T.ceildiv(N1, bN), num_stages=depth, annotations={T.WSID: "loop"}):
                T.copy(Kt[k * bN, 0], K_s, annotations={T.WSID: "copy_k"})
                T.copy(V[k * bN, 0], V_s, annotations={T.WSID: "copy_v"})
                T.fill(S, 0, annotations={T.WSID: "clear_s"})
                T.gemm(Q_s, K_s, S, transpose_B=True, annotations={T.WSID: "qk"})
                T.copy(S, P, annotations={T.WSID: "cast"})
                T.gemm(P, V_s, acc, annotations={T.WSID: "pv"})
            T.copy(acc, O, annotations={T.WSID: "store"})

    return main

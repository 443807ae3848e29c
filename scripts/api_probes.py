"""Probes and reasons for scripts/api_coverage.py.

``PROBES["module:name"]``: a no-argument callable run on this machine; the report shows "ok"
(or the string it returns) or the exception it raised, e.g. how a GPU-only helper behaves
without a GPU. Keep probes cheap (no kernel compiles). ``NOT_PROVIDED["module:name"]``: why an
upstream name is deliberately absent. Add entries as names are added or decided against.
"""

from __future__ import annotations

import importlib
import re


def _attr(path: str):
    mod, _, name = path.rpartition(".")
    return getattr(importlib.import_module(mod), name)


def _call(path: str, *args, **kwargs):
    return lambda: _describe(_attr(path)(*args, **kwargs))


def _describe(value) -> str:
    if callable(value) and hasattr(value, "__qualname__"):
        text = f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    else:
        text = re.sub(r" at 0x[0-9a-f]+", "", repr(value))
    return "ok: " + (text if len(text) <= 60 else text[:57] + "...")


def _do_bench_cpu():
    import torch

    a = torch.randn(64, 64)
    ms = _attr("tilelang.profiler.do_bench")(lambda: a @ a, warmup=1, rep=5)
    return "ok: CPU wall-clock timing" if ms > 0 else f"bad value {ms}"


def _cuda_decorator():
    def test():
        pass

    marked = _attr("tilelang.testing.requires_cuda")(test)
    marks = [
        m.name + ("(skip)" if m.name == "skipif" and m.args[0] else "") for m in marked.pytestmark
    ]
    return "ok: marks " + ", ".join(marks)


def _tvm(attr: str):
    def probe():
        from tilelang import tvm

        obj = tvm
        for part in attr.split("."):
            obj = getattr(obj, part)
        return _describe(obj)

    return probe


PROBES = {
    "tilelang:cdiv": _call("tilelang.cdiv", 7, 2),
    "tilelang:next_power_of_2": _call("tilelang.next_power_of_2", 33),
    "tilelang:is_cache_enabled": _call("tilelang.is_cache_enabled"),
    "tilelang:DataType": _tvm("DataType"),
    "tilelang:tvm": _tvm("tirx.const"),
    "tilelang.profiler:do_bench": _do_bench_cpu,
    "tilelang.testing:requires_cuda": _cuda_decorator,
    "tilelang.testing:requires_llvm": lambda: (
        "ok: available" if _attr("tilelang.testing.requires_llvm").available else "missing"
    ),
    "tilelang.contrib.nvcc:get_target_compute_version": _call(
        "tilelang.contrib.nvcc.get_target_compute_version"
    ),
    "tilelang.contrib.nvcc:get_cuda_version": _call("tilelang.contrib.nvcc.get_cuda_version"),
    "tilelang.contrib.nvcc:parse_compute_version": _call(
        "tilelang.contrib.nvcc.parse_compute_version", "8.6"
    ),
    "tilelang.carver.arch:auto_infer_current_arch": _call(
        "tilelang.carver.arch.auto_infer_current_arch"
    ),
    "tilelang.carver.arch:CUDA": _call("tilelang.carver.arch.CUDA", "cuda"),
    "tilelang.carver.arch:CDNA": _call("tilelang.carver.arch.CDNA", "hip"),
    "tilelang.carver.arch.driver:get_num_sms": _call("tilelang.carver.arch.driver.get_num_sms"),
    "tilelang.carver.arch.driver:get_shared_memory_per_block": _call(
        "tilelang.carver.arch.driver.get_shared_memory_per_block"
    ),
    "tilelang.carver.arch.driver:get_device_name": _call(
        "tilelang.carver.arch.driver.get_device_name"
    ),
    "tilelang.utils.device:get_current_device": _call("tilelang.utils.device.get_current_device"),
    "tilelang.tvm:tirx": _tvm("tirx.PrimExpr"),
    "tilelang.tvm:target": _tvm("target.Target"),
    "tilelang.tvm:IRModule": _tvm("IRModule"),
}

_NO_ROCM = "no ROCm backend (tilelang compiles for CUDA and the CPU)"
_NO_ASCEND = "no Ascend backend"
_NATIVE = "upstream's native-library loading (libtilelang.so); tilelang has no native library"
_UPSTREAM_IR = "works on upstream's TVM Buffer/BufferRegion IR; tilelang's IR is TIRx's"

NOT_PROVIDED = {
    "tilelang:analysis": "upstream's IR analysis passes over its TVM fork's IR",
    "tilelang:ascend": _NO_ASCEND,
    "tilelang:rocm": _NO_ROCM,
    "tilelang:metal": "no Metal backend",
    "tilelang:webgpu": "no WebGPU backend",
    "tilelang:cpu": "upstream's CPU target package; tilelang's is tilelang.backends.cpu",
    "tilelang:cuda": "upstream's CUDA target package; only tilelang.cuda.intrinsics (the mma.sync "
    "TensorCoreIntrinEmitter and its layout helpers) is provided; the backend is "
    "tilelang.backends.cuda",
    "tilelang:backend": "upstream's target/pass-pipeline registry; target helpers are in "
    "tilelang.utils.target (determine_target)",
    "tilelang:instrumentation": "upstream's pass instrumentation; see tilelang.transform.instrument "
    "(TILELANG_DUMP_IR, TILELANG_PASS_TIMING)",
    "tilelang:ir": "upstream's tile-op IR node classes; tilelang's tile ops are tilelang.ops",
    "tilelang:tileop": "upstream's tile-op classes; tilelang's tile ops are tilelang.ops",
    "tilelang:libinfo": _NATIVE,
    "tilelang:get_runtime_library_dirs": _NATIVE,
    "tilelang:runtime_library_dirs": _NATIVE,
    "tilelang:prepend_dll_search_path": "Windows DLL search path; tilelang has no native library",
    "tilelang:path": "a loop variable leaked by upstream's __init__, not API",
    "tilelang.utils:language": _UPSTREAM_IR,
    "tilelang.utils:pass_diff_hook": "upstream's pass-diff HTML tool; use tilelang.tools.ir_diff",
    "tilelang.utils.tensor:tirx": "an import of tvm.tirx in upstream's module, not API",
    "tilelang.profiler:BaseKernelAdapter": "upstream's kernel-adapter class; tilelang has one "
    "kernel type, JITKernel",
    "tilelang.profiler:KernelParam": "upstream's parameter class; kernel.params holds tilelang's",
    "tilelang.profiler:tirx": "an import of tvm.tirx in upstream's module, not API",
    "tilelang.profiler:torch_bench": "upstream's internal module; do_bench is in tilelang.profiler.bench",
    "tilelang.profiler:wall": "upstream's internal module; do_bench is in tilelang.profiler.bench",
    "tilelang.tools:Analyzer": "upstream's roofline analyzer of its TVM IR; not provided",
    "tilelang.tools:ARCH_CONFIGS": "part of upstream's Analyzer; not provided",
    "tilelang.tools:AnalysisResult": "part of upstream's Analyzer; not provided",
    "tilelang.carver.arch:CDNA": _NO_ROCM,
    "tilelang.cache:cached": "use tilelang.compile, which goes through the same disk cache",
    "tilelang.cache:env": "an import of tilelang.env in upstream's module; see tilelang.env",
    "tilelang.cache:JITKernel": "an import in upstream's module; see tilelang.JITKernel",
    "tilelang.cache:TargetLike": "a type alias of upstream's; targets here are str or dict",
}
for _name in (
    "AscendCythonKernelCache",
    "AscendTVMFFIKernelCache",
    "CuTeDSLKernelCache",
    "CythonKernelCache",
    "NVRTCKernelCache",
    "TVMFFIKernelCache",
    "TorchKernelCache",
):
    NOT_PROVIDED[f"tilelang.cache:{_name}"] = (
        "one cache per upstream execution backend; tilelang has one, tilelang.cache.KernelCache"
    )
for _name in (
    "array_reduce",
    "get_buffer_region_from_load",
    "get_prim_func_name",
    "is_fragment",
    "is_full_region",
    "is_global",
    "is_local",
    "is_shared",
    "is_shared_dynamic",
    "is_tensor_memory",
    "retrieve_shape",
    "retrieve_stride",
    "retrive_ptr_from_buffer_region",
    "side_effect",
    "to_buffer_region",
):
    NOT_PROVIDED[f"tilelang.utils:{_name}"] = _UPSTREAM_IR
for _name in (
    "get_ascend_device_name",
    "get_ascend_device_properties",
    "get_ascend_l2_cache_size",
    "get_ascend_total_memory",
    "get_num_cube_cores",
    "get_num_vector_cores",
    "ascend_driver",
):
    NOT_PROVIDED[f"tilelang.carver.arch.driver:{_name}"] = _NO_ASCEND

# ---- names used by upstream's examples and language tests (the report's last section) ----

#: ``TARGET_LIMITS["module:name"] = (works_somewhere, note)``: where a present name refuses
#: with a clear "not supported on <target>" error. ``works_somewhere=False`` counts the name
#: as "clear error" (it refuses on every target tilelang compiles for).
TARGET_LIMITS: dict[str, tuple[bool, str]] = {}
_HOPPER = (
    "CUDA sm_90+ ({}); cpu, rocm, metal and older CUDA archs: 'T.{} is not supported on ...' "
    "at the user's line"
)
for _name, _arch in {
    "alloc_barrier": "sm_90",
    "mbarrier_arrive": "sm_90",
    "mbarrier_expect_tx": "sm_90",
    "mbarrier_arrive_expect_tx": "sm_90",
    "mbarrier_wait_parity": "sm_90",
    "barrier_arrive": "sm_90",
    "barrier_wait": "sm_90",
    "fence_proxy_async": "sm_90",
    "cluster_arrive": "sm_90",
    "cluster_arrive_relaxed": "sm_90",
    "cluster_wait": "sm_90",
    "cluster_sync": "sm_90",
    "block_rank_in_cluster": "sm_90",
    "named_barrier_arrive": "sm_90",
    "named_barrier_sync": "sm_90",
    "set_max_nreg": "sm_90a",
    "inc_max_nreg": "sm_90a",
    "dec_max_nreg": "sm_90a",
    "warpgroup_arrive": "sm_90a",
    "warpgroup_commit_batch": "sm_90a",
    "warpgroup_wait": "sm_90a",
    "wait_wgmma": "sm_90a",
    "wgmma_gemm": "sm_90a",
}.items():
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (True, _HOPPER.format(_arch, _name))
TARGET_LIMITS["tilelang.language:atomic_or"] = (
    True,
    "cpu, cuda, rocm (int32/uint32); metal: 'T.atomic_or is not supported on the metal "
    "target' at the user's line",
)
TARGET_LIMITS["tilelang.language:PersistentTileScheduler"] = (
    True,
    "every target; num_workers defaults to the GPU's SM count (without a GPU: pass it)",
)
for _name in ("ptx_cp_async", "async_copy", "ptx_commit_group", "ptx_wait_group"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "every target; the copy is done synchronously at issue (commit/wait have nothing "
        "pending), see tilelang/language/cp_async.py",
    )
TARGET_LIMITS["tilelang.language:cp_async_barrier_noinc"] = (
    True,
    "CUDA sm_90+ (one mbarrier arrival, the copies being done); elsewhere 'T.mbarrier_arrive "
    "is not supported on ...' at the user's line",
)
for _name in ("ldg32", "ldg64", "ldg128", "ldg256", "lds32", "lds64", "lds128"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "every target; element loads packed into uint32 words (upstream: one PTX vector load)",
    )
for _name in ("stg32", "stg64", "stg128", "stg256", "sts32", "sts64", "sts128"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "every target; element stores of the words' bits (upstream: one PTX vector store)",
    )
TARGET_LIMITS["tilelang.language:tma_copy"] = (
    True,
    "done synchronously as T.copy (tilelang/language/tma_explicit.py); the load form's "
    "mbarrier needs CUDA sm_90+ (elsewhere 'T.alloc_barrier is not supported on ...'); "
    "cluster_mask / leader_scope_threads: a TraceError",
)
for _name in ("tma_store_arrive", "tma_store_wait"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "every target; a no-op (T.tma_copy stores complete when issued)",
    )
TARGET_LIMITS["tilelang.language:ClusterKernel"] = (
    True,
    "every target with one-block clusters; cluster_dims > 1: a TraceError at the user's line "
    "(cluster launches are not supported yet)",
)
TARGET_LIMITS["tilelang.language:sync_grid"] = (
    False,
    "refused on every target at the user's line (needs a cooperative launch)",
)
TARGET_LIMITS["tilelang.language:CUDASourceCodeKernel"] = (
    False,
    "refused on every target at the user's line (kernels from CUDA source are not supported yet)",
)
TARGET_LIMITS["tilelang.language:Persistent"] = (
    False,
    "refused on every target at the user's line ('T.Persistent is not supported yet'); "
    "T.PersistentTileScheduler walks tiles persistently",
)
for _name in ("__exp", "__exp10", "__log", "__log2", "__log10", "__sin", "__cos", "__tan"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        f"every target; the precise T.{_name[2:]} (upstream: CUDA's approximate intrinsic)",
    )
for _name in ("pdl_sync", "pdl_trigger"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "every target; a no-op (tilelang launches without programmatic dependent launch)",
    )
for _name in ("annotate_producer_reg_dealloc", "annotate_consumer_reg_alloc"):
    TARGET_LIMITS[f"tilelang.language:{_name}"] = (
        True,
        "a register-split hint: validated, accepted",
    )

_INTERNAL = "upstream's internal module ({}); not part of the API tilelang reproduces"
#: Reasons for whole upstream modules that are deliberately absent, by module prefix.
NOT_PROVIDED_MODULES = {
    "tilelang.cuda": _INTERNAL.format(
        "CUDA target package: dialect, passes, wgmma/tcgen05/sparse emitters; only "
        "tilelang.cuda.intrinsics' mma.sync emitter and layout helpers are provided"
    ),
    "tilelang.rocm": _INTERNAL.format("ROCm target package"),
    "tilelang.metal": _INTERNAL.format("Metal target package"),
    "tilelang.webgpu": "no WebGPU backend",
    "tilelang.cpu": _INTERNAL.format("CPU target package"),
    "tilelang.tileop": _INTERNAL.format("tile-op classes of its TVM fork"),
    "tilelang.ir": _INTERNAL.format("IR node classes and span helpers of its TVM fork"),
    "tilelang._ffi_api": _INTERNAL.format("FFI bindings of libtilelang.so"),
    "tilelang.jit.adapter": _INTERNAL.format(
        "execution adapters; tilelang has one kernel type, JITKernel"
    ),
    "tilelang.contrib.cutedsl": "no CuTe DSL backend",
    "tilelang.tools.cuda": _INTERNAL.format("IKET CUDA event tracer"),
    "tilelang.tools.Analyzer": "upstream's roofline analyzer of its TVM IR; not provided",
    "tilelang.backend": _INTERNAL.format(
        "target/pass-pipeline registry; use tilelang.utils.target.determine_target"
    ),
    "tilelang.engine.callback": "source post-processing hooks are not provided yet",
    "tilelang.language.tir": _INTERNAL.format("TIR export tables of its TVM fork"),
    "tilelang.language.eager.ast": _INTERNAL.format("AST mutator of its eager builder"),
    "tilelang.utils.language": _UPSTREAM_IR,
    "tilelang.carver.template": _INTERNAL.format("carver templates"),
    "tilelang.carver.roller": _INTERNAL.format("carver roller"),
}


_FP4_UNPACKED = "helpers of upstream's float4_e2m1_unpacked storage type, which is not provided"
NOT_PROVIDED.update(
    {
        "tilelang.language.dtypes:is_float4": _FP4_UNPACKED,
        "tilelang.language.dtypes:is_float4_e2m1fn": _FP4_UNPACKED,
        "tilelang.language.dtypes:is_float4_e2m1_unpacked": _FP4_UNPACKED,
        "tilelang.language.dtypes:resolve_torch_storage_dtype": "upstream's torch-storage "
        "dtype mapping; use tilelang.dtypes.as_torch",
        "tilelang.errors:enrich_error": "upstream's internal error-rewriting helper; tilelang's "
        "errors carry the user's line when raised",
        "tilelang.layout:make_gemm_fragment_8x8_transposed": "upstream's internal fragment of "
        "its 8x8 ldmatrix copies; see tilelang.layout.make_mma_*_fragment",
    }
)


def not_provided_reason(modname: str, name: str) -> str:
    """Why ``modname.name`` is absent ('' when no reason is recorded)."""
    key = f"{modname}:{name}"
    if key in NOT_PROVIDED:
        return NOT_PROVIDED[key]
    dotted = f"{modname}.{name}"
    for prefix in sorted(NOT_PROVIDED_MODULES, key=len, reverse=True):
        if dotted == prefix or dotted.startswith(prefix + "."):
            return NOT_PROVIDED_MODULES[prefix]
    return ""

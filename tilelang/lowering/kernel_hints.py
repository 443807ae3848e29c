"""Function attributes the frontend's hints set (``language/hints.py``) and the CUDA backend
reads: one spelling for writer and readers."""

#: ``T.no_set_max_nreg()`` / ``T.disable_warp_group_reg_alloc()``: no ``setmaxnreg``
#: (``backends/cuda/passes/pipeline_planning.py``)
ATTR_NO_SET_MAX_NREG = "tl.no_set_max_nreg"
#: ``T.annotate_min_blocks_per_sm(n)``: ``__launch_bounds__(threads, n)`` (CUDA build)
ATTR_MIN_BLOCKS_PER_SM = "tl.min_blocks_per_sm"
#: ``T.annotate_restrict_buffers(*tensors)``: parameter names without ``__restrict__``
ATTR_NON_RESTRICT = "tl.non_restrict_params"
#: ``T.annotate_l2_hit_ratio({tensor: ratio})``: recorded only
ATTR_L2_HIT_RATIO = "tl.l2_hit_ratio"

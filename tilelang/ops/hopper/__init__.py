"""The explicit Hopper API (``T.mbarrier_*``, ``T.set_max_nreg``, ``T.cluster_*``...).

``op.py`` holds the IR forms (one tile op per ``T.<name>``, so a target without a rule
reports "T.<name> is not supported on the <backend> target" at the user's line);
``cuda.py`` the CUDA rules (calls of ``tl_templates/cuda/hopper.h``, ``tma.h`` and
``wgmma.h``), which check the architecture.
"""

from . import cpu, cuda, op  # noqa: F401 - registers the rules

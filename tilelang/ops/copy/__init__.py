"""T.copy: move a tile between scopes (CPU rule; CUDA: vectorized/cp.async, ldmatrix, exchange through shared).

``op.py`` holds the IR form, its checks and the CPU rule; ``*cuda.py`` the CUDA layout and
lowering rules. Importing the package registers every rule.
"""

from . import cuda, exchange_cuda, ldmatrix_cuda, op  # noqa: F401 - registers the rules

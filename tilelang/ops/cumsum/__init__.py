"""T.cumsum: inclusive/exclusive prefix sums of a tile.

``op.py`` holds the IR form, its checks and the CPU rule; ``*cuda.py`` the CUDA layout and
lowering rules. Importing the package registers every rule.
"""

from . import cuda, op  # noqa: F401 - registers the rules

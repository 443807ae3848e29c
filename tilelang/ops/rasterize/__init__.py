"""T.use_swizzle: block rasterization hint.

``op.py`` holds the IR form, its checks and the CPU rule; ``*cuda.py`` the CUDA layout and
lowering rules. Importing the package registers every rule.
"""

from . import op  # noqa: F401 - registers the rules

"""T.atomic_add and friends: read-modify-write of a tile or element (``bitwise.py``:
``T.atomic_or`` on one integer element, with its CPU, CUDA and ROCm rules; ``prev.py``:
``return_prev=True``, the element's value before the update).

``op.py`` holds the IR form, its checks and the CPU rule; ``*cuda.py`` the CUDA layout and
lowering rules. Importing the package registers every rule.
"""

from . import bitwise, cuda, op, prev  # noqa: F401 - registers the rules

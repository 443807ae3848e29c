"""``tilelang.language.common``: upstream's target-independent ``T`` dialect.

tilelang has one ``T`` namespace for every target: an op a target cannot lower is refused
when a kernel is compiled for it ("T.<op> is not supported on the <target> target", at the
user's line). So this module is that namespace under upstream's name:
``tilelang.language.common.copy is tilelang.language.copy``.
"""

from __future__ import annotations

__tilelang_dialect__ = "common"


def __getattr__(name: str):
    from .. import language

    return getattr(language, name)


def __dir__():
    from .. import language

    return dir(language)

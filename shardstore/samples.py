"""What a read returns: ``Sample``, a plain mapping of part name -> bytes plus ``__key__``,
``__shard__`` and ``__index__``, the same keys Energon's crude samples carry.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Sample"]


class Sample(dict[str, Any]):
    """A sample: ``{"__key__": ..., "__shard__": ..., "__index__": ..., "jpg": b"...", ...}``.

    A dict (so it pickles, compares and prints like one) with attribute shortcuts for the
    three bookkeeping entries and ``parts`` for the part names.
    """

    __slots__ = ()

    @property
    def key(self) -> str:
        return str(self["__key__"])

    @property
    def shard(self) -> str:
        return str(self["__shard__"])

    @property
    def index(self) -> int:
        return int(self["__index__"])

    @property
    def parts(self) -> list[str]:
        return [k for k in self if not k.startswith("__")]

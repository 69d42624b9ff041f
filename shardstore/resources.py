"""Owning files and connections: ``close()`` and ``with`` blocks for every object that holds them.

Datasets, stores, index readers and storages keep descriptors, memory maps and SQLite connections
open between reads (that is what makes random access cheap). Each releases them in ``close()`` and
at the end of a ``with`` block, and also when its last reference goes (a ``weakref.finalize`` or
plain reference counting), so a loop that opens datasets and drops them holds nothing. A closed
object opens what it needs again on its next read: ``close()`` is a release, not an end.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Closeable"]


class Closeable:
    """``close()`` (release what is held now) and context-manager support."""

    def close(self) -> None:
        """Release descriptors, maps and connections; nothing by default."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

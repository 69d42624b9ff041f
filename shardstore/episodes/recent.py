"""What a view read or opened last, kept for the next reads: bounded, the least recently used first out.

A training loop reads the same episodes epoch after epoch, and a batch of random items touches
many of them. Reading an episode again costs a request (a round trip on S3) and a check of its
sample; keeping the last ones costs memory, so the keep is bounded in entries and in bytes.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

__all__ = ["Recent"]

V = TypeVar("V")


class Recent(Generic[V]):
    """Values by integer key (an episode's position), at most ``most`` of them and ``limit``
    bytes as their ``put`` gave, the least recently used dropped first. Safe from several threads
    without a lock (an entry lost to a race is read again); pickles empty (DataLoader workers
    fill their own)."""

    def __init__(self, most: int, limit: int) -> None:
        self.most, self.limit = most, limit
        self._kept: dict[int, tuple[V, int]] = {}
        self._bytes = 0

    def get(self, key: int) -> V | None:
        kept = self._kept.pop(key, None)
        if kept is None:
            return None
        self._kept[key] = kept  # now the most recent
        return kept[0]

    def put(self, key: int, value: V, nbytes: int) -> None:
        """Keep ``value`` (``nbytes`` its cost); one larger than ``limit`` is not kept."""
        if nbytes > self.limit:
            return
        old = self._kept.pop(key, None)
        self._bytes += nbytes - (old[1] if old is not None else 0)
        self._kept[key] = (value, nbytes)
        while len(self._kept) > self.most or self._bytes > self.limit:
            try:
                self._bytes -= self._kept.pop(next(iter(self._kept)))[1]
            except (KeyError, RuntimeError, StopIteration):  # another thread's change meanwhile
                break

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._kept)

    def __getstate__(self) -> dict[str, Any]:
        return {"most": self.most, "limit": self.limit, "_kept": {}, "_bytes": 0}

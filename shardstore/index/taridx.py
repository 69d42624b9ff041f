"""``<shard>.tar.idx``: ``count + 1`` little-endian uint64, each sample's first-header offset, then the end.

Energon's training reader needs these files; shardstore memory-maps them so position -> byte
range is two array reads, no SQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["read_offsets", "offsets_bytes"]

_DTYPE = np.dtype("<u8")


def offsets_bytes(offsets: Sequence[int]) -> bytes:
    """The file content for the given offsets (sample starts followed by the end offset)."""
    return np.asarray(offsets, dtype=_DTYPE).tobytes()


def read_offsets(path_or_bytes: str | bytes) -> np.ndarray:
    """The offsets as a read-only array: memory-mapped for a local path, copied from bytes otherwise."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return np.frombuffer(path_or_bytes, dtype=_DTYPE)
    return np.memmap(path_or_bytes, dtype=_DTYPE, mode="r")

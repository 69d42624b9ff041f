"""``<shard>.tar.idx``: ``count + 1`` little-endian uint64, each sample's first-header offset, then the end.

Energon's training reader needs these files; shardstore reads them so position -> byte range is
two array reads, no SQL.

Offsets moved by whole members (two 512-byte blocks for a small member) still land on tar
headers: a read by position then parses a sample there, short of a part or another sample whole,
and nothing in its byte range says so. So shardstore's prepare records a digest of each file in
``shardstore.json`` (``tar_idx``), and a reader compares it once, when it loads the file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np

from ..errors import IndexCorruptError

__all__ = ["read_offsets", "offsets_bytes", "load_offsets", "MAP_ABOVE", "DIGEST_SCHEME", "digest", "check_digest"]

_DTYPE = np.dtype("<u8")

#: Files up to this size are read into memory, bigger ones memory-mapped: a mapping keeps a
#: descriptor open for as long as it lives (Python's mmap holds a duplicate), one per shard read.
MAP_ABOVE = 4 << 20


#: Names how a ``tar_idx`` digest was taken; a recorded one of another scheme is not compared.
DIGEST_SCHEME = "b2"


def digest(data: bytes | np.ndarray) -> str:
    """The digest of a ``.tar.idx`` file's content (its bytes, or the array read from them)."""
    view = data if isinstance(data, bytes) else np.ascontiguousarray(data).data
    return f"{DIGEST_SCHEME}:{hashlib.blake2b(view, digest_size=16).hexdigest()}"


def check_digest(offsets: np.ndarray, recorded: object, where: str) -> None:
    """``IndexCorruptError`` naming ``where`` unless ``offsets`` hash to the digest prepare
    ``recorded``; nothing to compare (None, or another scheme: a dataset Energon or an older
    shardstore prepared) passes. One hash of the file per load (0.05 ms for a 5,000-sample shard)."""
    if not isinstance(recorded, str) or not recorded.startswith(DIGEST_SCHEME + ":"):
        return
    if digest(offsets) != recorded:
        raise IndexCorruptError(
            ".tar.idx differs from the one prepare wrote (its digest in shardstore.json): "
            "its offsets were changed since; rerun prepare",
            path=where,
        )


def offsets_bytes(offsets: Sequence[int] | np.ndarray) -> bytes:
    """The file content for the given offsets (sample starts followed by the end offset)."""
    return np.asarray(offsets, dtype=_DTYPE).tobytes()


def read_offsets(path_or_bytes: str | bytes) -> np.ndarray:
    """The offsets as a read-only array: memory-mapped for a local path, copied from bytes otherwise."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return np.frombuffer(path_or_bytes, dtype=_DTYPE)
    return np.memmap(path_or_bytes, dtype=_DTYPE, mode="r")


def load_offsets(path: str, where: str) -> np.ndarray:
    """The offsets of the local file ``path`` (``where`` names it in errors), checked: a whole
    number of uint64 values, at least one, never decreasing. Together with the last offset not
    passing the shard's end (``nvmeta.shard_changed``) that puts every sample's range inside
    its shard, so no corrupt value reaches a read (a 1e12 offset would ask for a terabyte).

    Raises ``IndexCorruptError``; ``FileNotFoundError`` when there is no file."""
    size = os.path.getsize(path)
    if size % _DTYPE.itemsize or size == 0:
        raise IndexCorruptError(
            f".tar.idx is {size} bytes, not a whole number (at least one) of 8-byte offsets: truncated? rerun prepare",
            path=where,
        )
    arr = np.memmap(path, dtype=_DTYPE, mode="r") if size > MAP_ABOVE else np.fromfile(path, dtype=_DTYPE)
    if len(arr) > 1:
        down = np.flatnonzero(arr[1:] < arr[:-1])
        if len(down):
            i = int(down[0]) + 1
            raise IndexCorruptError(
                f".tar.idx entry {i} ({int(arr[i])}) is below entry {i - 1} ({int(arr[i - 1])}): rerun prepare",
                path=where,
                offset=i * _DTYPE.itemsize,
            )
    return arr

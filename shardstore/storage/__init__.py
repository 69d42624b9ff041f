"""One small storage interface over local disk and fsspec (S3, ...), rooted at a dataset URL.

Paths given to a ``Storage`` are relative to its root and always use ``/``. ``base`` holds the
interface, ``local`` reads with ``os.pread`` on cached file descriptors (no seek state, safe from
many threads), ``remote`` makes fsspec range requests with retries.
"""

from __future__ import annotations

import os
from typing import Any

from .base import (
    MERGE_GAP,
    ByteRange,
    FileStat,
    Storage,
    cache_root,
    contained_path,
    is_remote_url,
    iter_chunks,
    merge_ranges,
    scratch_path,
)
from .local import LocalStorage
from .remote import REMOTE_MERGE_GAP, S3_CONNECT_TIMEOUT, S3_READ_TIMEOUT, FsspecStorage, client_options

__all__ = [
    "ByteRange",
    "FileStat",
    "Storage",
    "LocalStorage",
    "FsspecStorage",
    "open_storage",
    "client_options",
    "is_remote_url",
    "contained_path",
    "merge_ranges",
    "scratch_path",
    "cache_root",
    "iter_chunks",
    "MERGE_GAP",
    "REMOTE_MERGE_GAP",
    "S3_CONNECT_TIMEOUT",
    "S3_READ_TIMEOUT",
]


def open_storage(url: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """A ``Storage`` rooted at ``url``: a local path, ``file://`` URL or any fsspec URL."""
    url = os.fspath(url)
    if is_remote_url(url):
        return FsspecStorage(url, storage_options)
    return LocalStorage(url)

"""The storage interface: byte ranges, file versions, and the ``Storage`` base class whose
``read_ranges`` sorts, merges neighbours and reads concurrently (the one trick that matters for
S3 latency). Backends: ``local.py`` (``os.pread``) and ``remote.py`` (fsspec).
"""

from __future__ import annotations

import builtins
import os
import re
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

from ..errors import PathEscapeError, StorageError
from ..resources import Closeable

#: Ranges closer than this are read as one request (the gap is read and dropped).
MERGE_GAP = 64 * 1024


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``size`` bytes starting at ``offset``; never open-ended."""

    offset: int
    size: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.size < 0:
            raise ValueError(f"invalid byte range: offset {self.offset}, size {self.size}")

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True, slots=True)
class FileStat:
    """What identifies a version of a file: its size, and its mtime (local) or ETag (remote)."""

    size: int
    mtime: float | None = None
    etag: str | None = None


def merge_ranges(ranges: Sequence[ByteRange], gap: int = MERGE_GAP) -> list[tuple[ByteRange, list[int]]]:
    """Group ranges into merged reads: (covering range, indices of the input ranges it serves)."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i].offset)
    merged: list[tuple[ByteRange, list[int]]] = []
    for i in order:
        r = ranges[i]
        if merged and r.offset <= merged[-1][0].end + gap:
            cover, members = merged[-1]
            members.append(i)
            if r.end > cover.end:
                merged[-1] = (ByteRange(cover.offset, r.end - cover.offset), members)
        else:
            merged.append((r, [i]))
    return merged


_DRIVE_OR_URL = re.compile(r"^(?:[A-Za-z]:|[A-Za-z][A-Za-z0-9+.-]*://)")


def contained_path(name: str, root: str, where: str | None = None) -> str:
    """``name`` itself if it stays inside ``root``; ``PathEscapeError`` otherwise.

    The one containment rule for every path read from a dataset's own files (shard names in
    ``.info.json`` and ``split.yaml``, ``.tar.idx`` paths, S3 keys, metadataset references): an
    untrusted dataset must not make a reader open a file outside its root. Refused: a NUL byte, an
    absolute path (``/x``, ``\\x``, ``C:x``), a URL or another root (``s3://other/x``) and any ``..``
    component (``/`` or ``\\`` separated). The check is lexical: symlinks inside the root are the
    user's own and are followed as usual. ``where`` names the file the name came from.
    """
    if not isinstance(name, str) or "\x00" in name:
        raise PathEscapeError("NUL byte or non-text in a path: refused", path=where or root, member=repr(name))
    if name.startswith(("/", "\\")) or _DRIVE_OR_URL.match(name):
        raise PathEscapeError(f"absolute path or other root refused: it would leave {root}", path=where or root, member=name)
    if ".." in name.replace("\\", "/").split("/"):
        raise PathEscapeError(f"'..' refused: the path would leave {root}", path=where or root, member=name)
    return name


def is_remote_url(url: str) -> bool:
    """True for any URL with a protocol other than ``file://``."""
    return "://" in str(url) and not str(url).startswith("file://")


class Storage(Closeable, ABC):
    """A tree of files under one root (a folder or a bucket prefix). ``close()`` releases what a
    backend keeps open between reads (a later read opens it again)."""

    root: str

    @abstractmethod
    def stat(self, path: str) -> FileStat:
        """Size and version of ``path``; raises ``FileNotFoundError`` (a ``StorageError``) if absent."""

    @abstractmethod
    def read_range(self, path: str, rng: ByteRange) -> bytes:
        """Exactly ``rng.size`` bytes of ``path`` from ``rng.offset``; short files raise ``StorageError``."""

    @abstractmethod
    def list(self, suffixes: tuple[str, ...] = ()) -> list[str]:
        """Every file under the root (recursively) whose name ends with one of ``suffixes``."""

    @abstractmethod
    def open(self, path: str) -> IO[bytes]:
        """A seekable binary file object for sequential reading."""

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so readers see the old or the new file, never a mix."""

    @abstractmethod
    def put_file(self, local_path: str, path: str) -> None:
        """Upload (or move into place) a finished local file as ``path``, atomically."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """True if ``path`` is a file under the root."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Delete ``path`` if it exists."""

    def url(self, path: str = "") -> str:
        """The full URL (or local path) of ``path``, for messages and for other tools."""
        return f"{self.root.rstrip('/')}/{path}" if path else self.root

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` if the storage is local, else None."""
        return None

    def read_at(self, path: str, offset: int, size: int) -> bytes:
        """``read_range(path, ByteRange(offset, size))``, for per-sample hot paths that would
        otherwise build a ``ByteRange`` only to take it apart again."""
        return self.read_range(path, ByteRange(offset, size))

    def size(self, path: str) -> int:
        return self.stat(path).size

    def read(self, path: str) -> bytes:
        """A whole (small) file, e.g. an index or YAML file."""
        return self.read_range(path, ByteRange(0, self.size(path)))

    #: Ranges of one file closer than this are fetched by one read.
    merge_gap = MERGE_GAP

    def read_ranges(self, requests: Sequence[tuple[str, ByteRange]], max_workers: int = 16) -> builtins.list[bytes]:
        """Many ranges, possibly of many files; results in the order asked.

        Neighbouring ranges of one file (closer than ``merge_gap``) are merged into one read;
        the merged reads run concurrently. Raises ``StorageError`` if any read fails.
        """
        by_path: dict[str, list[int]] = {}
        for i, (path, _) in enumerate(requests):
            by_path.setdefault(path, []).append(i)
        jobs: list[tuple[str, ByteRange, list[int]]] = []
        for path, idxs in by_path.items():
            ranges = [requests[i][1] for i in idxs]
            for cover, members in merge_ranges(ranges, self.merge_gap):
                jobs.append((path, cover, [idxs[m] for m in members]))
        datas = self._read_merged([(path, cover) for path, cover, _ in jobs], max_workers)
        out: list[bytes] = [b""] * len(requests)
        for (_, cover, members), data in zip(jobs, datas, strict=True):
            for i in members:
                r = requests[i][1]
                out[i] = data[r.offset - cover.offset : r.end - cover.offset]
        return out

    def _read_merged(self, reads: Sequence[tuple[str, ByteRange]], max_workers: int) -> builtins.list[bytes]:
        """The data of each (path, range), read concurrently on a thread pool."""
        if len(reads) <= 1:
            return [self.read_range(path, rng) for path, rng in reads]
        with ThreadPoolExecutor(min(max_workers, len(reads))) as pool:
            return list(pool.map(lambda job: self.read_range(*job), reads))


def _not_found(path: str) -> StorageError:
    err = StorageError("no such file", path=path)
    err.errno = 2
    return err


def cache_root() -> str:
    """Where shardstore keeps local files derived from datasets (downloaded indexes, name
    tables): ``$SHARDSTORE_CACHE``, else ``~/.cache/shardstore``."""
    return os.environ.get("SHARDSTORE_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "shardstore"))


def scratch_path(suffix: str = "") -> str:
    """A fresh local temporary file name (not created), for building files before upload."""
    return os.path.join(tempfile.gettempdir(), f"shardstore-{uuid.uuid4().hex}{suffix}")


def iter_chunks(f: IO[bytes], size: int) -> Iterator[bytes]:
    while chunk := f.read(size):
        yield chunk

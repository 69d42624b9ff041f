"""One small storage interface over local disk and fsspec (S3, ...), rooted at a dataset URL.

Paths given to a ``Storage`` are relative to its root and always use ``/``. Local reads use
``os.pread`` on cached file descriptors (no seek state, safe from many threads); remote reads are
fsspec range requests with retries. ``read_ranges`` sorts, merges neighbours and reads
concurrently, the one trick that matters for S3 latency.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

from .errors import MissingExtraError, StorageError

__all__ = [
    "ByteRange",
    "FileStat",
    "Storage",
    "LocalStorage",
    "FsspecStorage",
    "open_storage",
    "is_remote_url",
    "merge_ranges",
]

#: Ranges closer than this are read as one request (the gap is read and dropped).
MERGE_GAP = 64 * 1024
#: fsspec protocol -> extra that provides it, for a helpful error when it is missing.
_UMASK = os.umask(0o22)
os.umask(_UMASK)
_PROTOCOL_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure"}


@dataclass(frozen=True, slots=True)
class ByteRange:
    """``size`` bytes starting at ``offset``; never open-ended."""

    offset: int
    size: int

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
            end = max(cover.end, r.end)
            merged[-1] = (ByteRange(cover.offset, end - cover.offset), members + [i])
        else:
            merged.append((r, [i]))
    return merged


def is_remote_url(url: str) -> bool:
    """True for any URL with a protocol other than ``file://``."""
    return "://" in str(url) and not str(url).startswith("file://")


class Storage(ABC):
    """A tree of files under one root (a folder or a bucket prefix)."""

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

    def size(self, path: str) -> int:
        return self.stat(path).size

    def read(self, path: str) -> bytes:
        """A whole (small) file, e.g. an index or YAML file."""
        return self.read_range(path, ByteRange(0, self.size(path)))

    def read_ranges(self, requests: Sequence[tuple[str, ByteRange]], max_workers: int = 16) -> list[bytes]:
        """Many ranges, possibly of many files; results in the order asked.

        Neighbouring ranges of one file are merged into one read; the merged reads run
        concurrently on a thread pool.
        """
        by_path: dict[str, list[int]] = {}
        for i, (path, _) in enumerate(requests):
            by_path.setdefault(path, []).append(i)
        jobs: list[tuple[str, ByteRange, list[int]]] = []
        for path, idxs in by_path.items():
            ranges = [requests[i][1] for i in idxs]
            for cover, members in merge_ranges(ranges):
                jobs.append((path, cover, [idxs[m] for m in members]))
        out: list[bytes] = [b""] * len(requests)

        def run(job: tuple[str, ByteRange, list[int]]) -> None:
            path, cover, members = job
            data = self.read_range(path, cover) if cover.size else b""
            for i in members:
                r = requests[i][1]
                out[i] = data[r.offset - cover.offset : r.end - cover.offset]

        if len(jobs) <= 1:
            for job in jobs:
                run(job)
        else:
            with ThreadPoolExecutor(min(max_workers, len(jobs))) as pool:
                list(pool.map(run, jobs))
        return out


class LocalStorage(Storage):
    """A local folder: ``os.pread`` on file descriptors kept open per process."""

    def __init__(self, root: str) -> None:
        if root.startswith("file://"):
            root = root[len("file://") :]
        self.root = os.path.abspath(root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path) if path else self.root

    def local_path(self, path: str) -> str | None:
        return self._abs(path)

    def _fd(self, path: str) -> int:
        if self._pid != os.getpid():  # forked: descriptors are shared with the parent, reopen
            self._fds, self._lock, self._pid = {}, threading.Lock(), os.getpid()
        fd = self._fds.get(path)
        if fd is None:
            with self._lock:
                fd = self._fds.get(path)
                if fd is None:
                    try:
                        fd = os.open(self._abs(path), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                    except FileNotFoundError:
                        raise _not_found(self._abs(path)) from None
                    except OSError as e:
                        raise StorageError(f"cannot open: {e.strerror}", path=self._abs(path)) from e
                    self._fds[path] = fd
        return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def stat(self, path: str) -> FileStat:
        try:
            st = os.stat(self._abs(path))
        except FileNotFoundError:
            raise _not_found(self._abs(path)) from None
        return FileStat(size=st.st_size, mtime=st.st_mtime)

    def read_range(self, path: str, rng: ByteRange) -> bytes:
        data = os.pread(self._fd(path), rng.size, rng.offset)
        if len(data) != rng.size:
            raise StorageError(
                f"short read: wanted {rng.size} bytes, file ends after {len(data)} (truncated since prepare?)",
                path=self._abs(path),
                offset=rng.offset,
            )
        return data

    def list(self, suffixes: tuple[str, ...] = ()) -> list[str]:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=True):
            dirnames[:] = [d for d in dirnames if d != ".nv-meta"]
            rel = os.path.relpath(dirpath, self.root)
            for name in filenames:
                if not suffixes or name.endswith(suffixes):
                    found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
        return found

    def open(self, path: str) -> IO[bytes]:
        try:
            return open(self._abs(path), "rb")
        except FileNotFoundError:
            raise _not_found(self._abs(path)) from None

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def remove(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            pass

    def write_atomic(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-", suffix="-" + os.path.basename(target))
        try:
            os.fchmod(fd, 0o666 & ~_UMASK)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            _unlink_quiet(tmp)
            raise

    def put_file(self, local_path: str, path: str) -> None:
        target = self._abs(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(local_path, target)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _not_found(path: str) -> StorageError:
    err = StorageError("no such file", path=path)
    err.errno = 2
    return err


class FsspecStorage(Storage):
    """Any fsspec filesystem (S3 first of all). Reads are range requests, retried with backoff."""

    #: Attempts per request before giving up on a transient error.
    retries = 5

    def __init__(self, root: str, storage_options: dict[str, Any] | None = None) -> None:
        import fsspec

        protocol = root.split("://", 1)[0]
        try:
            self.fs = fsspec.filesystem(protocol, **(storage_options or {}))
        except ImportError as e:
            extra = _PROTOCOL_EXTRAS.get(protocol, protocol)
            raise MissingExtraError(
                f"reading {protocol}:// URLs needs an extra: pip install 'shardstore[{extra}]' ({e})", path=root
            ) from e
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        self.root = root.rstrip("/")
        self._prefix = self.fs._strip_protocol(self.root).rstrip("/")

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"], state["storage_options"])  # type: ignore[misc]

    def _full(self, path: str) -> str:
        return f"{self._prefix}/{path}" if path else self._prefix

    def _retry(self, what: str, path: str, fn: Callable[[], Any], offset: int | None = None) -> Any:
        delay = 0.05
        for attempt in range(self.retries):
            try:
                return fn()
            except FileNotFoundError:
                raise _not_found(self.url(path)) from None
            except Exception as e:  # noqa: BLE001 - classify below
                if not _transient(e) or attempt == self.retries - 1:
                    raise StorageError(f"{what} failed: {type(e).__name__}: {e}", path=self.url(path), offset=offset) from e
                time.sleep(delay * (1 + random.random()))
                delay *= 2
        raise AssertionError("unreachable")

    def stat(self, path: str) -> FileStat:
        info = self._retry("stat", path, lambda: self.fs.info(self._full(path)))
        if info.get("type") == "directory":
            raise _not_found(self.url(path))
        etag = info.get("ETag") or info.get("etag")
        return FileStat(size=int(info["size"]), etag=str(etag).strip('"') if etag else None)

    def read_range(self, path: str, rng: ByteRange) -> bytes:
        if rng.size == 0:  # a zero-length range request is ambiguous across servers: skip it
            return b""
        data: bytes = self._retry(
            f"read of bytes {rng.offset}-{rng.end - 1}",
            path,
            lambda: self.fs.cat_file(self._full(path), start=rng.offset, end=rng.end),
            rng.offset,
        )
        if len(data) != rng.size:
            raise StorageError(
                f"short read: wanted {rng.size} bytes, got {len(data)} (object changed since prepare?)",
                path=self.url(path),
                offset=rng.offset,
            )
        return data

    def read_ranges(self, requests: Sequence[tuple[str, ByteRange]], max_workers: int = 32) -> list[bytes]:
        return super().read_ranges(requests, max_workers=max_workers)

    def list(self, suffixes: tuple[str, ...] = ()) -> list[str]:
        found = self._retry("listing", "", lambda: self.fs.find(self._prefix))
        out = []
        for full in found:
            rel = full[len(self._prefix) + 1 :]
            if rel.startswith(".nv-meta/") or "/.nv-meta/" in rel:
                continue
            if not suffixes or rel.endswith(suffixes):
                out.append(rel)
        return out

    def open(self, path: str) -> IO[bytes]:
        f: IO[bytes] = self._retry("open", path, lambda: self.fs.open(self._full(path), "rb", block_size=8 << 20))
        return f

    def exists(self, path: str) -> bool:
        return bool(self._retry("exists", path, lambda: self.fs.isfile(self._full(path))))

    def remove(self, path: str) -> None:
        if self.exists(path):
            self._retry("delete", path, lambda: self.fs.rm_file(self._full(path)))

    def write_atomic(self, path: str, data: bytes) -> None:
        # A single PUT is atomic on object stores: readers see the old or the new object.
        self._retry("write", path, lambda: self.fs.pipe_file(self._full(path), data))
        self.fs.invalidate_cache(self._full(path))

    def put_file(self, local_path: str, path: str) -> None:
        self._retry("upload", path, lambda: self.fs.put_file(local_path, self._full(path)))
        self.fs.invalidate_cache(self._full(path))
        os.unlink(local_path)


def _transient(e: BaseException) -> bool:
    """Errors worth retrying: connection problems and 5xx/throttling answers."""
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(e).__name__} {e}"
    markers = ("500", "502", "503", "504", "SlowDown", "Throttl", "ServerDisconnected", "Connection", "reset", "Timeout")
    return any(m in text for m in markers)


def open_storage(url: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """A ``Storage`` rooted at ``url``: a local path, ``file://`` URL or any fsspec URL."""
    url = os.fspath(url)
    if is_remote_url(url):
        return FsspecStorage(url, storage_options)
    return LocalStorage(url)


def scratch_path(suffix: str = "") -> str:
    """A fresh local temporary file name (not created), for building files before upload."""
    return os.path.join(tempfile.gettempdir(), f"shardstore-{uuid.uuid4().hex}{suffix}")


def iter_chunks(f: IO[bytes], size: int) -> Iterator[bytes]:
    while chunk := f.read(size):
        yield chunk

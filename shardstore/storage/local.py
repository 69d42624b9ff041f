"""A local folder as ``Storage``: ``os.pread`` on file descriptors kept open per process."""

from __future__ import annotations

import collections
import errno
import os
import shutil
import stat as stat_module
import tempfile
import threading
import uuid
import warnings
import weakref
from typing import IO, Any

from ..errors import LinkLoopWarning, StorageError
from .base import ByteRange, FileStat, Storage, _not_found, contained_path

_UMASK = os.umask(0o22)
os.umask(_UMASK)


#: Every live ``LocalStorage``, so a forked child opens its own descriptors (see ``_fd``) without
#: each read paying for an ``os.getpid()`` check.
_LOCAL_STORAGES: weakref.WeakSet[LocalStorage] = weakref.WeakSet()


def _reopen_after_fork() -> None:
    for storage in list(_LOCAL_STORAGES):
        # The child's copies of the parent's descriptors: closing them touches only the child.
        _close_fds(storage._fds)
        storage._lock, storage._pid = threading.Lock(), os.getpid()


def _close_fds(fds: dict[str, int]) -> None:
    """Close and forget every descriptor of ``fds`` (in place: a finalizer holds the same dict)."""
    while fds:
        _, fd = fds.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reopen_after_fork)


class LocalStorage(Storage):
    """A local folder: ``os.pread`` on file descriptors kept open per process."""

    def __init__(self, root: str) -> None:
        if root.startswith("file://"):
            root = root[len("file://") :]
        self.root = os.path.abspath(root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        _LOCAL_STORAGES.add(self)
        # The descriptors go with the last reference, whoever drops it (no __del__: a finalizer
        # also runs at exit and never sees a half-torn-down object).
        weakref.finalize(self, _close_fds, self._fds)

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["root"])  # type: ignore[misc]

    def _abs(self, path: str) -> str:
        """The local path of ``path``; ``PathEscapeError`` for a name that would leave the root."""
        return os.path.join(self.root, contained_path(path, self.root)) if path else self.root

    def local_path(self, path: str) -> str | None:
        return self._abs(path)

    def _fd(self, path: str) -> int:
        """The cached descriptor of ``path``. A forked child starts with none (``_reopen_after_fork``):
        the parent's may be closed or replaced under it, and its lock may be held."""
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
        """Close every cached descriptor (call it when no read is in flight: a descriptor closed
        under a read could be reused by another open); a later read opens again."""
        with self._lock:
            _close_fds(self._fds)

    def _forget(self, path: str) -> None:
        """Close the cached descriptor of ``path``: it is being replaced or removed."""
        if self._pid != os.getpid():
            return
        with self._lock:
            fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def stat(self, path: str) -> FileStat:
        try:
            st = os.stat(self._abs(path))
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a component is a file
            raise _not_found(self._abs(path)) from None
        if stat_module.S_ISDIR(st.st_mode):
            raise _not_found(self._abs(path))
        return FileStat(size=st.st_size, mtime=st.st_mtime)

    def read_range(self, path: str, rng: ByteRange) -> bytes:
        return self.read_at(path, rng.offset, rng.size)

    def read_at(self, path: str, offset: int, size: int) -> bytes:
        fd = self._fd(path)
        try:
            data = os.pread(fd, size, offset)
        except OSError as e:
            raise StorageError(f"read of {size} bytes failed: {e.strerror}", path=self._abs(path), offset=offset) from e
        if len(data) != size:
            raise StorageError(
                f"short read: wanted {size} bytes, file ends after {len(data)} (truncated since prepare?)",
                path=self._abs(path),
                offset=offset,
            )
        return data

    def list(self, suffixes: tuple[str, ...] = ()) -> list[str]:
        """Every file under the root, following symlinks but visiting each real folder once (by
        ``(st_dev, st_ino)``): a link back up (``ln -s .. parts/loop``) would otherwise be walked
        without end. Each link skipped that way is reported with a ``LinkLoopWarning``."""
        found: list[str] = []
        for rel, link, first in walk_files(self.root, found, suffixes):
            warnings.warn(
                LinkLoopWarning(f"{os.path.join(self.root, rel)}: symlink to {link!r} leads to a folder already listed "
                                f"({'the dataset root: a loop' if not first else repr(first)}); not followed again"),
                stacklevel=2,
            )
        return sorted(found)

    def open(self, path: str) -> IO[bytes]:
        try:
            return open(self._abs(path), "rb")
        except FileNotFoundError:
            raise _not_found(self._abs(path)) from None

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def remove(self, path: str) -> None:
        self._forget(path)
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            pass

    def write_atomic(self, path: str, data: bytes) -> None:
        self._forget(path)
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
        """Move ``local_path`` into place (the local file is consumed, as by ``FsspecStorage``)."""
        self._forget(path)
        target = self._abs(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.replace(local_path, target)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise StorageError(f"cannot move {local_path} into place: {e.strerror}", path=target) from e
            # another filesystem: copy beside the target, then rename (still atomic for readers)
            tmp = f"{target}.tmp-{uuid.uuid4().hex[:12]}"
            try:
                shutil.copyfile(local_path, tmp)
                os.replace(tmp, target)
            except BaseException:
                _unlink_quiet(tmp)
                raise
            os.unlink(local_path)


def walk_files(root: str, found: list[str], suffixes: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """Append to ``found`` the files under ``root`` (relative, ``/``-separated, ``.nv-meta`` left out);
    return the links that led to a folder seen before: (their relative path, where they point, the
    relative path the folder was first listed under).

    Breadth first, entries in name order with real folders before links: a folder reached twice is
    listed under its shallowest name, the same one on every run."""
    try:
        st = os.stat(root)
    except OSError as e:
        raise StorageError(f"cannot list: {e.strerror}", path=root) from e
    seen = {(st.st_dev, st.st_ino): ""}
    skipped: list[tuple[str, str, str]] = []
    queue = collections.deque([""])
    while queue:
        rel = queue.popleft()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = sorted(it, key=lambda e: (e.is_symlink(), e.name))
        except OSError:
            continue  # unreadable or vanished folder: as os.walk, skip it
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                continue
            if not is_dir:
                if not suffixes or entry.name.endswith(suffixes):
                    found.append(child)  # any non-folder, as os.walk: prepare reports what is not a tar
                continue
            if entry.name == ".nv-meta":
                continue
            try:
                cst = entry.stat(follow_symlinks=True)
            except OSError:
                continue
            key = (cst.st_dev, cst.st_ino)
            if key in seen:
                if entry.is_symlink():
                    skipped.append((child, os.readlink(entry.path), seen[key]))
                continue
            seen[key] = child
            queue.append(child)
    return skipped


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

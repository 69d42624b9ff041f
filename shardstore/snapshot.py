"""A local dataset's storage pinned to one generation of its index (one ``.nv-meta`` folder).

A re-prepare swaps ``.nv-meta`` atomically (metaswap.py), but a reader reads its index files at
different moments: ``.info.json`` and ``split.yaml`` when it opens, ``dataset.yaml``,
``shardstore.json`` and ``index.sqlite`` later. Read by name, they could come from two generations
(tar_file_id 0 of the old ``.info.json`` meeting the rows of the new ``index.sqlite``: wrong bytes).

So a ``PinnedLocalStorage`` opens the ``.nv-meta`` folder once (a directory descriptor: a swap
renames the folder, the descriptor keeps it), reads the small files through it at once, and
reaches every other ``.nv-meta`` file through ``/proc/self/fd/<fd>/`` (Linux): all from the same
generation. The old generation is deleted after a swap, ``index.uuid`` first; a file first opened
after that fails with ``StaleIndexError`` ("re-prepared while open"), never with another
generation's bytes. ``Dataset`` opens its ``index.sqlite`` connection when it opens, so the usual
reader never meets that case.

``.tar.idx`` files live beside the shards and are shared by the generations: a prepare leaves an
unchanged one alone and replaces the others before the swap; see docs/format.md.
"""

from __future__ import annotations

import errno
import os
import time
import weakref
from typing import Any

from . import metaswap
from .errors import StaleIndexError, StorageError
from .storage import LocalStorage, Storage, contained_path, open_storage
from .storage.base import _not_found

__all__ = ["PinnedLocalStorage", "open_dataset_storage"]

META = metaswap.META_DIR
#: The small files read when pinning: everything a reader looks at besides index.sqlite and the
#: episode files (those are read through the pinned folder when needed).
EAGER = ("index.uuid", ".info.json", ".info.yaml", "split.yaml", "split.json", "dataset.yaml", "shardstore.json")
#: How long an open waits while a fallback swap (two renames) has no ``.nv-meta`` in place.
SWAP_WAIT = 5.0
_PROC_FD = "/proc/self/fd"


def _read_at(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _still_whole(dir_fd: int, final: str, cache: dict[str, bytes | None]) -> bool:
    """True when nothing of the pinned folder was deleted before the reads: it is still the
    current ``.nv-meta``, or the files a deletion removes first are still there."""
    try:
        st, now = os.fstat(dir_fd), os.stat(final)
        if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
            return True
    except FileNotFoundError:
        pass
    firsts = [n for n in metaswap.FIRST_REMOVED if cache.get(n) is not None]
    if not firsts:
        return False
    for name in firsts:
        try:
            os.stat(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
    return True


class PinnedLocalStorage(LocalStorage):
    """``LocalStorage`` whose ``.nv-meta/...`` paths all come from the generation found at open."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._dir_fd: int | None = None
        self._cache: dict[str, bytes | None] = {}
        self._pin()

    def _pin(self) -> None:
        final = os.path.join(self.root, META)
        deadline = time.monotonic() + SWAP_WAIT
        while True:
            try:
                fd = os.open(final, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                if metaswap.swap_in_progress(self.root) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                return  # not prepared: reads fall through to the plain paths (and their errors)
            except OSError:
                return  # not a folder, no permission: the plain paths give the error
            cache = {name: _read_at(fd, name) for name in EAGER}
            if _still_whole(fd, final, cache):
                self._dir_fd, self._cache = fd, cache
                self._release = weakref.finalize(self, os.close, fd)
                return
            os.close(fd)  # deleted under us (a re-prepare finished meanwhile): pin the new one

    def alive(self) -> bool:
        """True while nothing of the pinned generation has been deleted: what a file opened before
        this call read is that generation's (deletion removes ``index.uuid`` first)."""
        return self._dir_fd is not None and _still_whole(self._dir_fd, os.path.join(self.root, META), self._cache)

    @property
    def uuid(self) -> str | None:
        """The pinned generation's ``index.uuid`` (None: none, or not pinned)."""
        data = self._cache.get("index.uuid")
        return data.decode(errors="replace").strip() if data else None

    def layout(self) -> tuple[bytes | None, ...]:
        """The files that give positions their meaning (shards, counts, splits): equal layouts
        read the same samples at the same positions."""
        return tuple(self._cache.get(n) for n in (".info.json", ".info.yaml", "split.yaml", "split.json"))

    def _meta_name(self, path: str) -> str | None:
        """The name inside the pinned ``.nv-meta`` of ``path`` (contained: no ``..``), else None."""
        if not path.startswith(META + "/"):
            return None
        if self._dir_fd is None and self._cache:
            self._repin()
        return contained_path(path, self.root)[len(META) + 1 :] if self._dir_fd is not None else None

    def _repin(self) -> None:
        """After ``close``: pin the current generation again, if its layout is the one this reader
        has (a ``Dataset`` keeps its shard list and splits across close and reuse)."""
        layout = self.layout()
        self._pin()
        if self._dir_fd is not None and self.layout() != layout:
            raise StaleIndexError(
                "the dataset was re-prepared with other shards or splits while it was closed: open it again",
                path=os.path.join(self.root, META),
            )

    def _abs(self, path: str) -> str:
        name = self._meta_name(path)
        if name is not None and os.path.isdir(_PROC_FD):
            return f"{_PROC_FD}/{self._dir_fd}/{name}"
        return super()._abs(path)

    def local_path(self, path: str) -> str | None:
        return self._abs(path)

    def read(self, path: str) -> bytes:
        name = self._meta_name(path)
        if name is not None and name in self._cache:
            data = self._cache[name]
            if data is None:
                raise _not_found(super()._abs(path))
            return data
        try:
            return super().read(path)
        except StorageError as e:
            if name is not None and e.errno == errno.ENOENT:
                self._check_alive(path)
            raise

    def exists(self, path: str) -> bool:
        name = self._meta_name(path)
        if name is not None and name in self._cache:
            return self._cache[name] is not None
        return super().exists(path)

    def _check_alive(self, path: str) -> None:
        """Raise ``StaleIndexError`` when the pinned generation has been deleted (a file that is
        missing from it then says nothing about the dataset)."""
        assert self._dir_fd is not None
        if self._cache.get("index.uuid") is not None:
            try:
                os.stat("index.uuid", dir_fd=self._dir_fd)
                return
            except FileNotFoundError:
                pass
            raise StaleIndexError(
                "the dataset was re-prepared while open and the index this reader opened is gone: open it again",
                path=super()._abs(path),
            )

    def close(self) -> None:
        """Close the shard descriptors and the pinned folder's (reads then go by name again)."""
        super().close()
        if self._dir_fd is not None:
            self._release()
            self._dir_fd = None

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "layout": self.layout()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """In another process: pin the generation there, and refuse one whose layout differs from
        the sender's (its positions would mean other samples)."""
        self.__init__(state["root"])  # type: ignore[misc]
        if "layout" in state and tuple(state["layout"]) != self.layout():
            raise StaleIndexError(
                "the dataset was re-prepared with other shards or splits after it was opened: open it again",
                path=os.path.join(self.root, META),
            )


def open_dataset_storage(url: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """The storage a ``Dataset`` reads: pinned to one index generation when local."""
    storage = open_storage(url, storage_options)
    if isinstance(storage, LocalStorage):
        return PinnedLocalStorage(storage.root)
    return storage

"""Write a folder beside its destination, then swap it into place: the one commit of every import
and every export, so OUT is at every instant the old dataset or the new one.

``StagedFolder(out, force=..., holds=...)`` takes the lock ``.<name>.shardstore-lock`` beside
``out`` (one writer per ``out``: ``OutputLockedError`` names the other), repairs what a killed
writer of ``out`` left (``recover``), refuses an ``out`` that already holds what ``holds``
recognises (unless ``force``) or anything else but an empty folder, and makes the hidden sibling
``.<name>.shardstore-tmp-<host>-<pid>-<random>``; as a context manager, an exception aborts it
(an ``OSError``, a full disk, comes out as a ``StorageError`` naming ``out``).
``commit()`` swaps it with ``out`` in one
``renameat2(RENAME_EXCHANGE)`` (``metaswap.swap_in``, as prepare swaps ``.nv-meta``), then removes
the old folder, now under the staging name; ``abort()`` removes the staging folder. Both release
the lock.

Where the exchange is unavailable the swap is two renames, ``out`` -> ``.<name>.shardstore-old-*``
then staging -> ``out``; a writer killed between them leaves no ``out`` but a complete old folder,
which ``recover`` renames back. So a killed writer leaves at most: its staging folder (partial, or
after the exchange the superseded old dataset), an ``-old`` folder beside a complete ``out`` (the
swap finished), or an ``-old`` folder without ``out`` (restored), and the lock file. The next
``StagedFolder`` of the same ``out`` and ``shardstore check`` (``recover``) clean them; a complete
dataset that ``out`` does not hold is never deleted while ``out`` is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from types import TracebackType

from .. import metaswap
from ..errors import ConfigError, OutputLockedError, ShardstoreError, StorageError, from_library

__all__ = ["StagedFolder", "recover", "recover_unlocked", "scratch_beside"]


def _names(out: str) -> tuple[str, str, str, str]:
    """``(parent, staging prefix, aside prefix, lock path)`` of ``out`` (an absolute path)."""
    parent, base = os.path.split(out)
    return parent, f".{base}.shardstore-tmp-", f".{base}.shardstore-old-", os.path.join(parent, f".{base}.shardstore-lock")


def _lock(out: str) -> metaswap.FolderLock:
    return metaswap.FolderLock(
        _names(out)[3], busy=f"another import or export is writing {out}", error=OutputLockedError,
        guards=os.path.basename(out),
    )


class StagedFolder:
    """A staging folder for ``out``; see the module docstring. ``what`` names the content in
    messages (``a dataset``, ``a Minari dataset``)."""

    def __init__(
        self, out: str | os.PathLike[str], *, force: bool, holds: Callable[[str], bool], what: str = "a dataset"
    ) -> None:
        self.out = os.path.abspath(os.fspath(out))
        self.holds = holds
        parent, prefix, _, _ = _names(self.out)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create the folder: {e.strerror}", path=parent) from e
        try:
            self._lock: metaswap.FolderLock | None = _lock(self.out)
        except StorageError as e:  # (an OutputLockedError, not a StorageError, passes as it is)  # a parent that cannot be written (/proc, /sys, read-only): one line
            raise StorageError(f"cannot write beside OUT here: {e.detail.split(': ', 1)[-1]}", path=self.out) from None
        try:
            recover(self.out, holding_lock=True)
            self._refuse_taken(force, what)
            self.path = os.path.join(parent, f"{prefix}{metaswap.HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
            try:
                os.mkdir(self.path)
            except OSError as e:
                raise StorageError(f"cannot write beside OUT here: {e.strerror}", path=self.out) from None
        except BaseException:
            self._release()
            raise

    def _refuse_taken(self, force: bool, what: str) -> None:
        if not os.path.lexists(self.out):
            return
        if not os.path.isdir(self.out):
            raise ConfigError("exists and is not a folder", path=self.out)
        if self.holds(self.out):
            if not force:
                raise ConfigError(f"already holds {what}; pass force=True (--force) to replace it", path=self.out)
        elif os.listdir(self.out):
            raise ConfigError(
                f"is a folder that is not empty and holds no {what.split(' ', 1)[-1]}; choose another OUT", path=self.out
            )

    def __enter__(self) -> StagedFolder:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        """On an exception: ``abort()``, and an ``OSError`` of writing (a full disk) raised again as
        the ``StorageError`` naming ``out`` (``errors.from_library``); others pass as they are."""
        if ev is None:
            return
        self.abort()
        if isinstance(ev, OSError) and not isinstance(ev, ShardstoreError):
            raise from_library(ev, self.out) from ev

    def commit(self) -> None:
        """Swap the finished folder with ``out`` (see the module docstring), then remove the old one."""
        metaswap.pause_point("output-staged")
        try:
            old = metaswap.swap_in(self.path, self.out, _names(self.out)[2], stage="output-")
        except OSError as e:
            self.abort()
            raise StorageError(f"cannot move the staged folder into place: {e.strerror or e}", path=self.out) from e
        if old is not None:
            _remove(old)
        self._release()

    def abort(self) -> None:
        _remove(self.path)
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def recover(out: str, *, holding_lock: bool) -> metaswap.Recovery:
    """Undo or clean what killed writers of the folder ``out`` left beside it.

    - no ``out`` but an ``-old`` folder: it is the old ``out`` (a writer was killed between its two
      renames), renamed back;
    - ``-old`` folders beside an ``out``, staging folders: removed when their process is gone, or
      (``holding_lock``: the caller holds ``out``'s lock, which every writer holds) of any process
      of this host. Other hosts' folders are left alone.
    """
    out = os.path.abspath(out)
    parent, staging, aside, _ = _names(out)
    done = metaswap.Recovery("the output folder", "a writer was killed", "a killed import or export")
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return done
    olds = [n for n in names if n.startswith(aside) and metaswap.owner_gone(n, aside, holding_lock=holding_lock)]
    if olds and not os.path.lexists(out):
        best = max(olds, key=lambda n: os.stat(os.path.join(parent, n)).st_mtime)
        try:
            os.rename(os.path.join(parent, best), out)
        except OSError:
            return done  # read-only: left for someone who can write
        done.restored = best
        olds.remove(best)
    dead = olds + [n for n in names if n.startswith(staging) and metaswap.owner_gone(n, staging, holding_lock=holding_lock)]
    for name in dead:
        _remove(os.path.join(parent, name))
        if not os.path.lexists(os.path.join(parent, name)):
            done.removed.append(name)
    return done


def recover_unlocked(out: str) -> metaswap.Recovery:
    """``recover`` for a reader (``shardstore check``): under ``out``'s lock when it is free (its
    lock file removed after), else only what dead processes of this host left."""
    try:
        lock = _lock(os.path.abspath(out))
    except ShardstoreError:  # a writer runs, or the folder is read-only
        return recover(out, holding_lock=False)
    try:
        return recover(out, holding_lock=True)
    finally:
        lock.release()


def _remove(path: str) -> None:
    """Delete a folder; one that was a symlink (an ``out`` linked to a folder kept elsewhere)
    loses only the link."""
    if os.path.islink(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def scratch_beside(out: str | os.PathLike[str]) -> Iterator[str]:
    """A hidden working folder ``.<name>.shardstore-scratch-<host>-<pid>-<random>`` beside ``out``
    for a dataset made on the way to it (a conversion's import, an edit exported to another
    format), removed at the end. Those a killed process of this host left (SIGKILL runs no
    ``finally``) are removed first; a live process's are not."""
    out = os.path.abspath(os.fspath(out))
    parent, base = os.path.split(out)
    prefix = f".{base}.shardstore-scratch-"
    try:
        os.makedirs(parent, exist_ok=True)
        for name in os.listdir(parent):
            if name.startswith(prefix) and metaswap.owner_gone(name, prefix):
                _remove(os.path.join(parent, name))
        path = os.path.join(parent, f"{prefix}{metaswap.HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        os.mkdir(path)
    except OSError as e:
        raise StorageError(f"cannot write beside OUT here: {e.strerror}", path=out) from None
    try:
        yield path
    finally:
        _remove(path)

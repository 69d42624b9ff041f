"""Replacing a local dataset's ``.nv-meta`` safely: the prepare lock, the atomic swap, and recovery.

The promise (docs/format.md, "Crash safety and concurrency"): at every instant a reader and a crash
see either the complete old index or the complete new one. A prepare builds the new ``.nv-meta`` in
a staging folder beside it (``.nv-meta.tmp-<host>-<pid>-<random>``), then

1. places the new ``.tar.idx`` files beside their shards (one atomic rename each; a file whose bytes
   are unchanged is left alone: for a shard that did not change, old and new are the same bytes),
2. swaps the staging folder with ``.nv-meta`` in one ``renameat2(RENAME_EXCHANGE)`` (Linux),
3. removes the old generation, now under the staging name, ``index.uuid`` and ``.info.json`` first
   (readers that pinned it see it is gone: ``snapshot.py``).

Where the exchange is unavailable (not Linux, or a filesystem such as NFS that refuses it) the
swap is two renames: ``.nv-meta`` -> ``.nv-meta.old-*``, staging -> ``.nv-meta``. Between them
there is no ``.nv-meta``; readers wait for it (``swap_in_progress``), and a crash there is undone
by ``recover`` (the old one is renamed back).

One prepare at a time per dataset: ``PrepareLock`` is an ``flock`` on ``.nv-meta.lock``, released by
the kernel when its process dies, so a killed prepare never blocks the next one.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass, field

from .errors import PrepareLockedError, ShardstoreError, StorageError

__all__ = [
    "FolderLock", "PrepareLock", "swap_in", "remove_generation", "recover", "swap_in_progress", "pause_point",
    "owner_gone", "META_DIR",
]

META_DIR = ".nv-meta"
LOCK_NAME = f"{META_DIR}.lock"
STAGING_PREFIX = f"{META_DIR}.tmp-"
OLD_PREFIX = f"{META_DIR}.old-"
HOST = socket.gethostname().replace("-", "_")
#: Files removed first from a generation being deleted: a reader that pinned it checks for them.
FIRST_REMOVED = ("index.uuid", ".info.json", ".info.yaml")

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def pause_point(stage: str) -> None:
    """Test hook: with ``SHARDSTORE_TEST_PAUSE_AT=<stage>``, write ``$SHARDSTORE_TEST_PAUSE_MARKER``
    and sleep at ``stage``, so a test can kill the prepare at exactly that moment."""
    if os.environ.get("SHARDSTORE_TEST_PAUSE_AT") != stage:
        return
    marker = os.environ.get("SHARDSTORE_TEST_PAUSE_MARKER")
    if marker:
        with open(marker, "w") as f:
            f.write(f"{stage} {os.getpid()}")
    time.sleep(3600)


class FolderLock:
    """An exclusive ``flock`` on the file ``path``; ``error(busy)`` (naming the holder's pid, host
    and start time) when another process holds it.

    The file exists only while its holder runs (or after one was killed: the next lock reuses it).
    It is removed before it is unlocked, and a lock taken on a file that is no longer at the path is
    taken again, so two processes never hold locks on two different files."""

    def __init__(self, path: str, *, busy: str, error: type[ShardstoreError], guards: str = "the folder") -> None:
        self.path = path
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
            except OSError as e:
                raise StorageError(f"cannot write {guards} (its lock file): {e.strerror}", path=self.path) from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "a process that is starting"
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                    raise error(f"{busy} ({holder}); wait for it to finish", path=self.path) from None
                raise StorageError(f"cannot lock: {e.strerror}", path=self.path) from e
            try:
                st, now = os.fstat(fd), os.stat(self.path)
                if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # the holder removed it as we locked it: lock the new file
        self.fd = fd
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(fd, f"pid {os.getpid()} on {HOST} since {stamp}".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


class PrepareLock(FolderLock):
    """The lock of one prepare: ``<root>/.nv-meta.lock``; ``PrepareLockedError`` when it is taken."""

    def __init__(self, root: str) -> None:
        super().__init__(
            os.path.join(root, LOCK_NAME), busy="another prepare is running on this dataset", error=PrepareLockedError,
            guards=".nv-meta",
        )


def _exchange(a: str, b: str) -> bool:
    """Swap the names ``a`` and ``b`` atomically; False when the platform or filesystem cannot."""
    if not sys.platform.startswith("linux") or os.environ.get("SHARDSTORE_RENAME_EXCHANGE") == "0":
        return False  # (the variable: to test, or to use, the two-rename swap)
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # glibc < 2.28, musl without it
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


def swap_in(staging: str, final: str, aside_prefix: str = OLD_PREFIX, stage: str = "") -> str | None:
    """Make the complete folder ``staging`` the new ``final``; return where the old one now is
    (None when there was none). Readers see the old or the new folder at every instant where
    ``renameat2(RENAME_EXCHANGE)`` works; elsewhere there is a moment with neither (see module),
    the old folder then being ``<aside_prefix><host>-<pid>-<random>`` beside ``final``. ``stage``
    prefixes the names of its pause points (``pause_point``)."""
    if not os.path.lexists(final):
        os.rename(staging, final)
        return None
    if _exchange(staging, final):
        pause_point(f"{stage}swapped")
        return staging
    aside = os.path.join(os.path.dirname(final), f"{aside_prefix}{HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    os.rename(final, aside)
    try:
        pause_point(f"{stage}fallback-between-renames")
        os.rename(staging, final)
    except BaseException:
        os.rename(aside, final)
        raise
    pause_point(f"{stage}swapped")
    return aside


def remove_generation(path: str) -> None:
    """Delete an old ``.nv-meta``: the files readers check first, then the rest. A ``.nv-meta``
    that was a symlink (to a folder the user keeps elsewhere) loses only the link."""
    if os.path.islink(path):
        os.unlink(path)
        return
    for name in FIRST_REMOVED:
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass
        except OSError:
            break
    shutil.rmtree(path, ignore_errors=True)


def swap_in_progress(root: str) -> bool:
    """True while a fallback swap has ``.nv-meta`` moved aside (a reader should wait and retry)."""
    try:
        return not os.path.exists(os.path.join(root, META_DIR)) and any(
            n.startswith(OLD_PREFIX) for n in os.listdir(root)
        )
    except OSError:
        return False


def owner_gone(name: str, prefix: str, *, holding_lock: bool = False) -> bool:
    """``<prefix><host>-<pid>-<random>`` of a process of this host that is gone (with
    ``holding_lock``, the caller holds the lock every such process held: any of this host)."""
    parts = name[len(prefix) :].rsplit("-", 2)
    if len(parts) != 3 or parts[0] != HOST or not parts[1].isdigit():
        return False
    if holding_lock:
        return True
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # alive (another user's process) or unknowable
    return False


@dataclass
class Recovery:
    """What a recovery did beside a folder that is swapped into place (``.nv-meta`` here, an
    import's or export's OUT in ``episodes.staging``): the aside it renamed back (``restored``), the
    leftovers it removed. ``folder``, ``stopped`` (who stopped between the two renames) and
    ``left_by`` (whose leftovers) word ``actions``'s lines."""

    folder: str = META_DIR
    stopped: str = "a re-prepare was interrupted"
    left_by: str = "an interrupted prepare"
    restored: str | None = None
    removed: list[str] = field(default_factory=list)

    def actions(self) -> list[str]:
        out = [f"restored {self.folder} from {self.restored} ({self.stopped} between its renames)"] if self.restored else []
        return out + [f"removed {name} (left by {self.left_by})" for name in self.removed]


def recover(root: str, *, holding_lock: bool) -> Recovery:
    """Undo or clean what an interrupted prepare left in ``root``.

    - no ``.nv-meta`` but a complete ``.nv-meta.old-*``: it is the old index, renamed back;
    - ``.nv-meta.old-*`` beside a ``.nv-meta``: removed (the swap completed);
    - staging folders ``.nv-meta.tmp-*`` of dead processes of this host (after an exchange they hold
      the old generation): removed. With ``holding_lock`` (the caller holds the prepare lock), old
      folders of any process are garbage too; staging folders of other hosts are left alone.
    """
    out = Recovery()
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return out
    final = os.path.join(root, META_DIR)
    olds = [n for n in names if n.startswith(OLD_PREFIX) and (holding_lock or owner_gone(n, OLD_PREFIX))]
    if not os.path.lexists(final):
        complete = [n for n in olds if os.path.exists(os.path.join(root, n, ".info.json"))]
        if complete:
            best = max(complete, key=lambda n: os.stat(os.path.join(root, n)).st_mtime)
            try:
                os.rename(os.path.join(root, best), final)
            except OSError:
                return out  # read-only: left for someone who can write
            out.restored = best
            olds.remove(best)
    for name in olds:
        if os.path.exists(final):
            remove_generation(os.path.join(root, name))
            out.removed.append(name)
    for name in names:
        if name.startswith(STAGING_PREFIX) and owner_gone(name, STAGING_PREFIX):
            remove_generation(os.path.join(root, name))
            out.removed.append(name)
    return out

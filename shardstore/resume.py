"""Finished shard scans kept while a prepare runs, so an interrupted prepare resumes.

A prepare that dies (Ctrl-C, SIGKILL, a lost worker, a broken shard) loses its staging folder
(``metaswap.recover`` removes it), but not the shards it had scanned: each finished scan is saved
here, in shard order, as three files named after a hash of the shard's name: ``<h>.rows`` (its
index rows, a serialized SQLite database), ``<h>.idx`` (its ``.tar.idx`` bytes) and, written last
by an atomic rename, ``<h>.json`` (shard name, stat, counts). Started again with the same
arguments, prepare reuses every saved scan whose shard still has the same size, mtime and ETag,
and scans only the rest. A prepare that commits removes the folder.

The folder: ``.nv-meta.resume-<host>-<args hash>`` at the dataset's root (local datasets, under
the dataset's ``PrepareLock``), or ``shardstore-resume-<host>-<hash of URL and args>`` in the temp
folder for remote ones (under an ``flock`` of its own). A distinct prefix: ``metaswap.recover``
removes only ``.nv-meta.tmp-*``. Two machines sharing the filesystem never take each other's (the
host is in the name); folders of this host with other arguments are removed at the next prepare,
folders of other hosts once they are older than ``SHARDSTORE_RESUME_MAX_AGE`` seconds (7 days).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from typing import Any

import numpy as np

from . import metaswap
from .errors import PrepareLockedError, StorageError
from .scan import ShardScan
from .storage import FileStat, Storage

__all__ = ["ResumeStore", "args_hash", "PREFIX"]

PREFIX = f"{metaswap.META_DIR}.resume-"
_REMOTE_PREFIX = "shardstore-resume-"
_MAX_AGE = 7 * 24 * 3600


def args_hash(args: dict[str, Any]) -> str:
    """16 hex digits naming a prepare's arguments (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps(args, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _max_age() -> float:
    try:
        return float(os.environ.get("SHARDSTORE_RESUME_MAX_AGE", _MAX_AGE))
    except ValueError:
        return _MAX_AGE


class ResumeStore:
    """The saved scans of one prepare (its dataset and arguments) on this host."""

    def __init__(self, storage: Storage, args: dict[str, Any], *, resume: bool) -> None:
        root = storage.local_path("")
        digest = args_hash(args if root is not None else {**args, "url": storage.url()})
        name = f"{metaswap.HOST}-{digest}"
        if root is not None:
            self.parent, self.dir, self._lock_fd = root, os.path.join(root, f"{PREFIX}{name}"), -1
            prefix = PREFIX
        else:
            self.parent, prefix = tempfile.gettempdir(), _REMOTE_PREFIX
            self.dir = os.path.join(self.parent, f"{prefix}{name}")
            self._lock_fd = self._lock(self.dir + ".lock")
        self.removed = _clean(self.parent, prefix, keep=os.path.basename(self.dir) if resume else None)
        try:
            os.makedirs(self.dir, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot keep the scans of this prepare: {e.strerror}", path=self.dir) from e

    @staticmethod
    def _lock(path: str) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise PrepareLockedError("another prepare of this dataset with these arguments runs on this host", path=path) from None
        return fd

    def _stem(self, shard: str) -> str:
        return os.path.join(self.dir, hashlib.sha256(shard.encode()).hexdigest()[:24])

    def _meta(self, shard: str) -> dict[str, Any] | None:
        try:
            with open(self._stem(shard) + ".json") as f:
                meta = json.load(f)
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and meta.get("name") == shard else None

    def matches(self, storage: Storage, shard: str) -> bool:
        """True when a scan of ``shard`` is saved and the shard still has its size, mtime and ETag."""
        meta = self._meta(shard)
        if meta is None:
            return False
        try:
            return FileStat(**meta["stat"]) == storage.stat(shard)
        except (TypeError, KeyError):
            return False

    def load(self, shard: str, tar_file_id: int) -> ShardScan | None:
        """The saved scan of ``shard`` (checked by ``matches``), or None when it cannot be read."""
        stem = self._stem(shard)
        meta = self._meta(shard)
        try:
            assert meta is not None
            stat = FileStat(**meta["stat"])
            with open(stem + ".rows", "rb") as f:
                rows = f.read()
            with open(stem + ".idx", "rb") as f:
                offsets = np.frombuffer(f.read(), np.uint64)
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            return None
        return ShardScan(tar_file_id, shard, stat, meta["samples"], meta["parts"], Counter(meta["part_names"]), offsets, rows)

    def save(self, scan: ShardScan, idx: bytes) -> None:
        """Keep a finished scan (its ``.json`` last: a scan is saved once that file is there)."""
        stem = self._stem(scan.name)
        rows = scan.rows
        if isinstance(rows, str):
            shutil.copyfile(rows, stem + ".rows")
        elif rows is not None:
            with open(stem + ".rows", "wb") as f:
                f.write(rows)
        with open(stem + ".idx", "wb") as f:
            f.write(idx)
        meta = {"name": scan.name, "stat": asdict(scan.stat), "samples": scan.samples, "parts": scan.parts,
                "part_names": dict(scan.part_names)}
        with open(stem + ".json.tmp", "w") as f:
            json.dump(meta, f)
        os.replace(stem + ".json.tmp", stem + ".json")

    def saved(self) -> int:
        """How many scans are saved."""
        return sum(n.endswith(".json") for n in os.listdir(self.dir))

    def remove(self) -> None:
        """The prepare committed: nothing of it stays."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.close()

    def close(self) -> None:
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(self.dir + ".lock")
            os.close(self._lock_fd)
            self._lock_fd = -1


def _clean(parent: str, prefix: str, keep: str | None) -> list[str]:
    """Remove the resume folders of this host in ``parent`` but ``keep``, and those of other hosts
    older than the maximum age; return their names."""
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    now = time.time()
    for name in names:
        if not name.startswith(prefix) or name == keep or name.endswith(".lock"):
            continue
        path = os.path.join(parent, name)
        mine = name[len(prefix):].rsplit("-", 1)[0] == metaswap.HOST
        try:
            stale = now - os.stat(path).st_mtime > _max_age()
        except OSError:
            continue
        if not (mine or stale):
            continue
        lock = -1
        if prefix == _REMOTE_PREFIX:  # (local folders are under the dataset's PrepareLock)
            try:
                lock = ResumeStore._lock(path + ".lock")
            except (PrepareLockedError, OSError):
                continue  # another prepare of this host uses it
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
        if lock >= 0:
            with contextlib.suppress(OSError):
                os.unlink(path + ".lock")
            os.close(lock)
    return removed

"""A read-only FUSE folder of the scale benchmark's synthetic shards, made as they are read.

``tools/bench/scale.py --synthetic`` measures prepare at sizes whose shards would not fit on the disk
(100M parts are 102 GB of tar). This folder holds ``data-NNNNNN.tar`` for shards 0 .. N-1, each the
bytes ``scale.shard_bytes`` writes (the same headers, names and checksums as the on-disk shards),
generated with numpy when first read and kept for a few shards. A dataset folder then links its
``parts/`` files here; prepare writes its ``.tar.idx`` files and ``.nv-meta`` beside the links, on
the disk. Every shard has the fixed size and mtime of the on-disk ones.

Reading through FUSE costs the reader a round trip per 128 KB and this server the generation, so
the figures of a synthetic run compare with each other (sizes, key orders), not with on-disk runs.

Usage: python tools/bench/synthtar.py MOUNTPOINT --shards N [--random-keys]   (runs until unmounted)
"""

from __future__ import annotations

import argparse
import errno
import stat
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import mfusepy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402

#: Generated shards kept (25.6 MB each): the prepare's scan workers read a few shards at once.
KEPT = 6


class SyntheticShards(mfusepy.Operations):
    """The FUSE operations: one flat folder of shards."""

    def __init__(self, shards: int, random_keys: bool) -> None:
        self.shards, self.random_keys = shards, random_keys
        self._kept: OrderedDict[int, np.ndarray] = OrderedDict()
        self._making: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._started = time.time()

    def _shard(self, path: str) -> int:
        name = path.lstrip("/")
        if not (name.startswith("data-") and name.endswith(".tar") and name[5:-4].isdigit()):
            raise OSError(errno.ENOENT, path)
        i = int(name[5:-4])
        if i >= self.shards or name != scale.shard_file(i):
            raise OSError(errno.ENOENT, path)
        return i

    def _bytes(self, i: int) -> np.ndarray:
        """Shard ``i``'s bytes; made once while two readers ask for it at the same time."""
        while True:
            with self._lock:
                if i in self._kept:
                    self._kept.move_to_end(i)
                    return self._kept[i]
                event = self._making.get(i)
                if event is None:
                    event = self._making[i] = threading.Event()
                    break
            event.wait()
        try:
            data = scale.shard_bytes(i, self.random_keys)
            with self._lock:
                self._kept[i] = data
                while len(self._kept) > KEPT:
                    self._kept.popitem(last=False)
            return data
        finally:
            with self._lock:
                del self._making[i]
            event.set()

    # ----- the FUSE calls ------------------------------------------------------------------------
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2, "st_mtime": self._started}
        self._shard(path)
        return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": scale.SHARD_SIZE,
                "st_mtime": scale.MTIME, "st_ctime": scale.MTIME, "st_atime": scale.MTIME}

    def readdir(self, path: str, fh: Any) -> list[str]:
        if path != "/":
            raise OSError(errno.ENOTDIR, path)
        return [".", "..", *(scale.shard_file(i) for i in range(self.shards))]

    def open(self, path: str, flags: int) -> int:
        self._shard(path)
        return 0

    def read(self, path: str, size: int, offset: int, fh: Any) -> bytes:
        data = self._bytes(self._shard(path))
        return data[offset : offset + size].tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mountpoint")
    ap.add_argument("--shards", type=int, required=True, help="how many shards the folder holds")
    ap.add_argument("--random-keys", action="store_true", help="keys in no order (scale.py --random-keys)")
    args = ap.parse_args()
    ops = SyntheticShards(args.shards, args.random_keys)
    mfusepy.FUSE(ops, args.mountpoint, foreground=True, ro=True, nothreads=False)


if __name__ == "__main__":
    main()

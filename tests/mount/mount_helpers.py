"""Helpers for the FUSE mount tests: the FUSE check, a dataset with awkward names, small tools.

The tests really mount (mfusepy on libfuse3). They skip, saying why, only when FUSE cannot work
here (no /dev/fuse, no fusermount3, no libfuse3); under CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import shardstore
from shardstore.keys import split_name

MTIME0 = 1_600_000_000


def fuse_problem() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as e:
        return f"/dev/fuse cannot be opened: {e}"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing: apt-get install fuse3 (`make system-deps`)"
    from shardstore.mount.process import _fuse_library

    try:
        _fuse_library()
    except shardstore.ShardstoreError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class Member:
    """One regular member of a shard as ``tarfile`` wrote it."""

    name: str
    shard: str
    data: bytes
    mtime: int

    @property
    def key(self) -> str:
        return split_name(self.name)[0]  # type: ignore[index]

    @property
    def part(self) -> str:
        return split_name(self.name)[1]  # type: ignore[index]


@dataclass
class MountData:
    path: Path
    members: list[Member]
    splits: dict[str, list[str]]  # split -> shard names

    def split_of(self, shard: str) -> str:
        return next(s for s, shards in self.splits.items() if shard in shards)

    def folders(self, layout: str) -> set[str]:
        """Every folder path (relative, no trailing slash) the layout shows under a view root."""
        out = set()
        for m in self.members:
            rel = m.name if layout == "flat" else f"{m.key}/{m.part}"
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out

    def path_of(self, m: Member, layout: str) -> str:
        return m.name if layout == "flat" else f"{m.key}/{m.part}"


def _write_shard(path: Path, fmt: int, members: list[tuple[str, bytes]], mtime: int) -> list[tuple[str, bytes, int]]:
    out = []
    with tarfile.open(path, "w", format=fmt) as tar:
        for i, (name, data) in enumerate(members):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = mtime + i
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
            out.append((name, data, mtime + i))
    return out


def build_dataset(root: Path) -> MountData:
    """Three shards: nested keys (GNU format, a 120-char key), PAX long and non-ASCII names with
    a 3 MB part, and a dotted folder with multi-dot parts; prepared with a 2/1 train/val split."""
    rng = random.Random(7)
    long_dir = "deep/" + "d" * 110
    shards: dict[str, tuple[int, list[tuple[str, bytes]]]] = {
        "shards/part-000000.tar": (tarfile.GNU_FORMAT, [
            *(item for k in ("img/cat/000", "img/cat/001", "img/dog/000", "top0", f"{long_dir}/k" + "x" * 120)
              for item in ((f"{k}.jpg", rng.randbytes(rng.randint(100, 3000))), (f"{k}.txt", f"caption {k}".encode()))),
        ]),
        "shards/part-000001.tar": (tarfile.PAX_FORMAT, [
            ("ünïcode/straße-01.txt", "grüße".encode()),
            ("ünïcode/straße-01.json", b'{"a": 1}'),
            ("pax/" + "p" * 150 + "/leaf.bin", rng.randbytes(3 * 1024 * 1024 + 17)),
            ("pax/" + "p" * 150 + "/leaf.txt", b"leaf"),
            ("big/blob.bin", rng.randbytes(5 * 1024 * 1024 + 3)),
        ]),
        "shards/part-000002.tar": (tarfile.USTAR_FORMAT, [
            ("x.y/z.seg.png", rng.randbytes(700)),
            ("x.y/z.txt", b"z"),
            ("plain1.txt", b""),
            ("plain1.cls", b"3"),
            ("plain2.txt", b"two"),
        ]),
    }
    members = []
    for i, (name, (fmt, items)) in enumerate(shards.items()):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for mname, data, mtime in _write_shard(path, fmt, items, MTIME0 + 1000 * i):
            members.append(Member(mname, name, data, mtime))
    shardstore.prepare(
        str(root), split_parts=["train:shards/part-00000[01]", "val:shards/part-000002"], num_workers=1, progress=False
    )
    return MountData(root, members, {"train": list(shards)[:2], "val": list(shards)[2:]})


def mount_rss(pid: int) -> int:
    """Resident memory of a process in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def sh(cmd: str, **kw: Any) -> str:
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw).stdout

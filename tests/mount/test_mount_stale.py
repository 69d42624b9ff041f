"""The mount against stale shards and corrupt index values (issue 9, points 5-7): EIO, never
another member's bytes and never a short read reported as success; a repeated part reads as its
last copy; a name with a NUL in the index lists no phantom entries."""

from __future__ import annotations

import errno
import io
import os
import sqlite3
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from mount_helpers import sh

import shardstore
from shardstore.mount import MountHandle

KEYS = [f"k{i}" for i in range(6)]


def payload(key: str, part: str) -> bytes:
    return (f"{key}.{part}:".encode() * 60)[:300]


def write_shard(path: Path, keys: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for key in keys:
            for part in ("bin", "txt"):
                info = tarfile.TarInfo(f"{key}.{part}")
                data = payload(key, part)
                info.size, info.mtime = len(data), 1_700_000_000
                tar.addfile(info, io.BytesIO(data))


def make(root: Path) -> Path:
    write_shard(root / "parts/a.tar", KEYS)
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    return root


def read_errno(path: Path) -> int | bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        return e.errno


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-changed", "mtime-kept"])
@pytest.mark.parametrize("pure_python", [False, True], ids=["c", "python"])
def test_same_size_rewrite_is_eio_never_other_bytes(
    fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle], keep_mtime: bool, pure_python: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if pure_python:
        monkeypatch.setenv("SHARDSTORE_PURE_PYTHON", "1")
    root = make(tmp_path / "ds")
    shard = root / "parts/a.tar"
    st = shard.stat()
    write_shard(tmp_path / "new.tar", KEYS[1:] + KEYS[:1])  # same members and sizes, samples rotated
    os.replace(tmp_path / "new.tar", shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + (0 if keep_mtime else 1_000_000)))
    mp = Path(mounted(root).mountpoint)
    for name in ("k0.bin", "k3.txt", ".by-shard/parts/a.tar/k2.bin"):
        assert read_errno(mp / name) == errno.EIO
    assert sorted(os.listdir(mp / ".by-split/train")) == sorted(f"{k}.{p}" for k in KEYS for p in ("bin", "txt"))


@pytest.mark.parametrize(
    "statement",
    [
        "content_byte_offset=1000000000000",
        "content_byte_offset=-700",
        "content_byte_size=1000000",  # runs past the shard's end: was a short read reported as success
        "content_byte_size=-3",
        "tar_file_id=-1",
    ],
)
def test_corrupt_member_rows_are_eio(
    fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle], statement: str
) -> None:
    root = make(tmp_path / "ds")
    db = sqlite3.connect(root / ".nv-meta/index.sqlite")
    with db:
        db.execute(f"UPDATE sample_parts SET {statement} WHERE sample_index=2 AND part_name='txt'")
        if statement.startswith("tar_file_id"):
            db.execute("UPDATE samples SET tar_file_id=-1 WHERE sample_key='k2'")
    db.close()
    handle = mounted(root)
    mp = Path(handle.mountpoint)
    assert read_errno(mp / "k2.txt") == errno.EIO
    assert (mp / "k1.txt").read_bytes() == payload("k1", "txt")  # the rest reads on
    log = Path(handle.log_path).read_text()  # type: ignore[arg-type]
    assert "IndexCorruptError" in log and "k2.txt" in log


def test_repeated_part_is_its_last_copy_and_nul_names_list_nothing(
    fuse: None, tmp_path: Path, mounted: Callable[..., MountHandle]
) -> None:
    root = tmp_path / "ds"
    (root / "s").mkdir(parents=True)
    with tarfile.open(root / "s/a.tar", "w") as tar:
        for name, data in [("a.txt", b"first"), ("a.txt", b"second!"), ("b.txt", b"bee"), ("c.txt", b"sea")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    # An index may hold a key with a NUL in it (Energon keeps a PAX path as it is): listed, it
    # would show as the pieces around the NUL ("x" and "y.txt"), phantoms that do not open.
    db = sqlite3.connect(root / ".nv-meta/index.sqlite")
    with db:
        db.execute("UPDATE samples SET sample_key='x' || char(0) || 'y' WHERE sample_key='c'")
    db.close()
    for layout in ("flat", "samples"):
        mp = Path(mounted(root, layout).mountpoint)
        found = sh("find . -path './.by-split' -prune -o -print", cwd=mp).split()
        want = ["./a.txt", "./b.txt"] if layout == "flat" else ["./a", "./a/txt", "./b", "./b/txt"]
        shard_view = [f"./.by-shard/s/a.tar/{n[2:]}" for n in want]
        assert sorted(found) == sorted([".", "./.by-shard", "./.by-shard/s", "./.by-shard/s/a.tar", *want, *shard_view])
        assert (mp / ("a.txt" if layout == "flat" else "a/txt")).read_bytes() == b"second!"

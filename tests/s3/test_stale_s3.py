"""A shard object rewritten with the same size on S3 (issue 9, point 5): its ETag changes, and every
read path raises ``StaleIndexError`` naming the object, never another member's bytes. A dataset
prepared locally and uploaded keeps reading (mtimes are not compared across storages)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.errors import StaleIndexError
from shardstore.filestores import IndexedTarStore

pytestmark = pytest.mark.s3
KEYS = [f"k{i}" for i in range(4)]


def payload(key: str, part: str) -> bytes:
    return (f"{key}.{part}:".encode() * 60)[:300]


def shard_bytes(keys: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key in keys:
            for part in ("bin", "txt"):
                info = tarfile.TarInfo(f"{key}.{part}")
                info.size, info.mtime = 300, 1_700_000_000
                tar.addfile(info, io.BytesIO(payload(key, part)))
    return buf.getvalue()


def test_same_size_rewrite_on_s3_is_stale_everywhere(
    tmp_path: Path, s3_url: Callable[[str], str], upload: Callable[..., str],
    storage_options: dict[str, Any], s3fs_client: Any,
) -> None:
    local = tmp_path / "ds"
    (local / "parts").mkdir(parents=True)
    (local / "parts/a.tar").write_bytes(shard_bytes(KEYS))
    shardstore.prepare(str(local), split_ratio="1,0,0", num_workers=1)
    url = upload(local, s3_url("uploaded"))  # prepared locally, uploaded: reads (no mtime compared)
    assert shardstore.open(url, storage_options=storage_options).read_file("k2.txt") == payload("k2", "txt")

    (tmp_path / "s3ds").mkdir()
    remote = upload(tmp_path / "s3ds", s3_url("remote"))
    s3fs_client.pipe(f"{remote}/parts/a.tar", shard_bytes(KEYS))
    shardstore.prepare(remote, split_ratio="1,0,0", num_workers=1, storage_options=storage_options)
    assert shardstore.open(remote, storage_options=storage_options).get("k1")["txt"] == payload("k1", "txt")
    s3fs_client.pipe(f"{remote}/parts/a.tar", shard_bytes(KEYS[1:] + KEYS[:1]))  # same size, samples rotated
    reads = [
        lambda ds: ds[0],
        lambda ds: ds.get("k0"),
        lambda ds: ds.get_many([1, "k2"]),
        lambda ds: ds.read_file("k0.bin"),
        lambda ds: IndexedTarStore(ds)["k3.txt"],
    ]
    for read in reads:
        with pytest.raises(StaleIndexError, match="ETag") as info:
            read(shardstore.open(remote, split=None, storage_options=storage_options))
        assert "parts/a.tar" in str(info.value)

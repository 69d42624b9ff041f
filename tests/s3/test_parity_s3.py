"""Energon 7.4 parity on a real local S3 server: ``prepare --tmp-path`` builds the remote dataset's index in
the given local folder; JSONL files are prepared and read in a bucket (range reads)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.errors import StorageError

pytestmark = pytest.mark.s3


def test_tmp_path_builds_the_index_there(
    s3_server: Any, s3_url: Callable[[str], str], make_shards: Callable[..., Path], upload: Any, tmp_path: Path
) -> None:
    url = upload(make_shards(shards=2, samples=5), s3_url("ds"))
    opts = s3_server.storage_options()
    scratch = tmp_path / "scratch"
    seen: list[list[str]] = []

    def chooser(parts: list[str]) -> None:  # asked after the index is complete, before upload
        seen.extend(sorted(os.listdir(d)) for d in scratch.iterdir())

    shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0", choose_dataset_yaml=chooser, tmp_path=str(scratch))
    assert len(seen) == 1 and "index.sqlite" in seen[0]
    assert list(scratch.iterdir()) == []  # removed after the upload
    assert len(shardstore.open(url, storage_options=opts)) == 10
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError):
        shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0", force_overwrite=True, tmp_path=str(blocker))


def test_jsonl_on_s3(s3_server: Any, s3_url: Callable[[str], str], tmp_path: Path, upload: Any) -> None:
    local = tmp_path / "local"
    local.mkdir()
    rows = [{"i": i, "pad": "z" * (i * 37 % 300)} for i in range(300)]
    (local / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    url = upload(local, s3_url("j")) + "/data.jsonl"
    opts = s3_server.storage_options()
    shardstore.prepare(url, storage_options=opts)
    shardstore.prepare(str(local / "data.jsonl"))
    fs = s3_server.filesystem()
    assert fs.cat(url.split("://", 1)[1] + ".idx") == (local / "data.jsonl.idx").read_bytes()
    ds = shardstore.open(url, storage_options=opts, decode=True)
    assert len(ds) == 300 and ds[123]["json"] == rows[123]
    assert [s["json"] for s in ds.get_many([299, 0, 5])] == [rows[299], rows[0], rows[5]]
    assert sorted(s["__index__"] for s in ds.iter(shuffle=True, seed=3)) == list(range(300))

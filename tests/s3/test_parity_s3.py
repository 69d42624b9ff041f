"""Energon 7.4 parity on a real local S3 server: ``prepare --tmp-path`` builds the remote dataset's index in
the given local folder; JSONL files are prepared and read in a bucket (range reads)."""

from __future__ import annotations

import json
import os
import sys
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


def test_media_metadata_on_s3(s3_server: Any, s3_url: Callable[[str], str], tmp_path: Path, upload: Any) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from media_samples import image, video, write_shards

    from shardstore.filestores import FolderStore
    from shardstore.media_prepare import prepare_media

    opts = s3_server.storage_options()
    items = [("a.jpg", image("JPEG")), ("a.txt", b"x"), ("b.mp4", video(True)), ("c.png", image("PNG", "RGBA"))]
    url = upload(write_shards(tmp_path / "ds", items, shards=1), s3_url("ds"))
    report = shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0", media_metadata_by_extension=True)
    assert report.media == {"av": 1, "image": 2}
    ds = shardstore.open(url, storage_options=opts)
    assert ds.media_metadata("b.mp4")["audio_num_samples"] == 8192 and ds.media_metadata("c.png")["mode"] == "RGBA"
    folder = tmp_path / "folder"
    (folder / "img").mkdir(parents=True)
    (folder / "img" / "x.jpg").write_bytes(image("JPEG", "L"))
    (folder / "y.mp4").write_bytes(video(False))
    furl = upload(folder, s3_url("media"))
    assert prepare_media(furl, storage_options=opts, media_metadata_by_extension=True, tmp_path=str(tmp_path / "t")).media == {"av": 1, "image": 1}
    store = FolderStore(f"filesystem://{furl}", storage_options=opts)
    assert store.media_metadata("img/x.jpg")["mode"] == "L" and store.media_metadata("y.mp4")["video_num_frames"] == 12

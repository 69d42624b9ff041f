"""Issue 9 point 1 on S3: a dataset's own files cannot name keys outside its prefix (``../``,
another bucket, an absolute key), though the keys exist and a plain join would reach them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from escape_helpers import SECRET, craft, make_ds, make_victim

import shardstore
from shardstore.errors import PathEscapeError
from shardstore.storage import ByteRange, open_storage


@pytest.mark.parametrize("evil", ["../outside/secret.tar", "parts/../../outside/secret.tar", "/shardstore-test/x.tar",
                                  "s3://shardstore-test/outside/secret.tar"])
def test_s3_dataset_cannot_name_keys_outside_its_prefix(
    tmp_path: Path, s3_url: Callable[[str], str], upload: Callable[[Path, str], str],
    storage_options: dict[str, Any], evil: str,
) -> None:
    make_victim(tmp_path / "outside")
    ds = make_ds(tmp_path / "ds")
    craft(ds, evil)
    upload(tmp_path / "outside", s3_url("outside"))
    url = upload(ds, s3_url("ds"))
    storage = open_storage(url, storage_options)
    assert json.loads(storage.read(".nv-meta/.info.json"))["shard_counts"][evil] == 3
    with pytest.raises(PathEscapeError):
        shardstore.open(url, storage_options=storage_options)
    with pytest.raises(PathEscapeError):  # the storage itself, whoever calls it
        storage.read_at("../outside/secret.tar", 0, 512)
    with pytest.raises(PathEscapeError):
        storage.read_ranges([("../outside/secret.tar", ByteRange(0, 10))])
    outside = open_storage(s3_url("outside"), storage_options)
    assert SECRET in outside.read("secret.tar")  # the key is there: only the rule kept it out

"""Lookups by member name through the name table on S3: the table is built from the downloaded index in
the local cache (nothing is written to the bucket), and forked workers read through it."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from make_polylithic import media_bytes, write_aux_tar

import shardstore
from shardstore.filestores import IndexedTarStore
from shardstore.index import names as name_tables

pytestmark = pytest.mark.s3


def _child(store: IndexedTarStore, names: list[str], out: multiprocessing.Queue[list[bytes]]) -> None:
    out.put([store[n] for n in names])


def test_name_table_for_a_dataset_on_s3(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    s3_url: Callable[[str], str],
    upload: Callable[..., str],
    storage_options: dict[str, Any],
    s3fs_client: Any,
) -> None:
    local = tmp_path / "aux"
    write_aux_tar(str(local), 24, shards=2)
    shardstore.prepare(str(local), split_ratio="1,0,0", num_workers=1)
    url = upload(local, s3_url("aux"))
    before = sorted(s3fs_client.find(url))
    monkeypatch.setenv("SHARDSTORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "0")
    names = [f"images/{i:05d}.jpg" for i in range(24)]
    store = IndexedTarStore(url, storage_options=storage_options)
    assert [store[n] for n in names] == [media_bytes("image", i) for i in range(24)]
    assert store.get_many(names[::-1]) == [media_bytes("image", i) for i in range(24)][::-1]
    assert "images/00024.jpg" not in store and store.get("images/00001.png") is None
    ds = shardstore.open(url, split=None, storage_options=storage_options)
    assert ds.read_file(names[5]) == media_bytes("image", 5)
    assert store.dataset.index._find is not None and ds.index._find is not None
    assert len(list((tmp_path / "cache" / "names").glob(f"*.v{name_tables._VERSION}"))) == 1  # one table, shared by both
    assert sorted(s3fs_client.find(url)) == before  # nothing written to the bucket

    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[list[bytes]] = ctx.Queue()
    proc = ctx.Process(target=_child, args=(store, names[::3], out))
    proc.start()
    assert out.get(timeout=120) == [media_bytes("image", i) for i in range(0, 24, 3)]
    proc.join(60)
    assert proc.exitcode == 0

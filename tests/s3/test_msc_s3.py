"""``msc://PROFILE/path`` URLs (NVIDIA's Multi-Storage Client, which megatron-energon uses for object
stores) with an MSC config whose profile points at the local S3 test server, through a counting proxy:
prepare, random reads (range requests, never whole shards), a metadataset naming ``msc://`` paths with an
``msc://`` aux folder, and the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main

pytestmark = pytest.mark.s3

msc = pytest.importorskip("multistorageclient", reason="multi-storage-client is not installed (it comes with megatron-energon)")

import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402


def test_msc_urls(s3_server: Any, s3_url: Callable[[str], str], make_shards: Callable[..., Path], upload: Any,
                  tmp_path: Path, msc_profile: Callable[[str, dict[str, Any]], str]) -> None:
    s3 = upload(make_shards(shards=3, samples=20), s3_url("ds"))
    folder = tmp_path / "media"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "a.txt").write_bytes(b"aux bytes")
    upload(folder, s3_url("media"))
    prefix = s3.split("shardstore-test/", 1)[1].rsplit("/", 1)[0]
    with DelayProxy(s3_server.endpoint) as proxy:
        profile = msc_profile(proxy.endpoint, s3_server.storage_options())
        url = f"msc://{profile}/{prefix}/ds"
        report = shardstore.prepare(url, split_ratio="2,1,0", sample_type="CrudeWebdataset")
        assert (report.shards, report.samples) == (3, 60)
        ds = shardstore.open(url, split=None)
        proxy.reset_counts()
        local = shardstore.open(s3, split=None, storage_options=s3_server.storage_options())
        assert ds[37] == local[37] and ds.get(ds[5]["__key__"])["txt"] == local[5]["txt"]
        tars = [r for r in proxy.requests if r.method == "GET" and r.path.endswith(".tar")]
        assert tars and all(r.range is not None for r in tars)  # range reads, never a whole shard
        meta = tmp_path / "meta.yaml"
        meta.write_text(
            "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    path: "
            f"{url}\n    aux:\n      media: filesystem://msc://{profile}/{prefix}/media\n"
        )
        md = shardstore.open_metadataset(str(meta))
        first = next(iter(md.iter(repeat=False)))
        assert first.aux["media"]["images/a.txt"] == b"aux bytes"
        info = CliRunner().invoke(main, ["info", url, "--json"])
        assert info.exit_code == 0, info.output
        assert json.loads(info.stdout)["samples"] == 60

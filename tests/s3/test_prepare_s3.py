"""``prepare`` on S3: the same shards prepared locally and in a bucket give the same index.

Requests are counted by a real HTTP proxy in front of the server (tools/delayproxy.py), so
"large sequential reads, not one request per header" is measured, not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.storage import ByteRange, open_storage
from shardstore.tarscan import scan_storage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]
OPTIONS: dict[str, Any] = {
    "split_ratio": "2,1,1",
    "sample_type": "CaptioningSample",
    "field_map": {"image": "jpg", "caption": "txt"},
    "num_workers": 2,
}


def _rows(db_path: str) -> dict[str, list[tuple[Any, ...]]]:
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return {
            "samples": con.execute(
                "SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size FROM samples ORDER BY 1, 3"
            ).fetchall(),
            "sample_parts": con.execute(
                "SELECT tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size "
                "FROM sample_parts ORDER BY 1, 2, 3"
            ).fetchall(),
        }
    finally:
        con.close()


def _meta(storage_url: str, storage_options: dict[str, Any] | None, tmp: Path) -> dict[str, Any]:
    """Everything prepare wrote that must not depend on where the shards live."""
    storage = open_storage(storage_url, storage_options)
    out: dict[str, Any] = {}
    for name in (".info.json", "split.yaml", "dataset.yaml"):
        out[name] = storage.read(f".nv-meta/{name}")
    db = tmp / f"index-{abs(hash(storage_url))}.sqlite"
    db.write_bytes(storage.read(".nv-meta/index.sqlite"))
    out.update(_rows(str(db)))
    out["tar.idx"] = {name: storage.read(name) for name in storage.list((".tar.idx",))}
    return out


@pytest.fixture
def shards(make_shards: Callable[..., Path]) -> Path:
    return make_shards(shards=4, samples=30)


def test_prepare_on_s3_matches_local(
    shards: Path, tmp_path: Path, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    url = upload(shards, s3_url("ds"))
    local = tmp_path / "local-copy"
    shutil.copytree(shards, local)
    local_report = shardstore.prepare(str(local), **OPTIONS)
    with DelayProxy(s3_server.endpoint) as proxy:
        report = shardstore.prepare(url, storage_options=s3_server.storage_options(proxy.endpoint), **OPTIONS)
        requests = proxy.requests
    assert (report.shards, report.samples, report.parts) == (local_report.shards, local_report.samples, local_report.parts)
    assert report.splits == local_report.splits
    on_s3 = _meta(url, s3_server.storage_options(), tmp_path)
    on_disk = _meta(str(local), None, tmp_path)
    assert on_s3.keys() == on_disk.keys()
    for key in on_disk:
        assert on_s3[key] == on_disk[key], key
    assert len(on_s3["tar.idx"]) == 4 and len(on_s3["samples"]) == 120 and len(on_s3["sample_parts"]) == 360

    # Header walks read whole blocks: one GET per shard here (each is far below the 8 MiB block),
    # never one per header (360 members); then one merged read per shard of the bytes its
    # fingerprint hashes (shardprint: what tells a copy from a rewrite later).
    shard_gets = sorted((r for r in requests if r.method == "GET" and r.path.endswith(".tar")), key=lambda r: r.time)
    assert len(shard_gets) == 8, shard_gets
    assert sorted(r.path for r in shard_gets[:4]) == sorted({r.path for r in shard_gets})
    assert all(r.range and r.range.startswith("bytes=0-") for r in shard_gets[:4])
    puts = [r.path.rsplit("/", 1)[-1] for r in requests if r.method == "PUT"]
    assert sorted(p for p in puts if p.endswith(".tar.idx")) == sorted(n.rsplit("/", 1)[-1] for n in on_s3["tar.idx"])
    assert {"index.sqlite", ".info.json", "split.yaml", "index.uuid"} <= set(puts)
    assert puts.index("index.uuid") > max(puts.index(n) for n in ("index.sqlite", ".info.json", "split.yaml"))
    assert len(requests) < 60, [(r.method, r.path) for r in requests]


def test_header_walk_request_count(s3_server: Any, s3_url: Callable[[str], str], make_shards: Callable[..., Path], upload: Any) -> None:
    """A shard of ~1.4 MB read through 64 KiB blocks: about size/64K GETs, whatever the member count."""
    folder = make_shards(shards=1, samples=120, name="one")
    url = upload(folder, s3_url("one"))
    shard = "parts/data-000000.tar"
    size = os.path.getsize(folder / shard)
    with DelayProxy(s3_server.endpoint) as proxy:
        storage = open_storage(url, {**s3_server.storage_options(proxy.endpoint), "skip_instance_cache": True})
        members = list(scan_storage(storage, shard, block_size=64 * 1024))
        gets = [r for r in proxy.requests if r.method == "GET"]
    assert len(members) == 360
    blocks = -(-size // (64 * 1024))
    assert len(gets) <= blocks, (len(gets), blocks)  # each byte fetched at most once
    lengths = [int(r.range.split("-")[1]) - int(r.range.split("=")[1].split("-")[0]) + 1 for r in gets if r.range]
    assert len(lengths) == len(gets) and all(n == 64 * 1024 for n in lengths[:-1])
    assert len(gets) < len(members) / 10
    local = list(scan_storage(open_storage(str(folder)), shard))
    assert [(m.name, m.data_offset, m.size) for m in members] == [(m.name, m.data_offset, m.size) for m in local]


def test_prepare_on_s3_runs_shards_in_parallel(
    s3_server: Any, s3_url: Callable[[str], str], make_shards: Callable[..., Path], upload: Any
) -> None:
    """Through 30 ms of latency each way, the 8 shards' header walks start together, not one after another."""
    folder = make_shards(shards=8, samples=5, name="par")
    url = upload(folder, s3_url("par"))
    with DelayProxy(s3_server.endpoint, delay_ms=30) as proxy:
        opts = {**s3_server.storage_options(proxy.endpoint), "skip_instance_cache": True}
        shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0")  # default workers
        gets = [r for r in proxy.requests if r.method == "GET" and r.path.endswith(".tar")]
    assert len(gets) == 16  # a header walk and a fingerprint read (shardprint) per shard
    gets = sorted(gets, key=lambda r: r.time)[:8]  # the walks come first
    assert len({r.path for r in gets}) == 8
    # each walk costs >= 3 round trips of >= 60 ms (2 HEADs, the GET): in sequence the 8 GETs
    # would arrive over >= 7 * 0.18 s
    spread = max(r.time for r in gets) - min(r.time for r in gets)
    assert spread < 0.6, spread


def test_prepare_twice_needs_force_overwrite(
    shards: Path, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    url = upload(shards, s3_url("again"))
    opts = s3_server.storage_options()
    first = shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0", num_workers=1)
    with pytest.raises(shardstore.ShardstoreError, match="already prepared"):
        shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0")
    second = shardstore.prepare(url, storage_options=opts, split_ratio="1,0,0", force_overwrite=True)
    assert second.uuid != first.uuid
    assert open_storage(url, opts).read(".nv-meta/index.uuid").decode() == second.uuid
    ds = shardstore.open(url, storage_options=opts)
    assert len(ds) == 120


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardstore.cli", *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def test_cli_prepare_with_storage_options_json(
    shards: Path, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    url = upload(shards, s3_url("cli"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    opts = json.dumps(s3_server.storage_options())
    res = _cli(["prepare", url, "--split-ratio", "8,1,1", "--non-interactive", "--storage-options", opts, "--json"], env)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["samples"] == 120 and report["shards"] == 4
    # a wrong endpoint: a clear error naming the URL, not a traceback (AWS_MAX_ATTEMPTS=1: fail fast)
    bad = {**env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
           "AWS_MAX_ATTEMPTS": "1"}
    t0 = time.perf_counter()
    res = _cli(["prepare", s3_url("nothing-here"), "--split-ratio", "8,1,1", "--non-interactive"], bad)
    assert res.returncode == 1
    assert res.stderr.startswith("shardstore: error:") and "Traceback" not in res.stderr, res.stderr
    assert "nothing-here" in res.stderr and "127.0.0.1:9" in res.stderr
    assert time.perf_counter() - t0 < 30  # shardstore does not retry an endpoint nobody answers at


def test_cli_prepare_with_environment_variables(
    shards: Path, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    """AWS_ENDPOINT_URL and the key variables are all a user needs: no --storage-options."""
    url = upload(shards, s3_url("env"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **s3_server.env()}
    res = _cli(["prepare", url, "--split-parts", "train:parts/data-00000[0-2].tar", "--split-parts",
                "val:parts/data-000003.tar", "--non-interactive", "--json"], env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["splits"] == {"train": {"shards": 3, "samples": 90}, "val": {"shards": 1, "samples": 30}}
    storage = open_storage(url, s3_server.storage_options())
    assert storage.read_range("parts/data-000003.tar.idx", ByteRange(0, 8)) == (0).to_bytes(8, "little")

"""Many readers of one S3 dataset on one node: 16 processes that open it at the same instant
fetch ``index.sqlite`` and each ``.tar.idx`` from the bucket once in all (the cache keyed by
``index.uuid`` under ``$SHARDSTORE_CACHE``, an flock per entry), all read the right samples, and
none writes to the bucket. Requests are counted by a real HTTP proxy (tools/delayproxy.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402

pytestmark = pytest.mark.s3
READERS = 16

READER = """
import json, sys, time
import shardstore
url, opts, start = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
ds = shardstore.open(url, storage_options=opts)
keys = [ds[i]["__key__"] for i in range(0, len(ds), 10)]  # positions: .info.json and every .tar.idx
found = [ds.get(k)["__key__"] for k in keys]  # keys: index.sqlite
print(json.dumps({"keys": keys, "found": found}))
"""


def test_sixteen_readers_fetch_the_index_once(
    make_shards: Callable[..., Path], tmp_path: Path, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    ds = make_shards(shards=4, samples=20)
    shardstore.prepare(str(ds), split_ratio="1,0,0", num_workers=1)
    url = upload(ds, s3_url("ds"))
    env = {**os.environ, "SHARDSTORE_CACHE": str(tmp_path / "cache")}
    with DelayProxy(s3_server.endpoint, delay_ms=10) as proxy:
        opts = json.dumps(s3_server.storage_options(proxy.endpoint))
        start = time.time() + 3  # every process imported and waiting when the clock strikes
        procs = [
            subprocess.Popen([sys.executable, "-c", READER, url, opts, str(start)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(READERS)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        requests = list(proxy.requests)
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        got = json.loads(out)
        assert got["found"] == got["keys"] and len(got["keys"]) == 8
    # Once per node: one GET per file (without the per-entry lock each of the 16 processes fetched
    # each file). At most one more where a GET was retried (a read timeout on a loaded machine).
    gets = [r.path.rsplit("/", 1)[-1] for r in requests if r.method == "GET"]
    for name in ["index.sqlite"] + [f"data-{i:06d}.tar.idx" for i in range(4)]:
        assert 1 <= gets.count(name) <= 2, (name, gets)
    assert not [r for r in requests if r.method in ("PUT", "POST", "DELETE")]
    entries = [p for p in (tmp_path / "cache").iterdir() if p.is_dir() and p.name != "names"]
    assert len(entries) == 1  # one generation of one dataset
    uuid = (ds / ".nv-meta/index.uuid").read_text().strip()
    assert uuid and sorted(f.name for f in entries[0].iterdir() if not f.name.endswith(".lock")) == sorted(
        [".nv-meta%2Findex.sqlite"] + [f"parts%2Fdata-{i:06d}.tar.idx" for i in range(4)]
    )

"""``prepare`` on a real Dask cluster (``distributed.LocalCluster``: a scheduler and two worker
processes): a local and an S3 dataset give exactly what the default local workers give (index
rows, ``.info.json``, ``split.yaml``, every ``.tar.idx``), and the CLI's ``--executor dask``
reaches a scheduler by address."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.storage import open_storage

distributed = pytest.importorskip("distributed", reason="Dask's distributed is not installed (extra dask)")

BIN = Path(sys.executable).with_name("shardstore")
OPTIONS: dict[str, Any] = {"split_ratio": "2,1,1", "sample_type": "CrudeWebdataset", "num_workers": 2}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Scheduler and 2 worker processes of 1 thread each, for this module."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    ) as c:
        yield c


@pytest.fixture
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def executor(client: Any) -> Any:
    return client.get_executor()


def _worker_datasets() -> int:
    from shardstore import executors

    return executors._cached_storage.cache_info().misses


def datasets_opened_by_workers(client: Any) -> int:
    """How many times the cluster's workers opened a dataset's storage (proof the scans ran there)."""
    return sum(client.run(_worker_datasets).values())


def everything(url: str, storage_options: dict[str, Any] | None, tmp: Path) -> dict[str, Any]:
    """What prepare wrote that must not depend on who scanned (index rows with their rowids)."""
    import sqlite3

    storage = open_storage(url, storage_options)
    out: dict[str, Any] = {n: storage.read(f".nv-meta/{n}") for n in (".info.json", "split.yaml", "dataset.yaml")}
    db = tmp / f"index-{abs(hash(url))}.sqlite"
    db.write_bytes(storage.read(".nv-meta/index.sqlite"))
    con = sqlite3.connect(db)
    for table in ("samples", "sample_parts"):
        out[table] = con.execute(f"SELECT rowid, * FROM {table} ORDER BY rowid").fetchall()
    out["schema"] = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    out["tar.idx"] = {n: storage.read(n) for n in storage.list((".tar.idx",))}
    return out


@pytest.fixture
def shards(make_shards: Callable[..., Path]) -> Path:
    return make_shards(shards=5, samples=24)


def test_dask_prepare_of_a_local_dataset_equals_the_local_workers(
    shards: Path, tmp_path: Path, client: Any, executor: Any
) -> None:
    other = tmp_path / "by-dask"
    shutil.copytree(shards, other)
    expected = shardstore.prepare(str(shards), **OPTIONS)
    before = datasets_opened_by_workers(client)
    report = shardstore.prepare(str(other), executor=executor, **OPTIONS)
    assert datasets_opened_by_workers(client) > before
    assert (report.shards, report.samples, report.parts, report.scanned) == (5, 120, expected.parts, 5)
    want, got = everything(str(shards), None, tmp_path), everything(str(other), None, tmp_path)
    assert len(want["tar.idx"]) == 5 and len(want["samples"]) == 120
    assert got == want


@pytest.mark.s3
def test_dask_prepare_of_an_s3_dataset_equals_the_local_prepare(
    shards: Path, tmp_path: Path, executor: Any, s3_server: Any, s3_url: Callable[[str], str], upload: Any
) -> None:
    url = upload(shards, s3_url("ds"))
    shardstore.prepare(str(shards), **OPTIONS)
    report = shardstore.prepare(url, executor=executor, storage_options=s3_server.storage_options(), **OPTIONS)
    assert report.scanned == 5
    assert everything(url, s3_server.storage_options(), tmp_path) == everything(str(shards), None, tmp_path)


def test_cli_dask_scheduler(shards: Path, tmp_path: Path, cluster: Any) -> None:
    res = subprocess.run(
        [str(BIN), "prepare", str(shards), "--split-ratio", "1,0,0", "--non-interactive", "--json",
         "--dask-scheduler", cluster.scheduler_address],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["samples"] == 120
    bad = subprocess.run(
        [str(BIN), "prepare", str(shards), "--split-ratio", "1,0,0", "--non-interactive", "--force-overwrite",
         "--executor", "local", "--dask-scheduler", cluster.scheduler_address],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "--dask-scheduler needs --executor dask" in bad.stderr

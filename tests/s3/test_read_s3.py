"""Reading a prepared dataset through S3: every sample, ``get_many``, and what goes wrong.

The dataset is prepared on the S3 test server; expectations come from reading the local tar
files with Python's ``tarfile``. Faults are real: objects replaced or deleted through another
client, and a proxy (tools/delayproxy.py) that resets connections or answers 503.
"""

from __future__ import annotations

import gc
import itertools
import os
import pickle
import random
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.errors import DatasetNotPreparedError, StaleIndexError, StorageError
from shardstore.storage import open_storage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from delayproxy import DelayProxy  # noqa: E402
from make_dataset import make_dataset  # noqa: E402

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


def _tar_samples(folder: Path) -> list[tuple[str, str, dict[str, bytes]]]:
    """(shard, key, {part: bytes}) of every sample, in shard order then tar order."""
    out: list[tuple[str, str, dict[str, bytes]]] = []
    for shard in sorted(folder.rglob("*.tar")):
        rel = shard.relative_to(folder).as_posix()
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                key, part = m.name.split(".", 1)
                data = tar.extractfile(m).read()  # type: ignore[union-attr]
                if out and out[-1][0] == rel and out[-1][1] == key:
                    out[-1][2][part] = data
                else:
                    out.append((rel, key, {part: data}))
    return out


def _parts(sample: Any) -> dict[str, bytes]:
    """A sample's parts, without its ``__key__``-style entries."""
    return {k: v for k, v in sample.items() if not k.startswith("__")}


class Prepared:
    """A dataset prepared on S3, its local original, and the server."""

    def __init__(self, server: Any, local: Path, url: str) -> None:
        self.server, self.local, self.url = server, local, url
        self.options = server.storage_options()
        self.expected = _tar_samples(local)

    def open(self, endpoint: str | None = None, **kw: Any) -> shardstore.Dataset:
        opts = {**self.server.storage_options(endpoint), **kw.pop("options", {})}
        return shardstore.open(self.url, split=kw.pop("split", None), storage_options=opts, **kw)


def _prepare(
    server: Any, tmp: Path, shards: int = 3, samples: int = 20, *, cli: bool = False, part_size: int = 0, **make: Any
) -> Prepared:
    """Shards made locally, uploaded (each object in parts of ``part_size`` bytes when given: a
    real multipart upload), then prepared in place, by the Python API or by ``shardstore prepare``
    with the server given only through the AWS_* variables (``cli=True``)."""
    local = tmp / f"src{next(_names)}"
    make_dataset(str(local), shards=shards, samples=samples, seed=7, **make)
    url = f"s3://shardstore-test/read-{next(_names)}-{time.monotonic_ns()}"
    if part_size:
        for shard in sorted(local.rglob("*.tar")):
            _put_multipart(server, f"{url}/{shard.relative_to(local).as_posix()}", shard.read_bytes(), part_size)
    else:
        server.upload(local, url)
    if cli:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **server.env()}
        res = subprocess.run([sys.executable, "-m", "shardstore.cli", "prepare", url, "--split-ratio", "2,1,0",
                              "--num-workers", "2", "--non-interactive"], capture_output=True, text=True, env=env,
                             timeout=120, cwd=ROOT)
        assert res.returncode == 0, res.stderr
    else:
        shardstore.prepare(url, storage_options=server.storage_options(), split_ratio="2,1,0", num_workers=2)
    return Prepared(server, local, url)


def _put_multipart(server: Any, url: str, data: bytes, part_size: int) -> None:
    """Upload ``data`` to ``url`` part by part (S3: every part but the last >= 5 MiB). (radosgw 16.2
    answers CompleteMultipartUpload with an empty ``<ETag>``: a HEAD tells the object's.)"""
    bucket, key = url[len("s3://"):].split("/", 1)
    client = server.client()
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, start in enumerate(range(0, len(data), part_size), 1):
        body = data[start : start + part_size]
        etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})


@pytest.fixture(scope="module")
def prepared(s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """Prepared once for the tests that only read."""
    return _prepare(s3_server, tmp_path_factory.mktemp("read-s3"))


@pytest.fixture(scope="module")
def prepared_rgw(rgw_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    """The same dataset on Ceph's radosgw, prepared with the CLI."""
    return _prepare(rgw_server, tmp_path_factory.mktemp("read-rgw"), cli=True)


@pytest.fixture
def fresh(s3_server: Any, tmp_path: Path) -> Prepared:
    """Prepared for one test that changes objects."""
    return _prepare(s3_server, tmp_path, shards=2, samples=10)


# ----- every sample, three ways ------------------------------------------------------------------------
@pytest.mark.parametrize("server", ["rclone", "rgw"])
def test_every_sample_by_position_key_and_member(server: str, request: pytest.FixtureRequest) -> None:
    prepared: Prepared = request.getfixturevalue("prepared" if server == "rclone" else "prepared_rgw")
    ds = prepared.open()
    assert len(ds) == len(prepared.expected) == 60
    for i, (shard, key, parts) in enumerate(prepared.expected):
        s = ds[i]
        assert (s["__key__"], s["__shard__"], s["__index__"]) == (key, shard, i)
        assert _parts(s) == parts
        assert ds.get(key) == s
        for part, data in parts.items():
            assert ds.read_file(f"{key}.{part}") == data
    assert ds[-1]["__key__"] == prepared.expected[-1][1]
    assert list(ds.keys()) == [key for _, key, _ in prepared.expected]


def test_splits_through_s3(prepared: Prepared) -> None:
    train, val = prepared.open(split="train"), prepared.open(split="val")
    assert len(train) + len(val) == 60 and len(train) == 40
    assert [s["__key__"] for s in train[:]] + [s["__key__"] for s in val[:]] == [k for _, k, _ in prepared.expected]


def test_get_many_in_the_order_asked(prepared: Prepared) -> None:
    ds = prepared.open()
    rng = random.Random(3)
    positions = [rng.randrange(len(ds)) for _ in range(40)] + [5, 5, 0, len(ds) - 1]
    got = ds.get_many(positions)
    assert [s["__key__"] for s in got] == [prepared.expected[p][1] for p in positions]
    assert got == [ds[p] for p in positions]
    keys = [prepared.expected[p][1] for p in positions[:10]]
    assert [s["__key__"] for s in ds.get_many(keys)] == keys
    assert ds.get_many([]) == []


def test_open_costs_two_requests(prepared: Prepared) -> None:
    """Opening reads .info.json and split.yaml with one GET each (no existence checks first);
    dataset.yaml, shardstore.json and index.uuid wait until something needs them. It cost 12."""
    with DelayProxy(prepared.server.endpoint) as proxy:
        for split in ("train", None):
            proxy.reset_counts()
            ds = prepared.open(proxy.endpoint, split=split, options={"skip_instance_cache": True})
            assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in proxy.requests] == [
                ("GET", ".info.json"),
                ("GET", "split.yaml"),
            ]
            proxy.reset_counts()
            assert ds[0]["__key__"] == prepared.expected[0][1]
            # index.uuid (names the local index cache), the shard's .tar.idx unless cached,
            # shardstore.json, the shard's size (stale check), and the sample
            assert proxy.count() <= 5, proxy.requests
            proxy.reset_counts()
            assert ds.dataset_yaml is None and ds.dataset_yaml is None  # prepared without a sample type
            assert proxy.count() == 1  # one GET (404), once
        proxy.reset_counts()
        missing = f"{prepared.url}-missing"
        with pytest.raises(DatasetNotPreparedError):
            shardstore.open(missing, storage_options=prepared.server.storage_options(proxy.endpoint))
        assert proxy.count() <= 2  # .info.json, then Energon 6's .info.yaml


def test_get_many_merges_neighbours_into_few_requests(prepared: Prepared) -> None:
    with DelayProxy(prepared.server.endpoint) as proxy:
        ds = prepared.open(proxy.endpoint, options={"skip_instance_cache": True})
        ds.get_many([0, 20, 40])  # first touch of each shard: index files, stat
        proxy.reset_counts()
        got = ds.get_many(list(range(3, 13)))  # 10 neighbours in one shard
        assert [s["__key__"] for s in got] == [prepared.expected[p][1] for p in range(3, 13)]
        assert proxy.count("GET") == 1
        proxy.reset_counts()
        ds.get_many([1, 21, 41, 2])  # three shards: one request each
        assert proxy.count("GET") == 3


def test_get_many_reads_concurrently(prepared: Prepared) -> None:
    """Through 25 ms of added latency each way, 24 scattered samples by get_many cost a few round
    trips; one by one they cost 24."""
    with DelayProxy(prepared.server.endpoint, delay_ms=25) as proxy:
        ds = prepared.open(proxy.endpoint, options={"skip_instance_cache": True})
        ds.get_many([0, 20, 40])
        ds.storage.merge_gap = 0  # type: ignore[attr-defined]  # one request per sample
        positions = list(range(0, 60, 5)) + list(range(2, 60, 5))
        t0 = time.perf_counter()
        many = ds.get_many(positions)
        t_many = time.perf_counter() - t0
        t0 = time.perf_counter()
        loop = [ds[p] for p in positions]
        t_loop = time.perf_counter() - t0
    assert many == loop
    assert t_loop >= 24 * 0.05
    assert t_many < t_loop / 2, (t_many, t_loop)  # one by one, they would cost as much as the loop


def test_forked_and_spawned_workers_read(prepared: Prepared) -> None:
    """A Dataset used before a fork still reads in the child (its own S3 client) and after, in the
    parent; pickled (as for spawned workers) it reads too."""
    ds = prepared.open()
    assert ds[0]["__key__"] == prepared.expected[0][1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child must never unwind into pytest
        try:
            keys = [ds[5]["__key__"]] + [s["__key__"] for s in ds.get_many([30, 50])]
            os.write(w, " ".join(keys).encode())
            gc.collect()  # whatever the child lets go of must not touch the parent's connections
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        child = f.read().split()
    os.waitpid(pid, 0)
    assert child == [prepared.expected[p][1] for p in (5, 30, 50)]
    t0 = time.perf_counter()
    assert ds[6]["__key__"] == prepared.expected[6][1]
    assert time.perf_counter() - t0 < 5  # not stuck until the client's 15 s read timeout
    copy = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets
    assert [s["__key__"] for s in copy.get_many([1, 21, 41, 59])] == [prepared.expected[p][1] for p in (1, 21, 41, 59)]


def test_open_with_environment_variables_only(prepared: Prepared) -> None:
    """``shardstore.open("s3://...")`` with AWS_ENDPOINT_URL etc. set and no storage_options."""
    code = (
        "import shardstore, sys; ds = shardstore.open(sys.argv[1], split=None); "
        "print(len(ds), ds[7]['__key__'], len(ds.get_many([1, 2, 30])))"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **prepared.server.env()}
    res = subprocess.run([sys.executable, "-c", code, prepared.url], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["60", prepared.expected[7][1], "3"]


# ----- changed and vanished objects ------------------------------------------------------------------
def _shard_key(p: Prepared, shard: str) -> str:
    return f"{p.url[len('s3://'):]}/{shard}"


def test_shard_replaced_with_same_size_is_stale(fresh: Prepared, s3fs_client: Any) -> None:
    shard = fresh.expected[0][0]
    data = bytearray((fresh.local / shard).read_bytes())
    data[700] ^= 0xFF  # inside the first member's payload: size unchanged, ETag changes
    s3fs_client.pipe_file(_shard_key(fresh, shard), bytes(data))
    ds = fresh.open()
    with pytest.raises(StaleIndexError) as info:
        ds[0]
    assert shard in str(info.value) and "prepare" in str(info.value)
    assert len(ds.get_many([len(ds) - 1])) == 1  # the other shard is fine


def test_shard_with_other_size_is_stale(fresh: Prepared, s3fs_client: Any) -> None:
    shard = fresh.expected[-1][0]
    data = (fresh.local / shard).read_bytes()
    s3fs_client.pipe_file(_shard_key(fresh, shard), data[: len(data) // 2])
    ds = fresh.open()
    with pytest.raises(StaleIndexError) as info:
        ds.get(fresh.expected[-1][1])
    assert shard in str(info.value) and "size" in str(info.value)


def test_multipart_shard_replaced_is_stale(rgw_server: Any, tmp_path: Path) -> None:
    """A shard uploaded in parts has an ETag that is no MD5 of its bytes (``<md5 of the parts'
    MD5s>-<parts>``): prepare records it, reads accept it, and a same-size replacement (another
    multipart upload) is caught by the ETag alone."""
    part = 5 << 20  # AWS's smallest part
    p = _prepare(rgw_server, tmp_path, shards=1, samples=12, part_size=part, min_kb=460, max_kb=480)
    shard = p.expected[0][0]
    data = bytearray((p.local / shard).read_bytes())
    assert part < len(data) < 2 * part
    storage = open_storage(p.url, p.options)
    etag = storage.stat(shard).etag
    assert etag and etag.endswith("-2")
    ds = p.open()
    assert [(s["__key__"], _parts(s)) for s in ds[:]] == [(k, parts) for _, k, parts in p.expected]
    data[len(data) // 2] ^= 0xFF
    _put_multipart(rgw_server, f"{p.url}/{shard}", bytes(data), part)
    assert storage.stat(shard).etag not in (etag, None) and storage.stat(shard).size == len(data)
    with pytest.raises(StaleIndexError) as info:
        p.open()[0]
    assert shard in str(info.value) and "ETag" in str(info.value) and etag in str(info.value)


def test_shard_deleted_mid_read(fresh: Prepared, s3fs_client: Any) -> None:
    ds = fresh.open()
    assert ds[0]["__key__"] == fresh.expected[0][1]  # shard checked and being read
    shard = fresh.expected[0][0]
    s3fs_client.rm_file(_shard_key(fresh, shard))
    with pytest.raises(StorageError) as info:
        ds[3]
    msg = str(info.value)
    assert f"{fresh.url}/{shard}" in msg and "no such object" in msg
    assert "bytes " in msg and info.value.offset is not None  # names the range
    with pytest.raises(StorageError, match="no such object"):
        ds.get_many([1, 2, len(ds) - 1])
    with pytest.raises(StorageError):
        fresh.open()[0]  # a new reader: the shard is gone before its first read


def test_index_file_deleted_is_a_clear_error(fresh: Prepared, s3fs_client: Any) -> None:
    shard = fresh.expected[0][0]
    s3fs_client.rm_file(_shard_key(fresh, shard.rsplit(".", 1)[0] + ".tar.idx"))
    with pytest.raises(shardstore.ShardstoreError, match="tar.idx"):
        fresh.open()[0]


# ----- transient faults while reading ---------------------------------------------------------------
@pytest.fixture
def through_proxy(prepared: Prepared) -> Iterator[tuple[DelayProxy, Callable[..., shardstore.Dataset]]]:
    with DelayProxy(prepared.server.endpoint) as proxy:

        def open_ds(client_retries: bool = True) -> shardstore.Dataset:
            options: dict[str, Any] = {"skip_instance_cache": True}
            if not client_retries:
                options["config_kwargs"] = {**prepared.options["config_kwargs"], "retries": {"total_max_attempts": 1}}
            ds = prepared.open(proxy.endpoint, options=options)
            if not client_retries:
                ds.storage.fs.retries = 1  # type: ignore[attr-defined]
            ds.get_many([0, 20, 40])  # index files and shard checks done before faults start
            return ds

        yield proxy, open_ds


@pytest.mark.parametrize("client_retries", [True, False], ids=["client-retries", "shardstore-retries"])
@pytest.mark.parametrize("fault", ["reset", 503])
def test_reads_survive_transient_faults(
    prepared: Prepared, through_proxy: Any, fault: Any, client_retries: bool
) -> None:
    proxy, open_ds = through_proxy
    ds = open_ds(client_retries)
    proxy.inject(fault, 2)
    assert ds[7]["__key__"] == prepared.expected[7][1]
    proxy.inject(fault, 2)
    got = ds.get_many([1, 25, 50, 33])
    assert [s["__key__"] for s in got] == [prepared.expected[p][1] for p in (1, 25, 50, 33)]
    assert sum(1 for r in proxy.requests if r.faulted) == 4


def test_persistent_faults_name_object_and_range(prepared: Prepared, through_proxy: Any) -> None:
    proxy, open_ds = through_proxy
    ds = open_ds(client_retries=False)
    proxy.inject(503, 1000)
    with pytest.raises(StorageError) as info:
        ds[9]
    msg = str(info.value)
    assert f"{prepared.url}/{prepared.expected[9][0]}" in msg
    assert "bytes " in msg and "after 5 attempts" in msg, msg
    assert info.value.offset is not None

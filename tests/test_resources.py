"""Descriptors, maps and connections are released: ``close()``, ``with`` blocks, and the last
reference going (issue 9, point 4).

The loops run in a child process whose descriptor limit is 256 (``resource.setrlimit``): before
the fix, about four descriptors stayed open per ``shardstore.open`` and open #64 or so failed with
"Too many open files". Each iteration reads a sample (by position; every tenth also by key, by
member name and through an aux store, which open the index, its connections and the name table).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import shardstore
from shardstore.filestores import IndexedTarStore

CHILD = r"""
import gc, os, resource, sys
import shardstore
from shardstore.filestores import IndexedTarStore

resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
gc.disable()  # dropping references must be enough: no reference cycle may hold a descriptor
before = len(os.listdir("/proc/self/fd"))
for i in range(n):
    if mode == "close":
        with shardstore.open(path) as ds:
            sample = ds[i % len(ds)]
            if i % 10 == 0:
                assert ds.get(sample["__key__"])["__key__"] == sample["__key__"]
                assert ds.read_file(sample["__key__"] + ".txt") == sample["txt"]
                with IndexedTarStore(path) as store:
                    assert store[sample["__key__"] + ".json"] == sample["json"]
    else:
        ds = shardstore.open(path)
        sample = ds[i % len(ds)]
        if i % 10 == 0:
            assert ds.get(sample["__key__"])["__key__"] == sample["__key__"]
            assert ds.read_file(sample["__key__"] + ".txt") == sample["txt"]
            assert IndexedTarStore(path)[sample["__key__"] + ".json"] == sample["json"]
        del ds, sample
for i in range(n // 20):  # metadatasets: their sources' datasets and aux stores
    md = shardstore.open_metadataset(os.path.join(path, "meta.yaml"))
    sample = next(iter(md.iter(seed=i)))
    assert sample.aux["media"][sample["__key__"] + ".txt"] == sample["txt"]
    if mode == "close":
        md.close()
    del md, sample
after = len(os.listdir("/proc/self/fd"))
print(before, after)
"""


META = """__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - {weight: 1, path: ., aux: {media: .}}
"""


def _loop(path: Path, n: int, mode: str) -> tuple[int, int]:
    (path / "meta.yaml").write_text(META)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(n), mode], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after = map(int, proc.stdout.split())
    return before, after


@pytest.mark.parametrize("mode", ["close", "drop"])
def test_open_in_a_loop_under_a_low_descriptor_limit(prepared: Path, mode: str) -> None:
    before, after = _loop(prepared, 600, mode)  # ~4 leaked a loop would pass 256 by loop 64
    assert after == before


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["close", "drop"])
def test_open_10000_times_under_ulimit_256(prepared: Path, mode: str) -> None:
    before, after = _loop(prepared, 10_000, mode)
    assert after == before


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_close_releases_every_thread_connection_and_reopens(prepared: Path) -> None:
    ds = shardstore.open(str(prepared))
    base = _fds()
    key = ds[0]["__key__"]

    def read() -> None:
        assert ds.get(key)["__key__"] == key
        ds.read_file(f"{key}.txt")

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    read()
    assert _fds() > base
    ds.close()
    assert _fds() <= base
    # closing is a release, not an end: reading again reopens
    assert ds[1]["__key__"] != key and ds.get(key)["__key__"] == key
    ds.close()
    ds.close()  # twice is fine


def test_with_blocks_for_dataset_store_and_index(prepared: Path) -> None:
    base = _fds()
    with shardstore.open(str(prepared)) as ds, IndexedTarStore(str(prepared)) as store:
        key = ds[0]["__key__"]
        assert store[f"{key}.txt"] == ds[0]["txt"]
        with ds.index as index:
            assert index.locate(key) is not None
    assert _fds() <= base


def test_a_pickled_copy_and_a_fork_hold_their_own(prepared: Path) -> None:
    ds = shardstore.open(str(prepared))
    first = ds[0]
    copy = pickle.loads(pickle.dumps(ds))
    ds.close()  # the copy owns nothing of the original's
    assert copy[0] == first
    copy.close()
    ds[0]  # the original reopens
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            ok = ds[1]["__key__"] == copy[1]["__key__"] and ds.get(first["__key__"])["__key__"] == first["__key__"]
            ds.close()
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.waitpid(pid, 0)
    assert ds[2]["__key__"]  # the parent's descriptors survived the child's close
    ds.close()

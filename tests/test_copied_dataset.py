"""A prepared dataset copied without its mtimes (``cp -r``, an scp-like copy, a download) stays
readable; a real same-size rewrite in place is still refused (issue 26, point 1).

prepare records a fingerprint of each shard (``shardprint``: a hash of the tar headers at a sample
of the ``.tar.idx`` offsets) in ``shardstore.json``; a reader that finds a shard's mtime changed
hashes those few ranges once and goes on when they match.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import test_stale_reads
from click.testing import CliRunner
from test_stale_reads import KEYS, SHARD, payload, rewrite_same_size, write_shard

import shardstore
from shardstore import shardprint
from shardstore.cli import main
from shardstore.errors import StaleIndexError
from shardstore.filestores import IndexedTarStore
from shardstore.index import taridx

ds_path = test_stale_reads.ds_path  # the fixture: a prepared dataset of two shards, to copy


def _all_reads_work(root: Path) -> None:
    ds = shardstore.open(str(root))
    assert [s["__key__"] for s in ds] == KEYS + ["m0", "m1"]
    assert ds[0]["bin"] == payload("k0", "bin") and ds.get("k3")["txt"] == payload("k3", "txt")
    assert ds.read_file("k5.bin") == payload("k5", "bin")
    assert IndexedTarStore(str(root))["m1.txt"] == payload("m1", "txt")
    res = CliRunner().invoke(main, ["cat", str(root), "k2.txt"])
    assert res.exit_code == 0 and res.stdout_bytes == payload("k2", "txt")
    res = CliRunner().invoke(main, ["check", str(root)])
    assert res.exit_code == 0, res.output


def test_prepare_records_a_fingerprint_per_shard(ds_path: Path) -> None:
    shards = json.loads((ds_path / ".nv-meta/shardstore.json").read_text())["shards"]
    assert set(shards) == {SHARD, "parts/b.tar"}
    for entry in shards.values():
        assert entry["fingerprint"].startswith(shardprint.SCHEME + ":")
    assert shards[SHARD]["fingerprint"] != shards["parts/b.tar"]["fingerprint"]


def test_cp_r_copy_reads(ds_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(ds_path), str(copy)], check=True)  # no -p: mtimes are the copy's
    os.utime(copy / SHARD, ns=(0, (ds_path / SHARD).stat().st_mtime_ns + 5_000_000_000))
    assert (copy / SHARD).stat().st_mtime != (ds_path / SHARD).stat().st_mtime
    _all_reads_work(copy)


def test_scp_like_copy_read_only_reads(ds_path: Path, tmp_path: Path) -> None:
    """Every shard with a new mtime (as scp or a download gives), and the copy read-only (a shared
    copy that cannot be prepared again)."""
    copy = tmp_path / "copy"
    shutil.copytree(ds_path, copy, copy_function=shutil.copyfile)  # bytes only, no metadata
    for shard in (SHARD, "parts/b.tar"):
        os.utime(copy / shard, (1_000_000_000, 1_000_000_000))
    for path in sorted(copy.rglob("*"), reverse=True):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    copy.chmod(0o555)
    try:
        _all_reads_work(copy)
    finally:
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_copied_shard_is_verified_once_then_one_pread_a_read(
    ds_path: Path, tmp_path: Path, record_preads: Callable[[], list[tuple[int, int]]]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ds_path, copy, copy_function=shutil.copyfile)
    os.utime(copy / SHARD, (1_000_000_000, 1_000_000_000))
    ds = shardstore.open(str(copy))
    reads = record_preads()
    assert ds.read_file("k1.bin") == payload("k1", "bin")
    assert len(reads) > 1  # the first read of the shard: the fingerprint's ranges, then the member
    reads.clear()
    for key in KEYS:
        assert ds.read_file(f"{key}.txt") == payload(key, "txt")
    assert len(reads) == len(KEYS)  # checked once per shard open, not per read


def test_same_size_rewrite_in_a_copy_is_still_refused(ds_path: Path) -> None:
    rewrite_same_size(ds_path, keep_mtime=False)
    with pytest.raises(StaleIndexError, match=r"rewritten in place") as info:
        shardstore.open(str(ds_path))[0]
    assert "a.tar" in str(info.value) and "headers" in str(info.value) and "\n" not in str(info.value)
    res = CliRunner().invoke(main, ["check", str(ds_path)])
    assert res.exit_code == 1 and "rewritten in place" in res.output
    res = CliRunner().invoke(main, ["cat", str(ds_path), "k0.bin"])
    assert res.exit_code == 1 and "a.tar" in res.stderr
    assert shardstore.open(str(ds_path)).get("m1")["txt"] == payload("m1", "txt")  # the other shard reads on


def test_index_without_fingerprint_names_the_copy_as_a_likely_cause(ds_path: Path) -> None:
    """A dataset prepared before fingerprints: a changed mtime cannot be told from a rewrite."""
    meta = ds_path / ".nv-meta/shardstore.json"
    data = json.loads(meta.read_text())
    for entry in data["shards"].values():
        del entry["fingerprint"]
    meta.write_text(json.dumps(data))
    os.utime(ds_path / SHARD, (1_000_000_000, 1_000_000_000))
    with pytest.raises(StaleIndexError, match=r"copied without keeping mtimes") as info:
        shardstore.open(str(ds_path)).get("k0")
    assert "prepare" in str(info.value)


def test_prepare_update_keeps_the_fingerprint_and_tar_idx_digest_of_kept_shards(ds_path: Path) -> None:
    before = json.loads((ds_path / ".nv-meta/shardstore.json").read_text())["shards"]
    write_shard(ds_path / "parts/c.tar", ["n0"])
    shardstore.prepare(str(ds_path), update=True, num_workers=1)
    after = json.loads((ds_path / ".nv-meta/shardstore.json").read_text())["shards"]
    assert after[SHARD]["fingerprint"] == before[SHARD]["fingerprint"]
    assert after["parts/c.tar"]["fingerprint"].startswith(shardprint.SCHEME)
    assert after[SHARD]["tar_idx"] == before[SHARD]["tar_idx"]
    assert after["parts/c.tar"]["tar_idx"] == taridx.digest((ds_path / "parts/c.tar.idx").read_bytes())
    os.utime(ds_path / SHARD, (1_000_000_000, 1_000_000_000))
    assert shardstore.open(str(ds_path)).get("k4")["bin"] == payload("k4", "bin")

"""``prepare --fix-duplicates`` without the peer: nothing renamed without duplicates; a failure while a shard
is patched leaves it whole (the patch goes to a copy renamed into place); a second run finishes a dataset
left half renamed; what renaming cannot fix is refused before any shard changes. (Energon's own result is
compared in tests/compat/test_fix_duplicates_compat.py.)"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

import shardstore
from shardstore.errors import DuplicateKeyError, TarFormatError


def _shard(path: Path, names: list[str], fmt: int = tarfile.USTAR_FORMAT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))


def _dup_dataset(root: Path, shards: int = 3) -> Path:
    for s in range(shards):
        _shard(root / "parts" / f"s{s}.tar", ["k0.jpg", "k0.txt", f"only{s}.jpg"])
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.rglob("*.tar"))}


def _names(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()


def test_without_the_flag_a_duplicate_is_an_error(tmp_path: Path) -> None:
    root = _dup_dataset(tmp_path / "ds")
    with pytest.raises(DuplicateKeyError):
        shardstore.prepare(str(root), split_ratio="1,0,0")


def test_renames_and_indexes(tmp_path: Path) -> None:
    root = _dup_dataset(tmp_path / "ds")
    report = shardstore.prepare(str(root), split_ratio="1,0,0", fix_duplicates=True)
    assert report.renamed_shards == ["parts/s0.tar", "parts/s1.tar", "parts/s2.tar"] and report.samples == 6
    assert _names(root / "parts" / "s1.tar") == ["parts/s1.tar/k0.jpg", "parts/s1.tar/k0.txt", "parts/s1.tar/only1.jpg"]
    assert shardstore.open(str(root)).get("parts/s2.tar/k0")["txt"] == b"k0.txt"


def test_nothing_renamed_without_duplicates(tmp_path: Path) -> None:
    for s in range(2):
        _shard(tmp_path / "ds" / f"s{s}.tar", [f"a{s}.jpg"])
    before = _files(tmp_path / "ds")
    report = shardstore.prepare(str(tmp_path / "ds"), split_ratio="1,0,0", fix_duplicates=True)
    assert report.renamed_shards == [] and _files(tmp_path / "ds") == before


def test_a_failed_patch_leaves_the_shard_whole_and_a_rerun_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _dup_dataset(tmp_path / "ds")
    reference = _dup_dataset(tmp_path / "ref")
    shardstore.prepare(str(reference), split_ratio="1,0,0", fix_duplicates=True)
    before = _files(root)
    real, writes = os.pwrite, []

    def failing(fd: int, data: bytes, offset: int) -> int:  # injects the fault: the disk fails mid-shard
        writes.append(offset)
        if len(writes) == 5:  # shard s0 (3 headers) is done, s1 fails on its second header
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", failing)
    with pytest.raises(OSError):
        shardstore.prepare(str(root), split_ratio="1,0,0", fix_duplicates=True)
    monkeypatch.setattr(os, "pwrite", real)
    after = _files(root)
    assert after["s0.tar"] == _files(reference)["s0.tar"]  # replaced whole
    assert after["s1.tar"] == before["s1.tar"] and after["s2.tar"] == before["s2.tar"]  # untouched, not half
    assert not [p for p in root.rglob("*") if p.name.startswith(".s1.tar.fix-duplicates-")]
    # s0 is renamed, so s1 and s2 alone no longer share a key with it -- but they share k0 with each other;
    # and even without that, a half-renamed dataset is finished
    report = shardstore.prepare(str(root), split_ratio="1,0,0", fix_duplicates=True)
    assert report.renamed_shards == ["parts/s1.tar", "parts/s2.tar"]
    assert _files(root) == _files(reference)


def test_refused_before_any_shard_changes(tmp_path: Path) -> None:
    root = _dup_dataset(tmp_path / "ds")
    _shard(root / "parts" / "s9.tar", ["k0.jpg", "x" * 120 + ".jpg"], fmt=tarfile.GNU_FORMAT)  # a GNU long name
    before = _files(root)
    with pytest.raises(TarFormatError, match="GNU long-name header"):
        shardstore.prepare(str(root), split_ratio="1,0,0", fix_duplicates=True)
    assert _files(root) == before and not (root / ".nv-meta").exists()


def test_a_bad_option_renames_nothing(tmp_path: Path) -> None:
    root = _dup_dataset(tmp_path / "ds")
    before = _files(root)
    with pytest.raises(Exception, match="split ratio"):
        shardstore.prepare(str(root), split_ratio="1,2", fix_duplicates=True)
    with pytest.raises(Exception, match="dataset-yaml-name"):
        shardstore.prepare(str(root), split_ratio="1,0,0", fix_duplicates=True, dataset_yaml_name="../x.yaml")
    assert _files(root) == before

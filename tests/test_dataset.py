"""``Dataset`` over a shardstore-prepared dataset, checked against ``tarfile``'s view of the shards:
every sample by position, key and member name; negative indices and slices; splits and excludes
as Energon applies them; ``key in ds``; ``keys()`` order; pickling; and bad input, each a typed
error that names the file."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import sqlite3
import tarfile
from collections.abc import Callable
from pathlib import Path

import braceexpand
import pytest
import yaml

import shardstore
from shardstore import nvmeta
from shardstore.checks import check
from shardstore.errors import (
    ConfigError,
    DatasetNotPreparedError,
    IndexVersionError,
    SampleNotFoundError,
    StaleIndexError,
    StorageError,
)
from shardstore.storage import LocalStorage

_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # Energon's member-name rule (DESIGN.md section 4)
_SKIP = re.compile(r"__[^/]*__($|/)")

Expected = list[tuple[str, str, dict[str, bytes]]]  # (shard, key, {part: bytes})


def tar_view(root: Path, shard: str) -> Expected:
    """The samples of a shard as ``tarfile`` sees them, grouped by Energon's rules."""
    out: Expected = []
    with tarfile.open(root / shard) as tar:
        for m in tar:
            if not m.isfile() or _SKIP.match(m.name):
                continue
            match = _NAME.match(m.name)
            if match is None:
                continue
            key, part = match.groups()
            data = tar.extractfile(m).read()  # type: ignore[union-attr]
            if out and out[-1][1] == key:
                out[-1][2][part] = data
            else:
                out.append((shard, key, {part: data}))
    return out


def split_shards(root: Path, split: str | None) -> list[str]:
    """The split's shards in split.yaml order, minus excluded shards, read with plain PyYAML."""
    meta = root / ".nv-meta"
    if split is None:
        info = meta / ".info.json" if (meta / ".info.json").exists() else meta / ".info.yaml"  # Energon 6
        return list(yaml.safe_load(info.read_text())["shard_counts"])
    raw = yaml.safe_load((meta / "split.yaml").read_text())
    excluded = {e for pattern in raw.get("exclude") or [] for e in braceexpand.braceexpand(pattern)}
    names = [n for pattern in raw["split_parts"][split] for n in braceexpand.braceexpand(pattern)]
    return [n for n in names if n not in excluded]


def expected(root: Path, split: str | None) -> Expected:
    return [s for shard in split_shards(root, split) for s in tar_view(root, shard)]


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = 1_700_000_000
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def extra_shard(path: Path) -> None:
    """Keys in folders (with dots), multi-dot parts, a long GNU name, members Energon skips."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "__meta__/info.json", b"{}")
        _add(tar, "dir.with.dots", kind=tarfile.DIRTYPE)
        _add(tar, "dir.with.dots/k1.seg.png", b"\x89PNG fake")
        _add(tar, "dir.with.dots/k1.txt", b"one")
        _add(tar, "dir.with.dots/k2.txt", b"two")
        _add(tar, "noextension", b"skipped: no dot")
        _add(tar, "dir.with.dots/k2.json", b'{"k": 2}')
        long_key = "deep/" + "x" * 120
        _add(tar, f"{long_key}.txt", b"long name")
        _add(tar, f"{long_key}.bin", bytes(range(256)) * 9)


@pytest.fixture
def root(make_shards: Callable[..., Path]) -> Path:
    """10 generated shards x 6 samples plus one hand-made shard; split 8,1,1 over the 11 shards."""
    path = make_shards(shards=10, samples=6, min_kb=1, max_kb=3)
    extra_shard(path / "parts" / "extra.tar")
    shardstore.prepare(str(path), split_ratio="8,1,1", num_workers=1)
    return path


def _set_excludes(root: Path, exclude: list[str]) -> None:
    storage = LocalStorage(str(root))
    splits = nvmeta.read_splits(storage)
    parts = {name: nvmeta.brace_expand(patterns) for name, patterns in splits.split_parts.items()}
    storage.write_atomic(".nv-meta/split.yaml", nvmeta.splits_bytes(nvmeta.Splits(parts, exclude)))


def _content(sample: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in sample.items() if not k.startswith("__")}


# ----- reading everything ------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "val", "test", None])
def test_every_sample_by_position_key_and_member(root: Path, split: str | None) -> None:
    want = expected(root, split)
    ds = shardstore.open(str(root), split)
    assert len(ds) == len(want) > 0
    for i, (shard, key, parts) in enumerate(want):
        sample = ds[i]
        assert (sample["__key__"], sample["__shard__"], sample["__index__"]) == (key, shard, i)
        assert _content(sample) == parts
        by_key = ds.get(key)
        assert by_key == sample
        for part, data in parts.items():
            assert ds.read_file(f"{key}.{part}") == data
            shard_of, rng = ds.member_range(f"{key}.{part}")
            assert shard_of == shard and rng.size == len(data)
    assert list(ds.keys()) == [key for _, key, _ in want]


def test_splits_follow_split_yaml(root: Path) -> None:
    sizes = {split: len(shardstore.open(str(root), split)) for split in ("train", "val", "test")}
    assert sizes == {"train": 48, "val": 6, "test": 6 + 3}
    assert len(shardstore.open(str(root), None)) == sum(sizes.values())
    with pytest.raises(ConfigError, match="no split 'nope'"):
        shardstore.open(str(root), "nope")


def test_negative_indices_and_slices(root: Path) -> None:
    ds = shardstore.open(str(root), "train")
    keys = [key for _, key, _ in expected(root, "train")]
    assert ds[-1]["__key__"] == keys[-1] and ds[-1]["__index__"] == len(keys) - 1
    assert ds[-len(keys)]["__key__"] == keys[0]
    for sl in (slice(2, 10, 3), slice(-5, None), slice(None, None, -7), slice(40, 4, -9), slice(5, 5)):
        assert [s["__key__"] for s in ds[sl]] == keys[sl], sl
    for bad in (len(keys), -len(keys) - 1):
        with pytest.raises(SampleNotFoundError) as info:
            ds[bad]
        assert isinstance(info.value, KeyError) and "out of range" in str(info.value)


def test_key_membership_and_lookups(root: Path) -> None:
    ds = shardstore.open(str(root), "train")
    assert "s00000_000003" in ds
    assert "dir.with.dots/k2" in ds  # another split's key: get() finds it too
    assert ds.get("dir.with.dots/k2")["json"] == b'{"k": 2}'
    assert ds.get("dir.with.dots/k2")["__index__"] is None  # not a position of this split
    assert "missing" not in ds and 3 not in ds  # type: ignore[operator]
    with pytest.raises(SampleNotFoundError) as info:
        ds.get("missing")
    assert isinstance(info.value, KeyError)
    with pytest.raises(SampleNotFoundError):
        ds.read_file("s00000_000003.nope")
    with pytest.raises(SampleNotFoundError):
        ds.read_file("noextension")
    assert ds.read_file("dir.with.dots/k1.seg.png") == b"\x89PNG fake"


def test_get_many_keeps_the_order_asked(root: Path) -> None:
    ds = shardstore.open(str(root), "train")
    items: list[int | str] = [17, "s00000_000001", -1, 3, "s00007_000005", 17]
    got = ds.get_many(items)
    assert [s["__key__"] for s in got] == [
        ds[17]["__key__"], "s00000_000001", ds[-1]["__key__"], ds[3]["__key__"], "s00007_000005", ds[17]["__key__"]
    ]
    assert got[0] == got[-1] == ds[17]


# ----- excludes ---------------------------------------------------------------------------------------


def test_excludes_as_energon_applies_them(root: Path) -> None:
    """A shard entry drops the shard from the split; a ``shard/key`` entry drops the sample but it
    keeps its slot (Energon's reader returns None there and iteration skips it)."""
    _set_excludes(
        root,
        ["parts/data-000001.tar", "parts/data-000000.tar/s00000_000002", "parts/extra.tar/dir.with.dots/k2"],
    )
    train = shardstore.open(str(root), "train")
    assert len(train) == 7 * 6
    assert "parts/data-000001.tar" not in {s.name for s in train.shards}
    assert train.excluded_positions() == [2]
    with pytest.raises(SampleNotFoundError, match="excluded"):
        train[2]
    assert "s00000_000002" not in train
    with pytest.raises(SampleNotFoundError):
        train.get("s00000_000002")
    keys = list(train.keys())
    assert "s00000_000002" not in keys and len(keys) == len(train) - 1
    assert [s["__key__"] for s in train.iter()] == keys
    with pytest.raises(SampleNotFoundError, match="excluded"):
        train[1:4]  # a slice is positions: an excluded one among them fails as ds[2] does
    assert [s["__key__"] for s in train[3:5]] == ["s00000_000003", "s00000_000004"]
    test = shardstore.open(str(root), "test")
    assert [s["__key__"] for s in test.iter()] == [k for k in test.keys()]
    assert "dir.with.dots/k2" not in list(test.keys()) and "dir.with.dots/k1" in list(test.keys())
    assert test.excluded_positions() == [6 + 1]


# ----- pickling ----------------------------------------------------------------------------------------


def test_dataset_pickles_cheaply_and_reads_after(root: Path) -> None:
    ds = shardstore.open(str(root), "train")
    before = len(pickle.dumps(ds))
    all_samples = list(ds.iter())
    assert "s00000_000000" in ds  # opens the index connection
    blob = pickle.dumps(ds)
    assert before < 4000 and len(blob) < before + 64, "no memory maps, connections or caches in the pickle"
    clone = pickle.loads(blob)
    assert list(clone.iter()) == all_samples
    assert clone.get("s00003_000004") == ds.get("s00003_000004")


# ----- bad input ---------------------------------------------------------------------------------------


def test_missing_nv_meta(make_shards: Callable[..., Path]) -> None:
    path = make_shards(shards=1, samples=2)
    with pytest.raises(DatasetNotPreparedError, match="prepare") as info:
        shardstore.open(str(path))
    assert isinstance(info.value, FileNotFoundError) and str(path) in str(info.value)


def test_deleted_shard(root: Path) -> None:
    os.unlink(root / "parts" / "data-000002.tar")
    ds = shardstore.open(str(root), "train")
    assert ds[0]["__key__"] == "s00000_000000"  # other shards still read
    with pytest.raises(StorageError, match="no such file") as info:
        ds[2 * 6]
    assert "data-000002.tar" in str(info.value) and isinstance(info.value, OSError)
    with pytest.raises(StorageError, match="data-000002.tar"):
        ds.read_file("s00002_000001.txt")


def test_truncated_shard(root: Path) -> None:
    shard = root / "parts" / "data-000003.tar"
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)
    ds = shardstore.open(str(root), "train")
    with pytest.raises(StaleIndexError, match="rerun") as info:
        ds[3 * 6]
    assert "data-000003.tar" in str(info.value)


def test_shard_changed_after_prepare(root: Path, make_shards: Callable[..., Path]) -> None:
    other = make_shards(shards=4, samples=7, name="other", seed=99)
    os.replace(other / "parts" / "data-000003.tar", root / "parts" / "data-000003.tar")
    ds = shardstore.open(str(root), "train")
    with pytest.raises(StaleIndexError, match="changed since prepare") as info:
        ds.get("s00003_000001")
    assert "data-000003.tar" in str(info.value)
    assert ds[0]["__key__"] == "s00000_000000"


def test_missing_or_wrong_tar_idx(root: Path) -> None:
    os.unlink(root / "parts" / "data-000004.tar.idx")
    (root / "parts" / "data-000005.tar.idx").write_bytes(bytes(8 * 3))
    ds = shardstore.open(str(root), "train")
    with pytest.raises(DatasetNotPreparedError, match="tar.idx"):
        ds[4 * 6]
    with pytest.raises(StaleIndexError, match="2 samples"):
        ds[5 * 6]


def test_index_from_a_future_shardstore(root: Path) -> None:
    meta = root / ".nv-meta" / "shardstore.json"
    raw = json.loads(meta.read_text())
    raw["format"] = 99
    meta.write_text(json.dumps(raw))
    ds = shardstore.open(str(root), "train")  # shardstore.json is read by the first shard check
    for read in (lambda: ds[0], lambda: ds.get("s00000_000001"), lambda: next(iter(ds))):
        with pytest.raises(IndexVersionError, match="format 99") as info:
            read()
        assert "shardstore.json" in str(info.value)


def test_invalid_shardstore_json_is_read_as_none(root: Path) -> None:
    """Reads ignore a damaged shardstore.json (check reports it): the .tar.idx end still catches a
    truncated shard, as for a dataset Energon prepared."""
    (root / ".nv-meta" / "shardstore.json").write_text("{not json")
    problems = [str(p) for p in check(str(root)).problems]
    assert any("shardstore.json" in p and "invalid shardstore.json" in p for p in problems), problems
    ds = shardstore.open(str(root), "train")
    assert ds.prepared_shard_sizes == {}
    assert ds[0]["__key__"] == "s00000_000000"
    shard = root / "parts" / "data-000003.tar"
    os.truncate(shard, shard.stat().st_size // 2)
    with pytest.raises(StaleIndexError, match="index reaches offset") as info:
        ds[3 * 6]
    assert "data-000003.tar" in str(info.value)


def test_index_sqlite_of_an_unknown_layout(root: Path) -> None:
    db_path = root / ".nv-meta" / "index.sqlite"
    db_path.unlink()
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE samples (shard INTEGER, sample_key_v9 TEXT, position INTEGER, byte_range BLOB)")
    db.commit()
    db.close()
    ds = shardstore.open(str(root), "train")
    assert ds[0]["__key__"] == "s00000_000000"  # positions never touch SQL
    with pytest.raises(IndexVersionError, match="unknown index layout") as info:
        ds.get("s00000_000000")
    assert "index.sqlite" in str(info.value)

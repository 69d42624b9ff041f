"""File stores of polylithic datasets: members of a prepared tar dataset by full name, and plain folders."""

from __future__ import annotations

import os
import pickle
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from make_polylithic import media_bytes, write_aux_folder, write_aux_tar

import shardstore
from shardstore.errors import PathEscapeError, SampleNotFoundError, StaleIndexError
from shardstore.filestores import FolderStore, IndexedTarStore, open_file_store
from shardstore.membercheck import HEADER_SPAN

IMAGES = 50


@pytest.fixture(autouse=True, params=["name_table", "sql"])
def lookups_by(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: lookups by name answered by the name table (built at the first lookup,
    in a private cache) and by SQL alone (tests/test_name_table.py covers the table itself)."""
    monkeypatch.setenv("SHARDSTORE_CACHE", str(tmp_path / "name-cache"))
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "0" if request.param == "name_table" else "-1")
    return str(request.param)


@pytest.fixture(scope="module")
def aux_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """50 members images/00000.jpg .. over 3 shards; split 1,1,1 so each split holds one shard."""
    path = tmp_path_factory.mktemp("stores") / "aux_tar"
    write_aux_tar(str(path), IMAGES, shards=3)
    shardstore.prepare(str(path), split_ratio="1,1,1", num_workers=1)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stores") / "folder"
    write_aux_folder(str(path), 20)
    (path / "deep" / "er").mkdir(parents=True)
    (path / "deep" / "er" / "x.bin").write_bytes(b"deep file")
    (path / "empty.txt").write_bytes(b"")
    return path


def names(n: int = IMAGES) -> list[str]:
    return [f"images/{i:05d}.jpg" for i in range(n)]


# ----- IndexedTarStore ------------------------------------------------------------------------------
def test_indexed_tar_store_reads_every_member_by_full_name(aux_tar: Path) -> None:
    store = IndexedTarStore(str(aux_tar))
    for i, name in enumerate(names()):
        assert name in store
        assert store[name] == media_bytes("image", i)
        assert store.get(name) == media_bytes("image", i)


def test_indexed_tar_store_covers_all_shards_whatever_the_split(aux_tar: Path) -> None:
    ds = shardstore.open(str(aux_tar), split="val")  # one shard of three
    assert len(ds) < IMAGES
    store = IndexedTarStore(ds)
    assert store.get_many(names()) == [media_bytes("image", i) for i in range(IMAGES)]


def test_indexed_tar_store_missing_names(aux_tar: Path) -> None:
    store = IndexedTarStore(str(aux_tar))
    for missing in ["images/99999.jpg", "images/00001.png", "images/00001", "nodot", "__meta__/x.jpg"]:
        assert missing not in store
        assert store.get(missing) is None
        assert store.get(missing, b"dflt") == b"dflt"
        with pytest.raises(SampleNotFoundError) as err:
            store[missing]
        assert isinstance(err.value, KeyError)
        assert missing in str(err.value) and str(aux_tar) in str(err.value)
    assert 42 not in store  # type: ignore[operator]


def test_indexed_tar_store_get_many_order_duplicates_and_errors(aux_tar: Path) -> None:
    store = IndexedTarStore(str(aux_tar))
    order = [49, 0, 17, 17, 33, 1, 48]
    assert store.get_many(f"images/{i:05d}.jpg" for i in order) == [media_bytes("image", i) for i in order]
    assert store.get_many([]) == []
    with pytest.raises(SampleNotFoundError, match="images/00777.jpg"):
        store.get_many(["images/00001.jpg", "images/00777.jpg"])
    assert store.exists_many(["images/00001.jpg", "images/00777.jpg"]) == [True, False]


def test_indexed_tar_store_reads_only_the_payload(
    aux_tar: Path, record_preads: Callable[[], list[tuple[int, int]]]
) -> None:
    store = IndexedTarStore(str(aux_tar))
    store["images/00001.jpg"]  # the first read of a shard also checks its size: not counted below
    store["images/00049.jpg"]
    reads = record_preads()
    data = store["images/00007.jpg"]
    assert data == media_bytes("image", 7)
    # one read: the payload and the headers just before it, which show it is the member named
    assert len(reads) == 1 and reads[0][0] == len(data) + HEADER_SPAN
    shard = store.dataset.index.part("images/00007", "jpg")[0]  # type: ignore[index]
    with tarfile.open(aux_tar / store.dataset.info.shards[shard]) as tar:
        assert reads[0][1] == tar.getmember("images/00007.jpg").offset_data - HEADER_SPAN
    reads.clear()
    store.get_many(["images/00003.jpg", "images/00004.jpg"])  # neighbours: one merged read
    assert len(reads) == 1 and reads[0][0] < 2 * 2000 + HEADER_SPAN


def test_indexed_tar_store_detects_a_changed_shard(tmp_path: Path) -> None:
    path = tmp_path / "aux"
    shards = write_aux_tar(str(path), 10, shards=1)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    with open(shards[0], "ab") as f:
        f.write(b"\0" * 1024)
    with pytest.raises(StaleIndexError, match="prepare"):
        IndexedTarStore(str(path))["images/00001.jpg"]


def test_indexed_tar_store_pickles(aux_tar: Path) -> None:
    store = IndexedTarStore(str(aux_tar))
    store["images/00001.jpg"]  # opens the index connection first
    copy = pickle.loads(pickle.dumps(store))
    assert copy["images/00002.jpg"] == media_bytes("image", 2)


def test_indexed_tar_store_not_prepared(tmp_path: Path) -> None:
    write_aux_tar(str(tmp_path / "raw"), 3, shards=1)
    with pytest.raises(shardstore.ShardstoreError, match="prepare"):
        IndexedTarStore(str(tmp_path / "raw"))


def test_indexed_tar_store_lookups_from_many_threads(aux_tar: Path) -> None:
    """Each thread has its own connection and cursor; every answer stays the same."""
    from concurrent.futures import ThreadPoolExecutor

    store = IndexedTarStore(str(aux_tar))
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(store.__getitem__, names() * 3)) == [media_bytes("image", i) for i in range(IMAGES)] * 3
    assert store.get_many(names()) == [media_bytes("image", i) for i in range(IMAGES)]


@pytest.mark.parametrize("order", ["shuffled", "shards_reversed"])
def test_indexed_tar_store_samples_rows_in_another_order(tmp_path: Path, order: str) -> None:
    """Another writer may store ``samples`` rows in another order (Energon's interleaves shards):
    lookups by member name never depend on the rows' storage order."""
    import random
    import sqlite3

    path = tmp_path / order
    write_aux_tar(str(path), 40, shards=2)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    db = sqlite3.connect(path / ".nv-meta" / "index.sqlite")
    rows = db.execute("SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size FROM samples").fetchall()
    if order == "shuffled":
        random.Random(0).shuffle(rows)
    else:
        rows.sort(key=lambda r: (-r[0], r[2]))  # shard 1's rows first, each shard's in order
    db.execute("DELETE FROM samples")
    db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    store = IndexedTarStore(str(path))
    for _ in range(3):
        assert [store[n] for n in names(40)] == [media_bytes("image", i) for i in range(40)]
    assert "images/00040.jpg" not in store and "images/00001.png" not in store


# ----- FolderStore ----------------------------------------------------------------------------------
def test_folder_store_reads_files(folder: Path) -> None:
    store = FolderStore(str(folder))
    assert store["photos/00003.png"] == media_bytes("photo", 3)
    assert store["./photos//00004.png"] == media_bytes("photo", 4)
    assert store["deep/er/x.bin"] == b"deep file"
    assert store["empty.txt"] == b""
    assert "photos/00019.png" in store and "photos/00020.png" not in store
    assert store.get("photos/00020.png", b"-") == b"-"
    order = [19, 0, 5, 5]
    assert store.get_many([f"photos/{i:05d}.png" for i in order] + ["empty.txt"]) == [
        media_bytes("photo", i) for i in order
    ] + [b""]
    assert store.exists()
    assert not FolderStore(str(folder / "nope")).exists()


def test_folder_store_missing_and_folders_are_not_files(folder: Path) -> None:
    store = FolderStore(str(folder))
    for missing in ["photos/nope.png", "photos", "deep", "deep/er/x.bin/y"]:
        assert missing not in store
        assert store.get(missing) is None
        with pytest.raises(SampleNotFoundError) as err:
            store[missing]
        assert isinstance(err.value, KeyError) and str(folder) in str(err.value)


@pytest.mark.parametrize(
    "name", ["../x", "..", "photos/../../x", "photos/..", "/etc/passwd", "\\etc\\passwd", "..\\x", "C:x", "", "a\0b"]
)
def test_folder_store_refuses_names_that_leave_it(folder: Path, name: str) -> None:
    outside = folder.parent / "x"
    outside.write_bytes(b"secret")
    store = FolderStore(str(folder))
    for call in (lambda: store[name], lambda: store.get(name), lambda: name in store, lambda: store.get_many([name])):
        with pytest.raises(PathEscapeError) as err:
            call()
        assert isinstance(err.value, ValueError) and str(folder) in str(err.value)


def test_folder_store_pickles_and_filesystem_prefix(folder: Path) -> None:
    store = open_file_store(f"filesystem://{folder}")
    assert isinstance(store, FolderStore)
    copy: Any = pickle.loads(pickle.dumps(store))
    assert copy["photos/00001.png"] == media_bytes("photo", 1)


def test_open_file_store_dispatch(aux_tar: Path, folder: Path) -> None:
    assert isinstance(open_file_store(str(aux_tar)), IndexedTarStore)
    assert isinstance(open_file_store("filesystem://" + os.fspath(folder)), FolderStore)


def test_indexed_tar_store_without_sample_parts(tmp_path: Path) -> None:
    """An index like Energon 6's (no sample_parts table): members come from their whole sample."""
    import sqlite3

    path = tmp_path / "old"
    write_aux_tar(str(path), 12, shards=2)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    db = sqlite3.connect(path / ".nv-meta" / "index.sqlite")
    db.execute("DROP TABLE sample_parts")
    db.commit()
    db.close()
    store = IndexedTarStore(str(path))
    assert store.get_many(names(12)) == [media_bytes("image", i) for i in range(12)]
    assert "images/00011.jpg" in store and "images/00011.png" not in store and "images/00012.jpg" not in store
    assert store.get("images/00012.jpg") is None


def test_folder_store_keeps_no_descriptor_per_file(tmp_path: Path) -> None:
    """A media folder can hold millions of files: reading them must not pile up open descriptors."""
    for i in range(300):
        (tmp_path / f"{i}.bin").write_bytes(b"x" * i)
    store = FolderStore(str(tmp_path))
    before = len(os.listdir("/proc/self/fd"))
    assert [len(store[f"{i}.bin"]) for i in range(300)] == list(range(300))
    assert [len(b) for b in store.get_many([f"{i}.bin" for i in range(300)])] == list(range(300))
    assert len(os.listdir("/proc/self/fd")) <= before + 1

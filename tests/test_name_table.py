"""The name table (shardstore/index/names.py): lookups by member name without SQL, for aux stores and
``Dataset.read_file``. It must answer exactly as the SQL lookup does, live only in the local cache, follow
a replaced index, survive fork, and fall back to SQL when it cannot be had."""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import sqlite3
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from make_polylithic import media_bytes, write_aux_tar

import shardstore
from shardstore.errors import SampleNotFoundError
from shardstore.filestores import IndexedTarStore
from shardstore.index import names as name_tables
from shardstore.index.sqlite import IndexReader

#: Two pairs of member names with equal crc32 (found by search): the table must tell them apart.
COLLIDING = [("c699378.jpg", "c18020006.jpg"), ("c699379.jpg", "c18020007.jpg")]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache folder; tables are built at the first lookup unless a test says otherwise."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SHARDSTORE_CACHE", str(path))
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "0")
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def tricky(root: Path) -> dict[str, bytes]:
    """Two shards of awkward names: folder keys with dots, multi-dot parts, non-ASCII, a GNU long
    name, crc32-colliding names, a part name twice in one sample (the last one counts, as in a sample read), members
    Energon skips. Prepared; returns what each findable name must read as."""
    (root / "parts").mkdir(parents=True)
    want: dict[str, bytes] = {}
    members = [
        ("dir.with.dots/k1.seg.png", b"png"), ("dir.with.dots/k1.txt", b"one"), ("caf\u00e9/\u00fc\u00df.json", b"{}"),
        ("dup.jpg", b"first"), ("dup.jpg", b"second"), ("dup.txt", b"t"),
        ("deep/" + "x" * 120 + ".txt", b"long"), ("__meta__/info.json", b"skipped"), ("noextension", b"skipped"),
        (COLLIDING[0][0], b"c-a"), (COLLIDING[0][1], b"c-b"), (COLLIDING[1][0], b"only one of the pair"),
    ]
    for n in range(2):
        with tarfile.open(root / "parts" / f"s{n}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members[n * 6 : n * 6 + 6]:
                _add(tar, name, data)
                if not name.startswith("__") and "." in name:
                    want[name] = data
        for i in range(30):  # plain samples too, so slots fill up and probe
            with tarfile.open(root / "parts" / f"p{n}{i:02d}.tar", "w") as tar:
                for part in ("jpg", "cls"):
                    _add(tar, f"p{n}_{i:03d}.{part}", f"{n}{i}{part}".encode())
                    want[f"p{n}_{i:03d}.{part}"] = f"{n}{i}{part}".encode()
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    return want


MISSING = [COLLIDING[1][1], "dup.png", "dir.with.dots/k1", "dir.with.dots/k1.seg", "nodot", "", "__meta__/info.json",
           "caf\u00e9/\u00fc\u00df.JSON", "p0_000.jpgx", "\udcff.jpg"]


def test_colliding_names_really_collide() -> None:
    for a, b in COLLIDING:
        assert zlib.crc32(a.encode()) == zlib.crc32(b.encode())


def test_table_answers_as_sql(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = tricky(tmp_path / "ds")
    monkeypatch.setattr(name_tables, "_PAGE", 3)  # many pages: page bounds must lose nothing
    reader = IndexReader(str(tmp_path / "ds" / ".nv-meta" / "index.sqlite"))
    rows = reader._conn().execute(
        "SELECT s.sample_key, p.part_name FROM samples s JOIN sample_parts p USING (tar_file_id, sample_index)"
    ).fetchall()
    assert reader.use_name_table()
    find = reader._find
    assert find is not None
    for key, part in rows:
        assert find(f"{key}.{part}") == reader.part(key, part) is not None
    for name in MISSING:
        assert find(name) is None
    assert {n for n in want if find(n) is None} == set()


def test_store_and_read_file_through_the_table(tmp_path: Path, cache: Path) -> None:
    want = tricky(tmp_path / "ds")
    before = sorted(p.relative_to(tmp_path / "ds") for p in (tmp_path / "ds").rglob("*"))
    store = IndexedTarStore(str(tmp_path / "ds"))
    ds = shardstore.open(str(tmp_path / "ds"), split=None)
    assert {n: store[n] for n in want} == want
    assert store.get_many(list(want)) == list(want.values())
    assert {n: ds.read_file(n) for n in want} == want
    assert store.dataset.index._find is not None and ds.index._find is not None  # the table answered
    for name in MISSING:
        assert name not in store and store.get(name) is None
        with pytest.raises(SampleNotFoundError):
            ds.read_file(name)
    # the table is in the cache, never in the dataset
    assert sorted(p.relative_to(tmp_path / "ds") for p in (tmp_path / "ds").rglob("*")) == before
    assert [p.name.endswith(f".v{name_tables._VERSION}") for p in (cache / "names").iterdir() if not p.name.endswith(".lock")] == [True]


@pytest.fixture
def aux(tmp_path: Path) -> Path:
    path = tmp_path / "aux"
    write_aux_tar(str(path), 30, shards=2)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    return path


def _names(n: int = 30) -> list[str]:
    return [f"images/{i:05d}.jpg" for i in range(n)]


def test_built_after_so_many_lookups_then_opened_at_once(aux: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "5")
    store = IndexedTarStore(str(aux))
    for i, name in enumerate(_names(4)):
        assert store[name] == media_bytes("image", i)
    assert store.dataset.index._find is None  # 4 lookups: still SQL, nothing built
    assert not os.path.exists(name_tables.name_table_path(store.dataset.index.path))
    assert store[_names()[4]] == media_bytes("image", 4)
    assert store.dataset.index._find is not None  # the 5th built it
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "1000000")
    other = IndexedTarStore(str(aux))  # another process, say: finds the built table at once
    assert other[_names()[9]] == media_bytes("image", 9) and other.dataset.index._find is not None
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "-1")
    off = IndexedTarStore(str(aux))
    assert [off[n] for n in _names()] == [media_bytes("image", i) for i in range(30)]
    assert off.dataset.index._find is None


def test_a_replaced_index_gets_its_own_table(aux: Path) -> None:
    store = IndexedTarStore(str(aux))
    assert store[_names()[3]] == media_bytes("image", 3)
    old = name_tables.name_table_path(store.dataset.index.path)
    # prepared again with other content: sizes and offsets change
    for old_file in (aux / "parts").glob("*.tar*"):
        old_file.unlink()
    with tarfile.open(aux / "parts" / "x.tar", "w") as tar:
        _add(tar, "images/00003.jpg", b"new three")
        _add(tar, "images/00031.jpg", b"thirty-one")
    shardstore.prepare(str(aux), split_ratio="1,0,0", num_workers=1, force_overwrite=True)
    fresh = IndexedTarStore(str(aux))
    assert fresh["images/00003.jpg"] == b"new three" and fresh["images/00031.jpg"] == b"thirty-one"
    assert "images/00004.jpg" not in fresh
    assert name_tables.name_table_path(fresh.dataset.index.path) != old


def _child_reads(store: IndexedTarStore, names: list[str], out: multiprocessing.Queue[list[bytes]]) -> None:
    out.put([store[n] for n in names])


def test_forked_children_read_through_the_inherited_table(aux: Path) -> None:
    store = IndexedTarStore(str(aux))
    assert store[_names()[0]] == media_bytes("image", 0) and store.dataset.index._find is not None
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[list[bytes]] = ctx.Queue()
    procs = [ctx.Process(target=_child_reads, args=(store, _names()[k::2], out)) for k in range(2)]
    for p in procs:
        p.start()
    got = sorted(b for _ in procs for b in out.get(timeout=60))
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert got == sorted(media_bytes("image", i) for i in range(30))


def _build(index: str, out: multiprocessing.Queue[bool]) -> None:
    out.put(IndexReader(index).use_name_table())


def test_concurrent_builders_make_one_table(aux: Path, cache: Path) -> None:
    index = str(aux / ".nv-meta" / "index.sqlite")
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue[bool] = ctx.Queue()
    procs = [ctx.Process(target=_build, args=(index, out)) for _ in range(3)]
    for p in procs:
        p.start()
    assert [out.get(timeout=60) for _ in procs] == [True] * 3
    for p in procs:
        p.join(60)
    files = sorted(p.name for p in (cache / "names").iterdir())
    assert len(files) == 2 and files[1] == files[0] + ".lock"  # no temporary file left behind


def test_lookups_do_not_wait_for_another_builder(aux: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process builds the table (holds its lock), lookups go on by SQL at once; the
    next check after the table is there opens it."""
    import fcntl

    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "4")
    store = IndexedTarStore(str(aux))
    path = name_tables.name_table_path(store.dataset.index.path)
    os.makedirs(os.path.dirname(path))
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a builder in another process would (flock is per open file)
    try:
        assert [store[n] for n in _names()[:9]] == [media_bytes("image", i) for i in range(9)]
        assert store.dataset.index._find is None and not os.path.exists(path)
    finally:
        os.close(fd)
    assert IndexReader(store.dataset.index.path).use_name_table()  # the other builder finishes
    assert [store[n] for n in _names()[9:12]] == [media_bytes("image", i) for i in range(9, 12)]
    assert store.dataset.index._find is not None  # picked up at the 12th lookup


def test_cache_keeps_the_recently_used_tables_within_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each re-prepared index gets a new table: past ``SHARDSTORE_NAME_TABLE_CACHE_MB`` the least
    recently used tables go (opening one counts as use), never the one just built."""
    paths = []
    for n in range(3):
        root = tmp_path / f"aux{n}"
        write_aux_tar(str(root), 30, shards=2)
        shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
        paths.append(str(root / ".nv-meta" / "index.sqlite"))
    assert IndexReader(paths[0]).use_name_table() and IndexReader(paths[1]).use_name_table()
    tables = [name_tables.name_table_path(p) for p in paths]
    size = os.path.getsize(tables[0])
    os.utime(tables[0], (1, 1))  # long unused ...
    os.utime(tables[1], (2, 2))
    assert IndexReader(paths[0]).use_name_table()  # ... until opened again now
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_CACHE_MB", str(2.5 * size / (1 << 20)))  # room for two
    reader = IndexReader(paths[2])
    assert reader.use_name_table()
    assert [os.path.exists(t) for t in tables] == [True, False, True]
    assert not os.path.exists(tables[1] + ".lock")
    assert reader.member("images/00007.jpg") is not None


def test_unusable_cache_falls_back_to_sql(
    aux: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    monkeypatch.setenv("SHARDSTORE_CACHE", str(tmp_path / "a-file" / "cache"))  # cannot be made
    store = IndexedTarStore(str(aux))
    with caplog.at_level(logging.WARNING):
        assert [store[n] for n in _names()] == [media_bytes("image", i) for i in range(30)]
    assert store.dataset.index._find is None
    assert sum("stay on SQL" in r.message for r in caplog.records) == 1  # said once, not per lookup


def test_a_damaged_table_is_built_again(aux: Path) -> None:
    first = IndexedTarStore(str(aux))
    assert first[_names()[1]] == media_bytes("image", 1)
    path = name_tables.name_table_path(first.dataset.index.path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    again = IndexedTarStore(str(aux))
    assert [again[n] for n in _names()] == [media_bytes("image", i) for i in range(30)]
    assert again.dataset.index._find is not None and os.path.getsize(path) == size


def test_energon6_index_has_no_table(aux: Path) -> None:
    """Without ``sample_parts`` there is nothing to build from: members come from their sample."""
    db = sqlite3.connect(aux / ".nv-meta" / "index.sqlite")
    db.execute("DROP TABLE sample_parts")
    db.commit()
    db.close()
    store = IndexedTarStore(str(aux))
    assert store.get_many(_names()) == [media_bytes("image", i) for i in range(30)]
    assert not store.dataset.index.use_name_table() and store.dataset.index._find is None


def test_build_memory_is_a_page_not_the_dataset(aux: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build reads the index a page of samples at a time (fetched rows never exceed a page)."""
    monkeypatch.setattr(name_tables, "_PAGE", 4)
    seen: list[int] = []
    real: Callable[..., object] = name_tables._names

    def spy(rows: list[tuple[str, str, int, int, int]]) -> object:
        seen.append(len(rows))
        return real(rows)

    monkeypatch.setattr(name_tables, "_names", spy)
    assert IndexReader(str(aux / ".nv-meta" / "index.sqlite")).use_name_table()
    assert sum(seen) == 30 and max(seen) <= 4

"""Fuzzing the readers against corrupt index files (issue 9): Hypothesis mutates one index file of a
small prepared dataset at a time (``.tar.idx`` bytes and values, ``index.sqlite`` rows and bytes,
``.info.json`` and ``shardstore.json``, ``split.yaml``) and reads it through every reader path:
``open``, ``len``, ``ds[i]``, iteration, ``get``, ``get_many``, ``read_file``, ``keys``, ``in``,
excluded positions, ``info``, ``ls``, ``cat`` and an aux store. Only typed errors (``ShardstoreError`` subclasses)
may escape, never another exception, a crash or a hang (the timeout below, and Hypothesis'
deadline per case); and whatever a read returns is bytes of the member or sample it names.

The default run tries a few hundred cases; the ``slow`` one 4 x 2,500 (profile ``index-fuzz-slow``,
about a minute on one core).
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore import inspection
from shardstore.errors import ShardstoreError
from shardstore.filestores import IndexedTarStore

pytestmark = pytest.mark.timeout(600)  # a true hang, which no deadline interrupts, fails here

_COMMON: dict[str, Any] = dict(
    deadline=5000,  # ms per case (a case takes a few ms): a read that loops or crawls fails here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    derandomize=True,  # the same cases every run
    database=None,
)
settings.register_profile("index-fuzz", max_examples=60, **_COMMON)
settings.register_profile("index-fuzz-slow", max_examples=2500, **_COMMON)
FAST = settings.get_profile("index-fuzz")
SLOW = settings.get_profile("index-fuzz-slow")

SHARDS = {"parts/a.tar": [f"a{i}" for i in range(4)], "parts/b.tar": [f"b{i}" for i in range(4)]}
PARTS = ("bin", "txt")


def payload(key: str, part: str) -> bytes:
    return (f"{key}.{part}|".encode() * 50)[: 100 + 37 * len(key) + len(part)]


# ----- the dataset and its pristine index files --------------------------------------------------------
class Subject:
    """A prepared dataset whose index files a case mutates, and restores afterwards."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for shard, keys in SHARDS.items():
            (root / shard).parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(root / shard, "w", format=tarfile.USTAR_FORMAT) as tar:
                for key in keys:
                    for part in PARTS:
                        info = tarfile.TarInfo(f"{key}.{part}")
                        data = payload(key, part)
                        info.size, info.mtime = len(data), 1_700_000_000
                        tar.addfile(info, io.BytesIO(data))
        shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
        meta = root / ".nv-meta"
        splits = yaml.safe_load((meta / "split.yaml").read_text())
        splits["exclude"] = ["parts/b.tar/b2"]  # an excluded sample, so the exclude paths run too
        (meta / "split.yaml").write_text(yaml.safe_dump(splits))
        self.files = {
            "a.idx": root / "parts/a.tar.idx",
            "b.idx": root / "parts/b.tar.idx",
            "sqlite": meta / "index.sqlite",
            "info": meta / ".info.json",
            "stats": meta / "shardstore.json",
            "split": meta / "split.yaml",
        }
        self.pristine = {k: p.read_bytes() for k, p in self.files.items()}

    def restore(self) -> None:
        """Put back the files a case changed (only those: writing is most of a case's cost)."""
        for k, p in self.files.items():
            if p.stat().st_size != len(self.pristine[k]) or p.read_bytes() != self.pristine[k]:
                p.write_bytes(self.pristine[k])
        for junk in (self.root / ".nv-meta").glob("index.sqlite-*"):
            junk.unlink()


@pytest.fixture(scope="module")
def subject(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Subject]:
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("cache")
    mp.setenv("SHARDSTORE_CACHE", str(cache))
    subj = Subject(tmp_path_factory.mktemp("fuzz") / "ds")
    yield subj
    mp.undo()
    shutil.rmtree(cache, ignore_errors=True)


# ----- reading everything --------------------------------------------------------------------------------
def _sample_ok(sample: Any) -> None:
    """A sample read is whole and its own: every part is the bytes of ``key.part``."""
    key = sample["__key__"]
    for part in PARTS:
        if part in sample:
            assert sample[part] == payload(key, part), (key, part)


def _typed(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when it raised a typed shardstore error (any other exception escapes)."""
    try:
        return fn()
    except ShardstoreError:
        return None


def _read_dataset(ds: shardstore.Dataset, full: bool) -> None:
    """Every read path of ``ds`` (``full``), or the main ones (a second view of the same files)."""
    n = len(ds)
    for i in (0, 5, n - 1) if full else (-1,):
        sample = _typed(lambda i=i: ds[i])
        if sample is not None:
            _sample_ok(sample)
    if not full:
        assert _typed(lambda: ds.read_file("b1.txt")) in (None, payload("b1", "txt"))
        return
    for sample in _typed(lambda: list(ds.iter())) or []:  # (not list(ds): list() preallocates len(ds) slots)
        _sample_ok(sample)
    for key in ("a1", "b2", "zz"):
        sample = _typed(lambda key=key: ds.get(key))
        if sample is not None:
            assert sample["__key__"] == key
            _sample_ok(sample)
        _typed(lambda key=key: key in ds)
    for sample in _typed(lambda: ds.get_many([0, "a3", 2, "b1"])) or []:
        _sample_ok(sample)
    for name in ("a0.bin", "b1.txt", "nope.bin"):
        data = _typed(lambda name=name: ds.read_file(name))
        assert data is None or data == payload(*name.split(".")), name
    _typed(lambda: list(ds.keys()))
    _typed(ds.excluded_positions)


def read_everything(root: Path) -> None:
    url = str(root)
    for split in ("train", None):
        ds = _typed(lambda split=split: shardstore.open(url, split=split))
        if ds is not None:
            with ds:
                _read_dataset(ds, full=split is not None)
    _typed(lambda: inspection.info(url))
    _typed(lambda: list(inspection.ls(url, split="train")))
    out = io.BytesIO()
    if _typed(lambda: inspection.cat(url, "b0.bin", out)) is not None:
        assert out.getvalue() == payload("b0", "bin")
    store = _typed(lambda: IndexedTarStore(url))
    if store is not None:
        with store:
            assert _typed(lambda: store["a2.bin"]) in (None, payload("a2", "bin"))
            got = _typed(lambda: store.get_many(["b3.txt", "a1.bin"]))
            assert got in (None, [payload("b3", "txt"), payload("a1", "bin")])
            _typed(lambda: store.exists_many(["a0.txt", "x.y"]))


def run_case(subject: Subject, mutate: Callable[[Subject], None]) -> None:
    try:
        mutate(subject)
        read_everything(subject.root)
    finally:
        subject.restore()


# ----- mutations --------------------------------------------------------------------------------------------
class Mutation:
    """A case: ``apply`` changes one index file; ``repr`` says how (what Hypothesis prints)."""

    def __init__(self, apply: Callable[[Subject], None], what: str) -> None:
        self.apply, self.what = apply, what

    def __call__(self, subject: Subject) -> None:
        self.apply(subject)

    def __repr__(self) -> str:
        return self.what

def _flip(data: bytes, at: int, xor: int) -> bytes:
    if not data:
        return data
    at %= len(data)
    return data[:at] + bytes([data[at] ^ (xor or 1)]) + data[at + 1 :]


INTERESTING = [0, 1, 511, 512, 513, 2047, 4096, 10**12, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1]


@st.composite
def tar_idx_mutations(draw: st.DrawFn) -> Mutation:
    which = draw(st.sampled_from(["a.idx", "b.idx"]))
    kind = draw(st.sampled_from(["value", "value", "truncate", "flip", "append", "replace", "swap"]))
    if kind == "value":
        entry = draw(st.integers(0, 4))
        value = draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2**64 - 1), st.integers(0, 12000)))
    elif kind in ("truncate", "flip", "swap"):
        at, xor = draw(st.integers(0, 64)), draw(st.integers(0, 255))
    else:
        blob = draw(st.binary(max_size=64))

    def mutate(s: Subject) -> None:
        path = s.files[which]
        data = s.pristine[which]
        if kind == "value":
            data = data[: 8 * entry] + value.to_bytes(8, "little") + data[8 * entry + 8 :]
        elif kind == "truncate":
            data = data[: at % (len(data) + 1)]
        elif kind == "flip":
            data = _flip(data, at, xor)
        elif kind == "append":
            data += blob
        elif kind == "replace":
            data = blob
        else:  # two entries swapped
            i, j = at % 5, xor % 5
            words = [data[k : k + 8] for k in range(0, len(data), 8)]
            words[i], words[j] = words[j], words[i]
            data = b"".join(words)
        path.write_bytes(data)

    return Mutation(mutate, f"{which} {kind} " + (f"entry {entry} = {value}" if kind == "value" else f"at {at} xor {xor}" if kind in ("truncate", "flip", "swap") else repr(blob)))


_SQL_VALUES = st.one_of(
    st.sampled_from([*(v for v in INTERESTING if v < 2**63), -1, -512, -(2**63)]),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 12000),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
)
_COLUMNS = {
    "samples": ["tar_file_id", "sample_key", "sample_index", "byte_offset", "byte_size"],
    "sample_parts": ["tar_file_id", "sample_index", "part_name", "content_byte_offset", "content_byte_size"],
}


@st.composite
def sqlite_mutations(draw: st.DrawFn) -> Mutation:
    kind = draw(st.sampled_from(["update", "update", "update", "delete", "duplicate", "flip", "truncate", "drop"]))
    table = draw(st.sampled_from(sorted(_COLUMNS)))
    column = draw(st.sampled_from(_COLUMNS[table]))
    rowid = draw(st.integers(1, 16))
    value = draw(_SQL_VALUES) if kind == "update" else None
    at, xor = draw(st.integers(0, 1 << 16)), draw(st.integers(0, 255))

    def mutate(s: Subject) -> None:
        path = s.files["sqlite"]
        if kind in ("flip", "truncate"):
            data = s.pristine["sqlite"]
            path.write_bytes(_flip(data, at, xor) if kind == "flip" else data[: at % (len(data) + 1)])
            return
        db = sqlite3.connect(path)
        try:
            with db:
                if kind == "update":
                    db.execute(f"UPDATE {table} SET {column}=? WHERE rowid=?", (value, rowid))
                elif kind == "delete":
                    db.execute(f"DELETE FROM {table} WHERE rowid=?", (rowid,))
                elif kind == "duplicate" and table == "sample_parts":
                    db.execute("INSERT INTO sample_parts SELECT * FROM sample_parts WHERE rowid=?", (rowid,))
                elif kind == "drop":
                    db.execute(f"DROP TABLE {table}")
        except sqlite3.IntegrityError:
            pass  # (a duplicate sample_key): the file stays as it was
        finally:
            db.close()

    return Mutation(mutate, f"{table}.{column} rowid {rowid} {kind} {value!r} (at {at} xor {xor})")


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=12), inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def json_mutations(draw: st.DrawFn) -> Mutation:
    which = draw(st.sampled_from(["info", "info", "stats"]))
    kind = draw(st.sampled_from(["value", "value", "drop", "add", "rename", "whole", "flip", "raw"]))
    value = draw(_JSON)
    name = draw(st.sampled_from(["parts/a.tar", "parts/b.tar", "parts/c.tar", "../x.tar", "", "parts/a.tar/"]))
    at, xor = draw(st.integers(0, 4096)), draw(st.integers(0, 255))
    raw = draw(st.binary(max_size=64))
    field = draw(st.sampled_from(["size", "mtime", "etag"]))

    def mutate(s: Subject) -> None:
        data = s.pristine[which]
        doc = json.loads(data)
        table = doc["shard_counts"] if which == "info" else doc["shards"]
        first = next(iter(table))
        if kind == "value":
            if which == "info":
                table[first] = value
            else:
                table[first][field] = value
        elif kind == "drop":
            del table[first]
        elif kind == "add":
            table[name] = value
        elif kind == "rename":
            table[name] = table.pop(first)
        elif kind == "whole":
            doc = value
        out = json.dumps(doc).encode() if kind not in ("flip", "raw") else (_flip(data, at, xor) if kind == "flip" else raw)
        s.files[which].write_bytes(out)

    return Mutation(mutate, f"{which} {kind} {field} {name!r} {value!r} (at {at} xor {xor}, raw {raw!r})")


@st.composite
def split_mutations(draw: st.DrawFn) -> Mutation:
    kind = draw(st.sampled_from(["train", "train", "exclude", "exclude", "whole", "flip", "raw", "bomb"]))
    entries = draw(
        st.lists(
            st.one_of(
                st.sampled_from(["parts/a.tar", "parts/b.tar", "parts/{a,b}.tar", "parts/c.tar", "parts/b.tar/b1",
                                 "parts/a.tar/a0", "parts/a.tar/zz", "{", "}", "parts/{a..b}.tar", "../parts/a.tar"]),
                st.text(max_size=16),
            ),
            max_size=4,
        )
    )
    value = draw(_JSON)
    at, xor = draw(st.integers(0, 4096)), draw(st.integers(0, 255))
    raw = draw(st.binary(max_size=64))

    def mutate(s: Subject) -> None:
        data = s.pristine["split"]
        doc = yaml.safe_load(data)
        if kind == "train":
            doc["split_parts"]["train"] = entries
        elif kind == "exclude":
            doc["exclude"] = entries
        elif kind == "bomb":  # a brace pattern that names a billion shards
            doc["split_parts"]["train"] = ["parts/{0..999999999}.tar"]
            doc["exclude"] = ["parts/a.tar/{0..999999999}"]
        elif kind == "whole":
            doc = value
        out = yaml.safe_dump(doc).encode() if kind not in ("flip", "raw") else (_flip(data, at, xor) if kind == "flip" else raw)
        s.files["split"].write_bytes(out)

    return Mutation(mutate, f"split.yaml {kind} {entries!r} {value!r} (at {at} xor {xor}, raw {raw!r})")


# ----- the tests ----------------------------------------------------------------------------------------------
MUTATIONS = {
    "tar_idx": tar_idx_mutations(),
    "index_sqlite": sqlite_mutations(),
    "json": json_mutations(),
    "split_yaml": split_mutations(),
}


def test_the_pristine_dataset_reads_whole(subject: Subject) -> None:
    run_case(subject, lambda s: None)
    ds = shardstore.open(str(subject.root))
    assert len(ds) == 8 and ds.read_file("a0.bin") == payload("a0", "bin") and ds.excluded_positions() == [6]


@pytest.mark.parametrize("target", sorted(MUTATIONS))
def test_corrupt_index_files_give_only_typed_errors(subject: Subject, target: str) -> None:
    @FAST
    @given(MUTATIONS[target])
    def case(mutate: Callable[[Subject], None]) -> None:
        run_case(subject, mutate)

    case()


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(MUTATIONS))
def test_corrupt_index_files_give_only_typed_errors_10000_cases(subject: Subject, target: str) -> None:
    @SLOW
    @given(MUTATIONS[target])
    def case(mutate: Callable[[Subject], None]) -> None:
        run_case(subject, mutate)

    case()

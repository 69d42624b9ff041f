"""A shard rewritten with the same size, and corrupt index values, read through every path
(issue 9, points 5 and 6): ``ds[i]``, ``get``, ``get_many``, ``read_file``, ``cat`` (CLI) and an
aux store raise a typed error (``StaleIndexError``, ``IndexCorruptError``) naming the file, and
never return another member's bytes. The mount's side is in tests/mount/test_mount_stale.py.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import IndexCorruptError, StaleIndexError
from shardstore.filestores import IndexedTarStore
from shardstore.index.taridx import DIGEST_SCHEME as TARIDX_SCHEME
from shardstore.membercheck import HEADER_SPAN

KEYS = [f"k{i}" for i in range(6)]
SHARD = "parts/a.tar"


def payload(key: str, part: str) -> bytes:
    return (f"{key}.{part}:".encode() * 60)[:300]


def write_shard(path: Path, keys: list[str], fmt: int = tarfile.USTAR_FORMAT, prefix: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for key in keys:
            for part in ("bin", "txt"):
                info = tarfile.TarInfo(f"{prefix}{key}.{part}")
                data = payload(prefix + key, part)
                info.size, info.mtime = len(data), 1_700_000_000
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def ds_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SHARDSTORE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "ds"
    write_shard(root / SHARD, KEYS)
    write_shard(root / "parts/b.tar", ["m0", "m1"])
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    return root


def rewrite_same_size(root: Path, keep_mtime: bool) -> None:
    """The shard again with the same members and sizes, the samples rotated: every offset of the
    index now holds another sample's member of the same size."""
    shard = root / SHARD
    st = shard.stat()
    write_shard(root / "tmp.tar", KEYS[1:] + KEYS[:1])
    os.replace(root / "tmp.tar", shard)
    assert shard.stat().st_size == st.st_size
    if keep_mtime:  # as `cp -p` of another file, or a filesystem with coarse timestamps
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # as a rewrite a moment later


def cat(root: Path, name: str) -> tuple[int, str, bytes]:
    result = CliRunner().invoke(main, ["cat", str(root), name])
    return result.exit_code, result.stderr, result.stdout_bytes


def named_reads(root: Path) -> Iterator[tuple[str, Callable[[], object]]]:
    """Every read that names what it wants (a key or a member), each from a fresh reader."""
    yield "get", lambda: shardstore.open(str(root)).get("k0")
    yield "get_many keys", lambda: shardstore.open(str(root)).get_many(["k2", "k0"])
    yield "read_file", lambda: shardstore.open(str(root)).read_file("k0.bin")
    yield "read_file txt", lambda: shardstore.open(str(root)).read_file("k3.txt")
    yield "aux store", lambda: IndexedTarStore(str(root))["k0.bin"]
    yield "aux store get_many", lambda: IndexedTarStore(str(root)).get_many(["k4.txt", "k0.bin"])


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-changed", "mtime-kept"])
def test_same_size_rewrite_never_serves_another_members_bytes(ds_path: Path, keep_mtime: bool) -> None:
    rewrite_same_size(ds_path, keep_mtime)
    for what, read in named_reads(ds_path):
        with pytest.raises(StaleIndexError, match="a.tar") as info:
            read()
        assert "\n" not in str(info.value), what
    code, err, out = cat(ds_path, "k0.bin")
    assert code == 1 and out == b"" and err.startswith("shardstore: error: ") and err.count("\n") == 1
    assert "a.tar" in err and "changed" in err or "modified" in err
    ds = shardstore.open(str(ds_path))
    if not keep_mtime:
        for read in (lambda: ds[0], lambda: ds.get_many([0, 1]), lambda: list(ds)):
            with pytest.raises(StaleIndexError, match="was modified"):
                read()
    else:
        # By position nothing names the sample: what lies at position 0 now is read whole, and its
        # key says which sample it is (documented in docs/format.md); its bytes are its own.
        sample = ds[0]
        assert sample["__key__"] == "k1" and sample["bin"] == payload("k1", "bin")
    # the other shard is untouched and reads on
    assert ds.get("m1")["txt"] == payload("m1", "txt") and ds.read_file("m0.bin") == payload("m0", "bin")


def test_unchanged_shards_read_with_one_pread(ds_path: Path, record_preads: Callable[[], list[tuple[int, int]]]) -> None:
    ds = shardstore.open(str(ds_path))
    assert ds.read_file("k1.bin") == payload("k1", "bin")  # first read of the shard: it is checked
    reads = record_preads()
    assert ds.read_file("k2.txt") == payload("k2", "txt")
    assert len(reads) == 1 and reads[0][0] == 300 + HEADER_SPAN  # the payload and the headers before it


@pytest.mark.parametrize(
    "fmt, prefix",
    [
        (tarfile.GNU_FORMAT, "long/" + "x" * 120 + "/"),
        (tarfile.PAX_FORMAT, "long/" + "y" * 120 + "/"),
        (tarfile.PAX_FORMAT, "caf\u00e9/\u00fc\u00df/"),
        (tarfile.USTAR_FORMAT, "a" * 60 + "/" + "b" * 60 + "/"),
    ],
    ids=["gnu-long", "pax-long", "pax-utf8", "ustar-prefix"],
)
def test_no_false_alarm_for_long_and_non_ascii_names(
    tmp_path: Path, fmt: int, prefix: str, record_preads: Callable[[], list[tuple[int, int]]]
) -> None:
    root = tmp_path / "ds"
    write_shard(root / "s.tar", KEYS, fmt=fmt, prefix=prefix)
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    ds = shardstore.open(str(root))
    assert ds.read_file(f"{prefix}k0.bin") == payload(prefix + "k0", "bin")
    reads = record_preads()
    for key in KEYS:
        assert ds.read_file(f"{prefix}{key}.txt") == payload(prefix + key, "txt")
    assert len(reads) == len(KEYS)  # shown by the headers in the same read: no second look
    assert IndexedTarStore(str(root)).get_many([f"{prefix}k5.bin", f"{prefix}k1.txt"]) == [
        payload(prefix + "k5", "bin"), payload(prefix + "k1", "txt")
    ]


# ----- corrupt index values (point 6) -------------------------------------------------------------
def _idx(root: Path) -> Path:
    return root / (SHARD + ".idx")


def _set_idx(root: Path, values: np.ndarray) -> None:
    _idx(root).write_bytes(values.astype("<u8").tobytes())


@pytest.mark.parametrize(
    "damage",
    ["entry-1e12", "last-1e12", "truncated", "empty", "decreasing"],
)
def test_corrupt_tar_idx_is_a_typed_error_on_every_position_path(ds_path: Path, damage: str) -> None:
    offs = np.fromfile(_idx(ds_path), dtype="<u8")
    if damage == "entry-1e12":
        offs[2] = 10**12
        _set_idx(ds_path, offs)
    elif damage == "last-1e12":
        offs[-1] = 10**12
        _set_idx(ds_path, offs)
    elif damage == "truncated":
        _idx(ds_path).write_bytes(_idx(ds_path).read_bytes()[:-3])
    elif damage == "empty":
        _idx(ds_path).write_bytes(b"")
    else:
        offs[3], offs[4] = offs[4], offs[3]
        _set_idx(ds_path, offs)
    for read in (
        lambda ds: ds[1],
        lambda ds: ds.get_many([0, 3]),
        lambda ds: list(ds),
        lambda ds: ds.get("k1"),
    ):
        with pytest.raises(StaleIndexError, match=r"a\.tar") as info:
            read(shardstore.open(str(ds_path)))
        assert "\n" not in str(info.value)
        if damage != "last-1e12":
            assert isinstance(info.value, IndexCorruptError) and info.value.path.endswith("a.tar.idx")


# A member is 1,024 bytes here (a 512-byte header, 300 bytes of data padded to 512), a sample two
# members: moves by whole members land on other headers, so the parse alone cannot tell.
MEMBER = 1024


@pytest.mark.parametrize(
    "move",
    [
        pytest.param(lambda o: o + MEMBER, id="all-plus-2-blocks"),  # the last sample loses a part
        pytest.param(lambda o: np.concatenate([o[:2], o[2:3] + MEMBER, o[3:]]), id="one-start-plus-2-blocks"),
        pytest.param(lambda o: np.concatenate([o[:2], o[2:3] - MEMBER, o[3:]]), id="one-start-minus-2-blocks"),
        pytest.param(lambda o: o + 2 * MEMBER, id="all-plus-one-sample"),  # every position reads its neighbour
        pytest.param(lambda o: np.concatenate([o[:-1], o[-1:] - MEMBER]), id="end-minus-2-blocks"),
    ],
)
def test_tar_idx_offsets_moved_by_whole_members_are_refused(ds_path: Path, move: Callable[[np.ndarray], np.ndarray]) -> None:
    """Offsets moved by whole members still land on tar headers: a read by position parses a
    sample there, short of a part or another sample whole, and nothing in the range says so. The
    ``.tar.idx`` digest prepare records in ``shardstore.json`` refuses the file on the shard's
    first read, on every position path; the other shard reads on."""
    offs = np.fromfile(_idx(ds_path), dtype="<u8").astype(np.int64)
    _set_idx(ds_path, move(offs))
    for read in (
        lambda ds: [ds[i] for i in range(len(KEYS))],
        lambda ds: ds.get_many(range(len(KEYS))),
        lambda ds: list(ds),
        lambda ds: ds.get("k2"),
    ):
        with pytest.raises(IndexCorruptError, match="prepare") as info:
            read(shardstore.open(str(ds_path)))
        assert info.value.path.endswith("a.tar.idx") and "\n" not in str(info.value)
    ds = shardstore.open(str(ds_path))
    assert ds[len(KEYS)]["bin"] == payload("m0", "bin") and ds.get("m1")["txt"] == payload("m1", "txt")
    res = CliRunner().invoke(main, ["check", str(ds_path)])
    assert res.exit_code == 1 and "a.tar.idx" in res.output and "prepare wrote" in res.output


@pytest.mark.parametrize("without", ["digest", "shardstore.json"])
def test_tar_idx_without_a_recorded_digest_reads(ds_path: Path, without: str) -> None:
    """A dataset Energon prepared has no ``shardstore.json``, one prepared by an older shardstore
    no ``tar_idx`` digest in it: both read as before."""
    meta = ds_path / ".nv-meta/shardstore.json"
    if without == "digest":
        data = json.loads(meta.read_text())
        assert all(entry.pop("tar_idx").startswith(TARIDX_SCHEME + ":") for entry in data["shards"].values())
        meta.write_text(json.dumps(data))
    else:
        meta.unlink()
    ds = shardstore.open(str(ds_path))
    assert [s["__key__"] for s in ds] == KEYS + ["m0", "m1"]
    assert ds[2]["bin"] == payload("k2", "bin")


def _sql(root: Path, statement: str) -> None:
    db = sqlite3.connect(root / ".nv-meta" / "index.sqlite")
    with db:
        assert db.execute(statement).rowcount > 0
    db.close()


PART = "UPDATE sample_parts SET {} WHERE tar_file_id=0 AND sample_index=0 AND part_name='bin'"
SAMPLE = "UPDATE samples SET {} WHERE sample_key='k0'"


@pytest.mark.parametrize(
    "statement",
    [
        PART.format("content_byte_offset=-5"),
        PART.format("content_byte_offset=1000000000000"),
        PART.format("content_byte_size=-1"),
        PART.format("content_byte_size=1000000000000"),
        PART.format("content_byte_offset='x'"),
        PART.format("tar_file_id=99"),
    ],
    ids=["offset-negative", "offset-huge", "size-negative", "size-huge", "offset-text", "tar-file-id"],
)
def test_corrupt_sample_parts_rows_through_every_member_path(ds_path: Path, statement: str) -> None:
    _sql(ds_path, statement)
    reads = [
        lambda: shardstore.open(str(ds_path)).read_file("k0.bin"),
        lambda: IndexedTarStore(str(ds_path))["k0.bin"],
        lambda: IndexedTarStore(str(ds_path)).get_many(["k1.bin", "k0.bin"]),
    ]
    if statement.startswith("UPDATE sample_parts SET tar_file_id"):  # the row left its sample: the member is gone, not misread
        for read in reads:
            with pytest.raises(KeyError):
                read()
        return
    for read in reads:
        with pytest.raises(IndexCorruptError, match=r"a\.tar.*member 'k0\.bin'") as info:
            read()
        assert "\n" not in str(info.value)
    code, err, out = cat(ds_path, "k0.bin")
    assert code == 1 and out == b"" and "member 'k0.bin'" in err and err.count("\n") == 1
    assert shardstore.open(str(ds_path)).read_file("k1.bin") == payload("k1", "bin")  # other rows read on


@pytest.mark.parametrize(
    "statement",
    [
        SAMPLE.format("byte_offset=-512"),
        SAMPLE.format("byte_offset=1000000000000"),
        SAMPLE.format("byte_size=1000000000000"),
        SAMPLE.format("sample_index=77"),
        SAMPLE.format("tar_file_id=99"),
        SAMPLE.format("tar_file_id=-1"),
    ],
)
def test_corrupt_samples_rows_through_every_key_path(ds_path: Path, statement: str) -> None:
    _sql(ds_path, statement)
    ds = shardstore.open(str(ds_path))
    for read in (lambda: ds.get("k0"), lambda: ds.get_many(["k1", "k0"])):
        with pytest.raises(IndexCorruptError, match="k0") as info:
            read()
        assert "\n" not in str(info.value)
    assert ds.get("k1")["bin"] == payload("k1", "bin")


def test_corrupt_tar_file_id_in_a_member_row(ds_path: Path) -> None:
    """A ``sample_parts`` row that names a shard .info.json does not have, kept in its sample."""
    _sql(ds_path, "UPDATE samples SET tar_file_id=99 WHERE sample_key='k0'")
    _sql(ds_path, "UPDATE sample_parts SET tar_file_id=99 WHERE tar_file_id=0 AND sample_index=0")
    with pytest.raises(IndexCorruptError, match="tar_file_id 99"):
        shardstore.open(str(ds_path)).read_file("k0.txt")
    code, err, _ = cat(ds_path, "k0.txt")
    assert code == 1 and "tar_file_id 99" in err


CLI_IN_A_BOX = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a regression is a MemoryError, not the OOM killer
from shardstore.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    "split_yaml",
    [
        "split_parts: {train: ['parts/{0..999999999}.tar']}\nexclude: []\n",
        "split_parts: {train: ['parts/a.tar']}\nexclude: ['parts/a.tar/{0..99999999999}']\n",
        "split_parts: {train: 5}\n",
        "split_parts: {train: ['parts/{a.tar']}\n",
    ],
    ids=["shard-bomb", "exclude-bomb", "not-a-list", "unbalanced"],
)
def test_split_yaml_bombs_and_types_through_the_cli(ds_path: Path, split_yaml: str) -> None:
    """A brace pattern naming a billion shards is refused before it is expanded (it used to take
    gigabytes), by every command; other damage is a one-line error too."""
    (ds_path / ".nv-meta/split.yaml").write_text(split_yaml)
    for args in (["info"], ["ls", "--split", "train"], ["preview", "--split", "train"], ["check"], ["cat"]):
        cmd = [sys.executable, "-c", CLI_IN_A_BOX, *args, str(ds_path)] + (["k0.bin"] if args == ["cat"] else [])
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in res.stderr and "MemoryError" not in res.stderr, (args, res.stderr[-800:])
        if args == ["cat"] and res.returncode == 0:  # no split needed: the bytes, or a one-line error below
            assert res.stdout.encode() == payload("k0", "bin")
        elif args == ["check"]:
            assert res.returncode == 1 and "split.yaml" in res.stdout
        else:
            assert res.returncode == 1 and res.stderr.startswith("shardstore: error: ") and res.stderr.count("\n") == 1, (args, res.stderr)

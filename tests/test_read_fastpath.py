"""The random-access hot path: the in-memory header parse (``plain_members`` and its fallback),
the fast branch of ``split_name``, the adler32 checksum, and ``ds[i]`` over shards that need the
fallback. Each fast path must give exactly what the general code gives."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tar_headers import set_header_field

import shardstore
from shardstore.errors import ShardstoreError, TarFormatError
from shardstore.keys import split_name
from shardstore.tarscan import REGULAR, _unsigned_checksum, iter_members, plain_members, regular_members

_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # DESIGN.md section 4, written out again on purpose
_SKIP = re.compile(r"__[^/]*__($|/)")


def make_tar(
    members: list[tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT, end_marker: bool = False
) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    if end_marker:
        return raw
    # A sample's byte range ends where its last member's padded data ends: cut the end marker.
    members_end = max(m.offset_data + ((m.size + 511) & ~511) for m in tarfile.open(fileobj=io.BytesIO(raw)))
    return raw[:members_end]


def walked(data: bytes) -> list[tuple[str, int, int]]:
    """The general walker's answer, as ``regular_members`` reports it."""
    return [
        (m.name, m.data_offset, m.size)
        for m in iter_members(lambda o, n: data[o : o + n], len(data), "x.tar")
        if m.kind == REGULAR
    ]


SAMPLE = [
    ("s0001.jpg", os.urandom(5000)),
    ("s0001.txt", b"a caption"),
    ("s0001.json", b"{}"),
    ("s0001.e", b""),
]


def test_plain_ustar_takes_the_fast_path_and_agrees_with_the_walker() -> None:
    data = make_tar(SAMPLE)
    fast = plain_members(data)
    assert fast is not None
    assert fast == walked(data) == regular_members(data, "x.tar")
    assert [data[o : o + n] for _, o, n in fast] == [d for _, d in SAMPLE]


def test_ustar_name_prefix_is_joined() -> None:
    name = "d" * 80 + "/" + "e" * 60 + "/k.jpg"  # > 100 characters: tarfile puts the folders in the prefix
    data = make_tar([(name, b"x")])
    assert data[345] != 0
    assert plain_members(data) == walked(data) == [(name, 512, 1)]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_extension_headers_fall_back_to_the_walker(fmt: int) -> None:
    long = "f" * 120 + "/s1.jpg"
    data = make_tar([(long, b"abc"), ("s1.txt", b"t"), ("ünï.cls", b"1")], fmt=fmt)
    assert plain_members(data) is None
    assert regular_members(data, "x.tar") == walked(data)
    assert [n for n, _, _ in regular_members(data, "x.tar")] == [long, "s1.txt", "ünï.cls"]


def test_anything_unusual_falls_back() -> None:
    base = make_tar(SAMPLE[:2])
    second = 512 + ((5000 + 511) & ~511)
    cases = {
        "directory type": set_header_field(base, 0, 156, b"5"),
        "v7 header (no magic)": set_header_field(base, second, 257, b"\0" * 6),
        "base-256 size": set_header_field(base, second, 124, b"\x80" + (9).to_bytes(11, "big")),
        "garbage size": set_header_field(base, second, 124, b"12x4\0"),
        "short buffer": base[:-1],
        "old-style directory": make_tar([("dir/", b"")]),
        "trailing end marker": make_tar(SAMPLE[:1], end_marker=True),
    }
    for what, data in cases.items():
        assert plain_members(data) is None, what
        try:  # the walker decides; what it says is what regular_members says
            expected: object = walked(data)
        except ShardstoreError as e:
            expected = type(e)
        try:
            got: object = regular_members(data, "x.tar")
        except ShardstoreError as e:
            got = type(e)
        assert got == expected, what


def test_a_bad_checksum_is_caught_by_the_fallback_only_when_the_structure_breaks() -> None:
    """The fast path trusts prepare's checksum check; the walker, used on any structural doubt, checks it."""
    data = bytearray(make_tar(SAMPLE[:2]))
    data[257] = ord("X")  # the magic: the fast path refuses, the walker finds the checksum wrong
    with pytest.raises(TarFormatError, match="checksum"):
        regular_members(bytes(data), "x.tar")


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=512, max_size=512))
def test_adler32_checksum_is_the_byte_sum(hdr: bytes) -> None:
    assert _unsigned_checksum(hdr) == sum(hdr) - sum(hdr[148:156]) + 256
    assert _unsigned_checksum(b"junk" + hdr, 4) == _unsigned_checksum(hdr)


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="ab._/\n_é", max_size=12))
def test_split_name_fast_branch_agrees_with_the_rules(name: str) -> None:
    if _SKIP.match(name):
        expected = None
    else:
        m = _NAME.match(name)
        expected = (m.group(1), m.group(2)) if m else None
    assert split_name(name) == expected


def test_reads_by_position_through_the_fallback(tmp_path: Path) -> None:
    """Shards in GNU and PAX format (long and non-ASCII names) read the same as tarfile sees them."""
    root = tmp_path / "ds"
    expected: dict[str, dict[str, bytes]] = {}
    for n, fmt in enumerate([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]):
        members = []
        for i in range(5):
            key = f"{'deep/' * 25 if i % 2 else ''}k{n}-{i}{'é' if fmt == tarfile.PAX_FORMAT else ''}"
            parts = {"jpg": os.urandom(100 + i), "txt": f"caption {i}".encode()}
            expected[key] = parts
            members += [(f"{key}.{p}", d) for p, d in parts.items()]
        (root / "parts").mkdir(parents=True, exist_ok=True)
        (root / "parts" / f"shard-{n}.tar").write_bytes(make_tar(members, fmt=fmt, end_marker=True))
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    ds = shardstore.open(str(root))
    got = {
        s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")}
        for s in (ds[i] for i in range(len(ds)))
    }
    assert got == expected
    assert [ds[i]["__index__"] for i in range(len(ds))] == list(range(len(ds)))
    assert ds[-1]["__key__"] == ds[len(ds) - 1]["__key__"]


def test_a_forked_child_opens_its_own_index_connection_and_descriptors(tmp_path: Path) -> None:
    """The per-process state is dropped by an at-fork hook (no getpid() per read): a child that
    inherits a used Dataset must start with no connection and no descriptors, and read correctly."""
    import multiprocessing

    root = tmp_path / "ds"
    (root / "parts").mkdir(parents=True)
    (root / "parts" / "a.tar").write_bytes(
        make_tar([(f"k{i}.txt", b"x" * i) for i in range(1, 6)], end_marker=True)
    )
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    ds = shardstore.open(str(root))
    assert ds.get("k3")["txt"] == b"xxx" and ds[0]["txt"] == b"x"  # parent state: connection and fds in use
    parent_conn = ds.index._conn()
    assert ds.storage._fds  # type: ignore[attr-defined]

    def child(q: multiprocessing.Queue[object]) -> None:
        fresh = getattr(ds.index._local, "conn", None) is None and not ds.storage._fds  # type: ignore[attr-defined]
        ok = ds.get("k4")["txt"] == b"xxxx" and ds[4]["txt"] == b"xxxxx" and ds.read_file("k2.txt") == b"xx"
        q.put((fresh, ok, ds.index._conn() is not parent_conn))

    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[object] = ctx.Queue()
    proc = ctx.Process(target=child, args=(q,))
    proc.start()
    result = q.get(timeout=60)
    proc.join(timeout=60)
    assert result == (True, True, True)
    assert proc.exitcode == 0
    assert ds.get("k1")["txt"] == b"x"  # the parent's connection is untouched

"""The compiled header walk (``shardstore/_tarwalk.c``) against the Python walker, its reference.

Both walk the same generated tars (``tarfile`` in ustar, GNU and PAX formats, from the fuzz
strategies of ``test_tarscan_fuzz``) and the same mutated ones (byte flips, truncation, garbage,
hand-made header spellings), with several batch sizes; they must hand out the same members and
raise the same error (type, message, file and offset). ``plain_members`` and ``fill`` (the read
path) too: ``fill`` either declines (None) or gives what the Python path makes of the range.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator

import pytest
from ci import in_ci
from hypothesis import given
from hypothesis import strategies as st
from tar_headers import set_header_field
from test_tarscan_fuzz import (
    FORMATS,
    FUZZ,
    build,
    byte_flips,
    flipped,
    garbage_modes,
    member_specs,
    with_garbage,
)

from shardstore import tarscan
from shardstore.errors import TarFormatError
from shardstore.keys import split_name

pytestmark = pytest.mark.timeout(120)

COMPILED = tarscan._tarwalk
if COMPILED is None:
    if in_ci():  # CI installs from a fresh clone with a compiler: the extension must be there
        raise AssertionError("shardstore._tarwalk was not built (or SHARDSTORE_PURE_PYTHON is set)")
    pytest.skip("shardstore._tarwalk is not built here", allow_module_level=True)

Outcome = tuple[list[tuple[str, str, int, int, int]], tuple[type, str, str | None, int | None] | None]


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    yield
    tarscan._tarwalk = COMPILED


def walk(data: bytes, compiled: bool, batch_size: int = 4096) -> Outcome:
    """Members (as tuples) then the error, if any, of a buffered walk with or without ``_tarwalk``."""
    tarscan._tarwalk = COMPILED if compiled else None
    members: list[tuple[str, str, int, int, int]] = []
    try:
        batches = tarscan.iter_member_batches(
            lambda o, n: data[o : o + n], len(data), "fuzz.tar", batch_size, buffer=data
        )
        for batch in batches:
            assert len(batch) > 0
            members += [(m.name, m.kind, m.header_offset, m.data_offset, m.size) for m in batch.members()]
    except TarFormatError as e:
        return members, (type(e), str(e), e.path, e.offset)
    finally:
        tarscan._tarwalk = COMPILED
    return members, None


def plain(
    data: bytes, compiled: bool, lo: int = 0, hi: int | None = None
) -> list[tuple[str, int, int]] | None:
    tarscan._tarwalk = COMPILED if compiled else None
    try:
        return tarscan.plain_members(data, lo, hi)
    finally:
        tarscan._tarwalk = COMPILED


def filled(data: bytes, lo: int, hi: int) -> tuple[str, dict[str, bytes]] | None:
    """``_tarwalk.fill`` of ``data[lo:hi]``: (key, parts) or None (declined)."""
    parts: dict[str, bytes] = {}
    key = COMPILED.fill(parts, data, lo, hi)
    return None if key is None else (key, parts)


def python_sample(data: bytes, lo: int, hi: int) -> tuple[str, dict[str, bytes]] | None:
    """The reference for ``fill``: the Python plain parse and ``split_name``; None where the range
    is not one sample (the reader then raises its stale-index error)."""
    members = plain(data, False, lo, hi)
    if members is None:
        return None
    key, parts = None, {}
    for name, start, size in members:
        kp = split_name(name)
        if kp is None:
            continue
        if key is not None and kp[0] != key:
            return None
        key, parts[kp[1]] = kp[0], data[start : start + size]
    return None if key is None else (key, parts)


def assert_fill_agrees(data: bytes, lo: int, hi: int) -> None:
    got = filled(data, lo, hi)
    if got is not None:
        assert got == python_sample(data, lo, hi), (lo, hi)


def assert_same(data: bytes, batch_sizes: tuple[int, ...] = (4096, 1, 2, 3)) -> Outcome:
    want = walk(data, compiled=False)
    for batch_size in batch_sizes:
        assert walk(data, compiled=True, batch_size=batch_size) == want, batch_size
        assert walk(data, compiled=False, batch_size=batch_size) == want, batch_size
    # The read path parses a sample's range, which ends before the end marker: ranges between
    # block boundaries (a whole tar always ends in zero blocks, where both give None).
    blocks = list(range(0, len(data) + 1, 512)) + [len(data)]
    for lo in sorted({0, 512, 1024} | {m[2] for m in want[0][:4]}):
        for hi in blocks:
            assert plain(data, True, lo, hi) == plain(data, False, lo, hi), (lo, hi)
            assert_fill_agrees(data, lo, hi)
    return want


@FUZZ
@given(fmt=st.sampled_from(sorted(FORMATS)), specs=member_specs(), global_comment=st.booleans())
def test_generated_tars(fmt: str, specs: list[tuple[str, str, int]], global_comment: bool) -> None:
    global_pax = {"comment": "fuzz"} if global_comment and fmt == "pax" else None
    members, error = assert_same(build(fmt, specs, global_pax))
    assert error is None and len(members) == len(specs)


@FUZZ
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    specs=member_specs(),
    flips=byte_flips,
    header_bias=st.booleans(),
)
def test_byte_flips(
    fmt: str, specs: list[tuple[str, str, int]], flips: list[tuple[int, int]], header_bias: bool
) -> None:
    data = build(fmt, specs)
    assert_same(flipped(data, _offsets(data), flips, header_bias))


@FUZZ
@given(fmt=st.sampled_from(sorted(FORMATS)), specs=member_specs(), cut=st.integers(0, 10**9))
def test_truncation(fmt: str, specs: list[tuple[str, str, int]], cut: int) -> None:
    data = build(fmt, specs)
    assert_same(data[: cut % (len(data) + 1)])


@FUZZ
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    specs=member_specs(),
    garbage=st.binary(min_size=1, max_size=2048),
    where=st.integers(0, 10**9),
    mode=garbage_modes,
)
def test_garbage(fmt: str, specs: list[tuple[str, str, int]], garbage: bytes, where: int, mode: str) -> None:
    assert_same(with_garbage(build(fmt, specs), garbage, where, mode))


def _plain_tar(n: int, size: int = 700) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(n):
            info = tarfile.TarInfo(f"s{i // 3:04d}.{('jpg', 'txt', 'json')[i % 3]}")
            info.size = size + i
            tar.addfile(info, io.BytesIO(bytes([i % 251]) * info.size))
    return buf.getvalue()


def _offsets(data: bytes) -> list[int]:
    return [m[2] for m in walk(data, compiled=False)[0]]


def _checksum(hdr: bytearray, spelling: bytes, signed: bool = False) -> None:
    hdr[148:156] = b" " * 8
    value = sum(hdr) - (2 * sum(b for b in hdr if b > 127) if signed else 0)
    hdr[148:156] = spelling % value


def _edit(data: bytes, at: int, fn: Callable[[bytearray], None]) -> bytes:
    hdr = bytearray(data[at : at + 512])
    fn(hdr)
    return data[:at] + bytes(hdr) + data[at + 512 :]


def test_compiled_walk_takes_plain_members_whole() -> None:
    """On a plain ustar tar the compiled walk returns every member in one call, as Python sees them."""
    data = _plain_tar(50)
    names, heads, datas, sizes, stop = COMPILED.walk(data, 0, len(data), 4096)
    members = walk(data, compiled=False)[0]
    assert list(zip(names, heads, datas, sizes, strict=True)) == [(m[0], m[2], m[3], m[4]) for m in members]
    assert stop == members[-1][3] + ((members[-1][4] + 511) & -512)  # at the end marker
    assert data[stop : stop + 512] == bytes(512) and len(names) == 50
    assert COMPILED.walk(data, 0, len(data), 7)[4] == heads[7]


def _set(start: int, value: bytes, signed: bool = False) -> Callable[[bytearray], None]:
    """An edit: write ``value`` at ``start`` of a header, then its checksum the usual way."""

    def edit(hdr: bytearray) -> None:
        hdr[start : start + len(value)] = value
        _checksum(hdr, b"%06o\0 ", signed)

    return edit


def _checksum_off_by_one(hdr: bytearray) -> None:
    _checksum(hdr, b"%06o\0 ")
    hdr[153] ^= 1


# Hand-made spellings around what the compiled walk takes.
EDITS: dict[str, Callable[[bytearray], None]] = {
    "checksum %07o": lambda h: _checksum(h, b"%07o\0"),
    "checksum %06o NUL NUL": lambda h: _checksum(h, b"%06o\0\0"),
    "checksum %o space-padded": lambda h: _checksum(h, b"%7o\0"),
    "checksum signed": _set(20, b"\xe6\x97\xa5x", signed=True),
    "checksum off by one": _checksum_off_by_one,
    "size with spaces": _set(124, b"   0001274 \0"),
    "size 12 digits": _set(124, b"000000001274"),
    "size base-256": _set(124, b"\x80" + (700).to_bytes(11, "big")),
    "size past the end": _set(124, b"77777777777\0"),
    "size with underscore": _set(124, b"0000_001274\0"),
    "type x": _set(156, b"x"),
    "type 5": _set(156, b"5"),
    "type NUL": _set(156, b"\0"),
    "prefix": _set(345, b"dir\0"),
    "name non-UTF-8": _set(0, b"\xff\xe6/"),
    "name 100 bytes": _set(0, b"n" * 96 + b".jpg"),
    "name ends in slash": _set(0, b"dir/" + bytes(96)),
    "no magic": _set(257, bytes(6)),
    "end marker early": lambda h: h.__setitem__(slice(0, 512), bytes(512)),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("which", [0, 1, 5, -1])
def test_hand_made_headers(edit: str, which: int) -> None:
    data = _plain_tar(9)
    at = _offsets(data)[which]
    assert_same(_edit(data, at, EDITS[edit]), batch_sizes=(4096, 1, 2, 4))


def test_bad_checksum_wins_over_a_later_error() -> None:
    """A corrupt header, then a member running past the end: the corrupt header's error, as in Python."""
    data = _plain_tar(9)
    offsets = _offsets(data)
    data = _edit(data, offsets[2], lambda h: h.__setitem__(0, h[0] ^ 1))
    data = set_header_field(data, offsets[6], 124, b"77777777777\0")
    members, error = assert_same(data)
    assert len(members) == 2 and error is not None and error[3] == offsets[2] and "checksum" in error[1]


def test_mixed_formats_hand_back_and_forth() -> None:
    """PAX and GNU members among plain ones: the compiled walk stops at each, Python takes it, and back."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(40):
            name = f"s{i // 2:03d}.{'bin' if i % 2 else 'txt'}"
            if i % 7 == 3:
                name = "long/" * 30 + name  # GNU 'L' header
            info = tarfile.TarInfo(name)
            info.size = 3 * i
            if i % 11 == 5:
                info.pax_headers = {"comment": "x"}
            tar.addfile(info, io.BytesIO(b"a" * info.size))
    members, error = assert_same(buf.getvalue(), batch_sizes=(4096, 1, 3, 5))
    assert error is None and len(members) == 40


def test_plain_members_bounds() -> None:
    """The read path's parse of a sample's range ``data[lo:hi]``, with the compiled parse and without."""
    data = _plain_tar(12)
    offsets = _offsets(data) + [len(data) - 1024]
    for lo in offsets:
        for hi in offsets + [len(data), len(data) + 512, offsets[3] + 1]:
            assert plain(data, True, lo, hi) == plain(data, False, lo, hi), (lo, hi)
    got = plain(data, True, offsets[3], offsets[6])
    assert got is not None and [name for name, _, _ in got] == ["s0001.jpg", "s0001.txt", "s0001.json"]
    assert plain(bytearray(data), True, offsets[3], offsets[6]) == got  # type: ignore[arg-type]  # any buffer


def _tar(names: list[str], prefix: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i, name in enumerate(names):
            info = tarfile.TarInfo(name)
            info.size = 300 + i
            if prefix:  # a name that only fits with ustar's prefix field
                info.name = f"{prefix}/{name}"
            tar.addfile(info, io.BytesIO(bytes([65 + i]) * info.size))
        end = tar.offset  # one sample's range: without the end-of-archive blocks
    return buf.getvalue()[:end]


@pytest.mark.parametrize(
    ("names", "prefix", "key"),
    [
        (["a.jpg", "a.txt", "a.meta.json"], "", "a"),  # the part is everything after the first dot
        (
            ["noext", "a.jpg", ".hidden", "a.txt"],
            "",
            "a",
        ),  # names without a part are skipped, as split_name does
        (["ünï.jpg", "ünï.txt"], "", "ünï"),
        (["a.jpg", "b.txt"], "", None),  # two keys: the Python path raises its stale-index error
        (["noext"], "", None),  # no sample at all
        (["dir/a.jpg", "dir/a.txt"], "", None),  # folders: split_name's full rules
        (["__x__.txt", "a.jpg"], "", None),  # a dunder name: split_name's full rules
        (["a.jpg"], "p" * 90, None),  # a ustar name prefix
    ],
)
def test_fill_takes_plain_samples_and_declines_the_rest(
    names: list[str], prefix: str, key: str | None
) -> None:
    data = _tar(names, prefix)
    got = filled(data, 0, len(data))
    assert (got and got[0]) == key
    if key is not None:
        assert got == python_sample(data, 0, len(data))
        assert sum(map(len, got[1].values())) == sum(
            300 + i for i, n in enumerate(names) if n.startswith(key + ".")
        )
    sample = {"jpg": b"stale"}
    assert (
        COMPILED.fill(sample, bytes(data[:-512]), 0, len(data) - 512) is None
    )  # a range that does not chain


def test_env_var_forces_python() -> None:
    code = "from shardstore import tarscan; print(tarscan._tarwalk is None)"
    env = {**os.environ, "SHARDSTORE_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    env["SHARDSTORE_PURE_PYTHON"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_compiled_walk_hands_signed_checksums_back() -> None:
    """A checksum that is not the unsigned sum (signed-sum writers) is left to the Python walker's
    exact check: the compiled walk stops there, and the outcome is Python's."""
    data = _plain_tar(4)
    at = _offsets(data)[1]
    data = _edit(data, at, EDITS["checksum signed"])
    assert COMPILED.walk(data, 0, len(data), 4096)[4] == at
    assert_same(data)


def test_every_header_refused() -> None:
    """A tar whose every checksum is spelled in a way the compiled walk leaves to Python (still valid)."""
    data = _plain_tar(20)
    for at in _offsets(data):
        data = _edit(data, at, EDITS["checksum %06o NUL NUL"])
    members, error = assert_same(data, batch_sizes=(4096, 1, 3))
    assert error is None and len(members) == 20

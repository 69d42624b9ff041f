"""Fuzzing the header walker (hypothesis).

Generated tars (Python's ``tarfile`` in ustar, GNU and PAX formats, random names, sizes and kinds)
must scan to exactly what ``tarfile`` reports; mutated tars (byte flips, truncation, garbage) must
raise only ``TarFormatError`` subclasses, never another exception, and never hang.
"""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardstore.errors import TarFormatError
from shardstore.tarscan import DIRECTORY, REGULAR, TarMember, iter_members

pytestmark = pytest.mark.timeout(120)  # a true hang, which no deadline can interrupt, fails here

FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
FUZZ = settings(
    max_examples=200,
    deadline=5000,  # ms per example (each takes about 1 ms): a walk that loops or crawls fails here
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,  # CI runs the same examples every time
    database=None,
)

# Names: ASCII, folders, dots, a few non-ASCII letters; long enough to need prefix / 'L' / PAX path.
_segment = st.text(alphabet="abcXYZ019._-ßé日", min_size=1, max_size=40)
names = st.builds(
    lambda parts, lead, trail: lead + "/".join(parts) + trail,
    st.lists(_segment, min_size=1, max_size=5),
    st.sampled_from(["", "", "", "./", "/", "__meta__/"]),
    st.sampled_from(["", "", "", "/", "//"]),  # a regular file named "x/" is a corner of every format
).filter(lambda n: n.strip("/") not in (".", ".."))


@st.composite
def member_specs(draw: st.DrawFn) -> list[tuple[str, str, int]]:
    """(name, kind, size) for 1-8 members; kind in file/dir/symlink/hardlink."""
    n = draw(st.integers(1, 8))
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from(["file", "file", "file", "dir", "symlink", "hardlink"]))
        size = draw(st.one_of(st.integers(0, 1100), st.sampled_from([0, 511, 512, 513, 1024]))) if kind == "file" else 0
        out.append((draw(names), kind, size))
    return out


def build(fmt: str, specs: list[tuple[str, str, int]], global_pax: dict[str, str] | None = None) -> bytes:
    """The tar of ``specs`` in ``fmt``; the example is discarded when ``fmt`` cannot store it (ustar:
    a name too long, or with no place to split it)."""
    buf = io.BytesIO()
    kw = {"pax_headers": global_pax} if global_pax else {}
    try:
        with tarfile.open(fileobj=buf, mode="w", format=FORMATS[fmt], **kw) as tar:
            for i, (name, kind, size) in enumerate(specs):
                info = tarfile.TarInfo(name)
                info.mtime = 1_700_000_000 + i
                if kind == "file":
                    info.size = size
                    tar.addfile(info, io.BytesIO(bytes([i % 251]) * size))
                else:
                    info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[kind]
                    info.linkname = "" if kind == "dir" else "target/" + name
                    tar.addfile(info)
    except ValueError:
        assume(False)
        raise
    return buf.getvalue()


#: Byte flips: (position, xor) pairs, applied by ``flipped``.
byte_flips = st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1, max_size=6)
#: Where ``with_garbage`` puts its bytes.
garbage_modes = st.sampled_from(["insert", "overwrite", "append", "alone"])


def flipped(data: bytes, headers: list[int], flips: list[tuple[int, int]], header_bias: bool) -> bytes:
    """``data`` with each ``(pos, xor)`` of ``flips`` applied; with ``header_bias`` the positions land
    in the most interesting bytes: a member's first header (offsets ``headers``) and what follows it."""
    out = bytearray(data)
    headers = headers or [0]
    for pos, xor in flips:
        if header_bias:
            pos = headers[pos % len(headers)] + (pos // 7) % 1536
        out[pos % len(out)] ^= xor
    return bytes(out)


def with_garbage(data: bytes, garbage: bytes, where: int, mode: str) -> bytes:
    """``garbage`` inserted into ``data``, written over it, appended to it, or alone."""
    pos = where % (len(data) + 1)
    return {
        "insert": data[:pos] + garbage + data[pos:],
        "overwrite": data[:pos] + garbage + data[pos + len(garbage) :],
        "append": data + garbage,
        "alone": garbage,
    }[mode]


def scan(data: bytes) -> list[TarMember]:
    return list(iter_members(lambda o, n: data[o : o + n], len(data), "fuzz.tar"))


def tarfile_view(data: bytes) -> list[tuple[str, str, int, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        out = []
        for m in tar:
            kind = REGULAR if m.isreg() else DIRECTORY if m.isdir() else "other"
            out.append((m.name, kind, m.offset, m.offset_data, m.size if m.isreg() else 0))
        return out


def walker_view(data: bytes) -> list[tuple[str, str, int, int, int]]:
    return [(m.name, m.kind, m.header_offset, m.data_offset, m.size) for m in scan(data)]


@FUZZ
@given(fmt=st.sampled_from(sorted(FORMATS)), specs=member_specs(), global_comment=st.booleans())
def test_generated_tars_scan_like_tarfile(fmt: str, specs: list[tuple[str, str, int]], global_comment: bool) -> None:
    global_pax = {"comment": "made by the fuzzer", "mtime": "1700000000"} if global_comment and fmt == "pax" else None
    data = build(fmt, specs, global_pax)
    want = tarfile_view(data)
    got = walker_view(data)
    assert got == want
    regular = [g for g in got if g[1] == REGULAR]
    assert len(regular) == sum(1 for _, kind, _ in specs if kind == "file")


@FUZZ
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    specs=member_specs(),
    flips=byte_flips,
    header_bias=st.booleans(),
)
def test_byte_flips_raise_only_typed_errors(
    fmt: str, specs: list[tuple[str, str, int]], flips: list[tuple[int, int]], header_bias: bool
) -> None:
    data = build(fmt, specs)
    _walk_or_typed_error(flipped(data, [m.header_offset for m in scan(data)], flips, header_bias))


@FUZZ
@given(fmt=st.sampled_from(sorted(FORMATS)), specs=member_specs(), cut=st.integers(0, 10**9))
def test_truncation_raises_only_typed_errors(fmt: str, specs: list[tuple[str, str, int]], cut: int) -> None:
    data = build(fmt, specs)
    whole = scan(data)
    end = max(m.end for m in whole)
    cut = cut % (len(data) + 1)
    members = _walk_or_typed_error(data[:cut])
    # Cut inside the members: never a silent early end. A cut exactly where a member's header
    # starts leaves a tar of whole members without its end marker, which reads as just those.
    starts = [m.header_offset for m in whole]
    if 0 < cut < end and cut not in starts:
        assert members is None, f"cut at {cut} of {end} went unnoticed"
    elif 0 < cut < end:
        assert members == whole[: starts.index(cut)]


@FUZZ
@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    specs=member_specs(),
    garbage=st.binary(min_size=1, max_size=2048),
    where=st.integers(0, 10**9),
    mode=garbage_modes,
)
def test_garbage_raises_only_typed_errors(
    fmt: str, specs: list[tuple[str, str, int]], garbage: bytes, where: int, mode: str
) -> None:
    _walk_or_typed_error(with_garbage(build(fmt, specs), garbage, where, mode))


def _walk_or_typed_error(data: bytes) -> list[TarMember] | None:
    """Scan; a failure must be a TarFormatError that names the file and a byte offset inside it."""
    try:
        members = scan(data)
    except TarFormatError as e:
        assert e.path == "fuzz.tar"
        assert e.offset is not None and 0 <= e.offset <= len(data)
        assert "\n" not in str(e)
        return None
    assert len(members) <= len(data) // 512 + 1
    for m in members:  # whatever it accepted lies inside the file
        assert 0 <= m.header_offset < m.data_offset <= len(data)
        assert m.size >= 0 and m.data_offset + m.size <= len(data)
    return members


@pytest.mark.parametrize("size", [0, 1, 100, 511, 512, 513, 4096])
def test_random_bytes_are_not_a_tar(size: int) -> None:
    import random

    data = random.Random(size).randbytes(size)
    with pytest.raises(TarFormatError):
        scan(data)

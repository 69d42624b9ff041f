"""Header-only tar walker: reads the 512-byte headers and jumps over member contents.

It understands ustar (with the name prefix), GNU long names and long links, and PAX local
and global headers, and reports for each member the offset of its *first* header (the PAX or
GNU extension header that precedes it, if any), the offset of its data and its size: the
numbers Python's ``tarfile`` reports as ``offset``, ``offset_data`` and ``size``.

Unlike ``tarfile`` (and so Energon), a corrupt header in the middle of a shard is an error,
never a silent end of the archive.
"""

from __future__ import annotations

import bisect
import functools
import mmap
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from zlib import adler32

import numpy as np

from . import compiled
from .errors import TarFormatError, TruncatedTarError
from .storage import ByteRange, Storage

#: ``walk`` and ``plain``: see ``_tarwalk.c``. Tests set it to None to run the Python walker.
_tarwalk = compiled.load("_tarwalk")

__all__ = [
    "TarMember",
    "MemberBatch",
    "iter_members",
    "iter_member_batches",
    "regular_members",
    "plain_members",
    "fill_plain_sample",
    "scan_storage",
    "scan_storage_batches",
    "HeaderSource",
    "REGULAR",
    "DIRECTORY",
]

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
#: Type flags of file-like members (regular, old-style regular, contiguous).
_REGULAR_TYPES = frozenset(b"0\x007")
#: Types whose data ``tarfile`` does not skip even if their header claims a size.
_NO_DATA_TYPES = frozenset(b"123456")
#: Extension headers: GNU long name / long link, PAX local (and Solaris) and global.
_EXT_TYPES = frozenset(b"LKxXg")
#: Extension payloads larger than this are taken for corruption, not read into memory.
_MAX_EXT_SIZE = 16 << 20
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")

REGULAR = "file"
DIRECTORY = "dir"
OTHER = "other"

#: ``read_at(offset, size) -> bytes`` (may return fewer bytes only at end of file).
HeaderSource = Callable[[int, int], bytes]
#: A whole archive in memory: anything that slices into ``bytes``.
Buffer = bytes | mmap.mmap


@dataclass(frozen=True, slots=True)
class TarMember:
    """One archive member as the walker saw it."""

    name: str
    kind: str  # REGULAR, DIRECTORY or OTHER
    header_offset: int
    data_offset: int
    size: int

    @property
    def data_range(self) -> ByteRange:
        return ByteRange(self.data_offset, self.size)

    @property
    def end(self) -> int:
        """Offset just past the member's padded data: where the next header starts."""
        return self.data_offset + _padded(self.size)


def _padded(size: int) -> int:
    return (size + BLOCK - 1) & ~(BLOCK - 1)


def _number(field: bytes, path: str, offset: int, what: str) -> int:
    """A numeric header field: octal text, or GNU base-256 when the high bit is set."""
    if field[0] in (0o200, 0o377):
        n = int.from_bytes(field[1:], "big")
        return n - (1 << (8 * (len(field) - 1))) if field[0] == 0o377 else n
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise TarFormatError(f"invalid {what} field {field!r} in tar header", path=path, offset=offset) from None


def _unsigned_checksum(buf: bytes, at: int = 0) -> int:
    """The ustar checksum of the header at ``buf[at:at+512]``: its bytes summed, the checksum field
    counted as 8 spaces.

    ``sum(bytes)`` loops in Python; adler32 sums in C, and the low half of an adler32 is
    ``1 + sum`` modulo 65521. Each 256-byte half sums to at most 65280 < 65521, so per half the
    value is exact.
    """
    return (
        (adler32(buf[at : at + 256]) & 0xFFFF)
        + (adler32(buf[at + 256 : at + BLOCK]) & 0xFFFF)
        - (adler32(buf[at + 148 : at + 156]) & 0xFFFF)
        + 255  # +256 for the 8 spaces, -1 for the adler32 start value counted twice and removed once
    )


def _not_a_tar(hdr: bytes, path: str, why: str) -> TarFormatError:
    """The error for a first header that is no tar header: says so (and names gzip) before the detail."""
    what = "not a tar file"
    if hdr[:2] == b"\x1f\x8b":
        what = "gzip-compressed tar: shardstore needs uncompressed shards for random access"
    return TarFormatError(f"{what} ({why})", path=path, offset=0)


def _check_header(hdr: bytes, path: str, offset: int) -> None:
    try:
        stored = _number(hdr[148:156], path, offset, "checksum") if hdr[148] not in (0o200, 0o377) else -1
    except TarFormatError as e:
        if offset == 0:
            raise _not_a_tar(hdr, path, e.detail) from None
        raise
    unsigned = _unsigned_checksum(hdr)
    if stored == unsigned:
        return
    signed = unsigned - 256 * sum(1 for b in hdr[:148] + hdr[156:] if b > 127)  # as tarfile: bytes as int8
    if stored != signed:
        why = f"header checksum {stored} != computed {unsigned}"
        if offset == 0:
            raise _not_a_tar(hdr, path, why)
        raise TarFormatError(f"corrupt tar header ({why})", path=path, offset=offset)


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _parse_pax(data: bytes, path: str, offset: int) -> dict[str, str]:
    """PAX records ``"%d %s=%s\\n"``, the length counting the whole record."""
    headers: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        m = _PAX_RECORD.match(data, pos)
        if m is None:
            raise TarFormatError(f"malformed PAX record at byte {pos} of the extended header", path=path, offset=offset)
        if len(m.group(1)) > 20:  # no real record is that long; int() of thousands of digits would raise
            raise TarFormatError(f"PAX record length at byte {pos} is absurd", path=path, offset=offset)
        length = int(m.group(1))
        end = pos + length
        if length < len(m.group(0)) + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise TarFormatError(f"PAX record length {length} is wrong", path=path, offset=offset)
        key = m.group(2).decode("utf-8", "surrogateescape")
        headers[key] = data[m.end() : end - 1].decode("utf-8", "surrogateescape")
        pos = end
    return headers


@dataclass(frozen=True, slots=True)
class MemberBatch:
    """Consecutive members of one archive, column by column: the walker's bulk output.

    ``prepare`` walks close to a million headers per second per core; one object per member would
    cost more than the walk itself, so the walker hands out columns and ``iter_members`` builds
    ``TarMember`` objects from them for callers that want one member at a time.
    """

    names: list[str]
    kinds: list[str]
    header_offsets: list[int]
    data_offsets: list[int]
    sizes: list[int]
    #: Where the walk stopped after the last member: its padded end (the next header or the end marker).
    end: int

    def __len__(self) -> int:
        return len(self.names)

    def members(self) -> Iterator[TarMember]:
        for name, kind, first, data, size in zip(
            self.names, self.kinds, self.header_offsets, self.data_offsets, self.sizes, strict=True
        ):
            yield TarMember(name, kind, first, data, size)


#: Headers walked between two checksum verifications (and the most members one batch holds).
_BATCH = 4096
#: The largest unsigned checksum: 512 bytes of 0xFF, the checksum field counted as spaces.
_MAX_CHECKSUM = 504 * 255 + 8 * 0x20


@functools.cache
def _checksum_fields() -> tuple[np.ndarray, np.ndarray]:
    """For every possible checksum, its field as ``tarfile`` and GNU tar write it (``%06o\\0 ``)
    and as some other writers do (``%07o\\0``), each read as a little-endian uint64."""
    value = np.arange(_MAX_CHECKSUM + 1, dtype=np.uint64)
    six = np.full(len(value), 0x20 << 56, dtype=np.uint64)
    seven = np.zeros(len(value), dtype=np.uint64)
    for k in range(7):  # k-th character from the left is byte k of the little-endian word
        seven |= (((value >> np.uint64(3 * (6 - k))) & np.uint64(7)) + np.uint64(0x30)) << np.uint64(8 * k)
        if k < 6:
            six |= (((value >> np.uint64(3 * (5 - k))) & np.uint64(7)) + np.uint64(0x30)) << np.uint64(8 * k)
    return six, seven


def _confirmed_checksums(buf: bytes, count: int) -> np.ndarray:
    """True for each of the ``count`` headers in ``buf`` whose checksum field is written the usual
    way and equals its unsigned checksum.

    Summing 512 bytes in Python costs more than the rest of a header's parsing, so the batch is
    summed with numpy, and the fields are compared with the usual spellings of the sums. False
    only means "check this one exactly" (``_check_header``): other spellings, signed checksums
    and real corruption all end up there.
    """
    u8 = np.frombuffer(buf, dtype=np.uint8).reshape(count, BLOCK)
    field = np.ascontiguousarray(u8[:, 148:156])
    unsigned = u8.sum(axis=1, dtype=np.uint32) - field.sum(axis=1, dtype=np.uint32) + 256  # uint32: faster
    stored = field.view("<u8")[:, 0]
    six, seven = _checksum_fields()
    ok: np.ndarray = (stored == six[unsigned]) | (stored == seven[unsigned])
    return ok


def _first_bad_header(
    buf: bytes, hdrs: list[bytes], offsets: list[int], path: str
) -> tuple[int, TarFormatError] | None:
    """The first header (in file order) whose checksum is wrong, with its error, or None.
    ``buf`` is ``hdrs`` joined."""
    for i in np.flatnonzero(~_confirmed_checksums(buf, len(hdrs))).tolist():
        try:
            _check_header(hdrs[i], path, offsets[i])
        except TarFormatError as e:
            return offsets[i], e
    return None


def _member(
    read_at: HeaderSource,
    file_size: int,
    path: str,
    offset: int,
    hdr: bytes,
    global_pax: dict[str, str],
    hdrs: list[bytes],
    hdr_offsets: list[int],
) -> tuple[str, str, int, int, int, int]:
    """Any member whose first header ``hdr`` (already in ``hdrs``) is at ``offset``: extension
    headers, name prefixes, other types. Returns (name, kind, header offset, data offset, size,
    next offset). Every header read is appended to ``hdrs`` for the caller's checksum check."""
    first = offset
    name: str | None = None
    pax: dict[str, str] = {}
    while True:
        typeflag = hdr[156]
        size = _number(hdr[124:136], path, offset, "size")
        if size < 0:
            raise TarFormatError(f"negative member size {size}", path=path, offset=offset)
        if typeflag not in _EXT_TYPES:
            break
        if size > _MAX_EXT_SIZE:
            raise TarFormatError(f"extension header claims {size} bytes", path=path, offset=offset)
        data_at = offset + BLOCK
        payload = read_at(data_at, size) if size else b""
        if len(payload) < size or data_at + _padded(size) > file_size:
            raise TruncatedTarError("file ends inside an extension header's data", path=path, offset=offset)
        if typeflag == 0x4C:  # 'L': GNU long name
            name = _text(payload)
        elif typeflag == 0x67:  # 'g': PAX global header, applies to all later members
            global_pax.update(_parse_pax(payload, path, offset))
        elif typeflag != 0x4B:  # 'x'/'X': PAX local header ('K', a long link name, is not needed)
            pax.update(_parse_pax(payload, path, offset))
        offset = data_at + _padded(size)
        if typeflag == 0x67 and first == data_at - BLOCK:  # a global header is not part of the member
            first = offset
        if offset + BLOCK > file_size:
            raise TruncatedTarError("file ends after an extension header, before its member", path=path, offset=offset)
        hdr = read_at(offset, BLOCK)
        if hdr == _ZERO_BLOCK:
            raise TarFormatError("extension header is followed by the end of the archive", path=path, offset=offset)
        hdrs.append(hdr)
        hdr_offsets.append(offset)
    raw_name = _text(hdr[0:100])
    long_name = name is not None
    if name is None:
        name = raw_name
        prefix = hdr[345:500]
        if prefix[0] and typeflag not in b"LKS":
            name = _text(prefix) + "/" + name
    if global_pax or pax:
        merged = {**global_pax, **pax}
        if "path" in merged:  # tarfile strips trailing slashes of a PAX path, whatever the type
            name, long_name = merged["path"].rstrip("/"), False
        if "size" in merged:
            try:
                size = int(merged["size"])
            except ValueError:
                raise TarFormatError(f"invalid PAX size {merged['size']!r}", path=path, offset=first) from None
            if size < 0:
                raise TarFormatError(f"negative PAX size {size}", path=path, offset=first)
    if typeflag == 0x53:  # 'S'
        raise TarFormatError("GNU sparse members are not supported", path=path, offset=first)
    kind = OTHER
    if typeflag in _REGULAR_TYPES:
        kind = REGULAR
        if typeflag == 0 and raw_name.endswith("/"):  # old V7 directory: decided on the header's own name
            kind = DIRECTORY
    elif typeflag == 0x35:
        kind = DIRECTORY
    data_offset = offset + BLOCK
    skip = 0 if typeflag in _NO_DATA_TYPES else _padded(size)
    if data_offset + skip > file_size:
        raise _past_end(size, data_offset, file_size, path, first)
    if kind == DIRECTORY:  # as tarfile: a GNU long name loses one trailing slash, a header name all
        name = name.removesuffix("/") if long_name else name.rstrip("/")
    return name, kind, first, data_offset, size if skip or kind == REGULAR else 0, data_offset + skip


def _past_end(size: int, data_offset: int, file_size: int, path: str, first: int) -> TruncatedTarError:
    return TruncatedTarError(
        f"member data ({size} bytes from offset {data_offset}) runs past the end of the file ({file_size} bytes)",
        path=path,
        offset=first,
    )


def iter_member_batches(
    read_at: HeaderSource, file_size: int, path: str, batch_size: int = _BATCH, *, buffer: Buffer | None = None
) -> Iterator[MemberBatch]:
    """Walk every member of a tar of ``file_size`` bytes, reading only headers through ``read_at``,
    and hand them out in batches of up to ``batch_size`` members.

    Plain ustar regular files (what webdataset and ``tarfile`` write) take a short path; anything
    else goes through ``_member``. Checksums are verified a batch at a time, before the batch is
    handed out: the caller sees exactly the members ``iter_members`` yields one by one, then the
    same error, the first one in file order (a later header's error found while walking past a
    corrupt one gives way to the corrupt header's checksum error).

    ``buffer``, when the whole archive is in memory or memory-mapped, is sliced directly instead
    of calling ``read_at`` for each header (the call would cost about as much as the slicing),
    and runs of plain ustar members are walked by the compiled ``_tarwalk`` when it is built: it
    stops at the first header it does not verify and take whole, and the Python walk goes on
    from there, so batches may end earlier but hold the same members, and errors are the same.

    Raises ``TarFormatError`` (or ``TruncatedTarError``) naming ``path`` and the byte offset.
    """
    if file_size == 0:
        raise TarFormatError("empty file, not a tar", path=path, offset=0)
    offset = 0
    global_pax: dict[str, str] = {}
    zero = _ZERO_BLOCK
    done = False
    walk = _tarwalk.walk if _tarwalk is not None and buffer is not None else None
    while not done:
        if walk is not None and not global_pax:
            c_names, c_heads, c_datas, c_sizes, stop = walk(buffer, offset, file_size, batch_size)
            if c_names:
                offset = stop
                yield MemberBatch(c_names, [REGULAR] * len(c_names), c_heads, c_datas, c_sizes, stop)
                continue
        # Per member only what the walk needs (its header, where it is, the size); names, kinds
        # and data offsets of plain members are filled in for the whole batch at once (``_batch``).
        hdrs: list[bytes] = []
        hdr_offsets: list[int] = []
        sizes: list[int] = []
        add_hdr, add_offset, add_size = hdrs.append, hdr_offsets.append, sizes.append
        special: dict[int, tuple[str, str, int, int, int]] = {}  # member -> (name, kind, first, data, headers)
        error: TarFormatError | None = None
        handback = walk is not None
        try:
            for _ in range(batch_size):
                if offset + 512 > file_size:
                    if offset >= file_size:
                        done = True
                        break
                    _short_header(read_at(offset, BLOCK), offset, path)
                hdr = buffer[offset : offset + 512] if buffer is not None else read_at(offset, 512)
                if buffer is None and len(hdr) < 512:
                    _short_header(hdr, offset, path)
                if hdr == zero:
                    done = True
                    break
                plain = hdr[156] == 0x30 and hdr[135] == 0 and not hdr[345] and not global_pax
                if plain and handback:
                    # Back to the compiled walk after the extension headers or other types it
                    # handed over. Not after a plain header it refused (a checksum it does not
                    # take): then this batch stays in Python, or each such header would cost a batch.
                    if sizes:
                        break
                    handback = False
                add_hdr(hdr)
                add_offset(offset)
                if plain:
                    # A plain regular file: '0', an 11-digit size field, no name prefix.
                    try:
                        size = int(hdr[124:135], 8)
                    except ValueError:
                        size = _number(hdr[124:136], path, offset, "size")
                    nxt = offset + 512 + ((size + 511) & -512)
                    if nxt > file_size or size < 0:
                        if size < 0:
                            raise TarFormatError(f"negative member size {size}", path=path, offset=offset)
                        raise _past_end(size, offset + BLOCK, file_size, path, offset)
                    add_size(size)
                    offset = nxt
                else:
                    before = len(hdrs)
                    name, kind, first, data, size, offset = _member(
                        read_at, file_size, path, offset, hdr, global_pax, hdrs, hdr_offsets
                    )
                    special[len(sizes)] = (name, kind, first, data, len(hdrs) - before + 1)
                    add_size(size)
        except TarFormatError as e:
            error, done = e, True
        batch, bad = _batch(hdrs, hdr_offsets, sizes, special, offset, path)
        if bad is not None:
            error = bad
        if batch is not None:
            yield batch
        if error is not None:
            raise error


def _short_header(hdr: bytes, offset: int, path: str) -> None:
    """Raise the error for a header cut short by the end of the file."""
    if offset == 0:
        raise _not_a_tar(hdr, path, f"{len(hdr)} bytes, shorter than one 512-byte tar header")
    raise TruncatedTarError(f"file ends inside a tar header ({len(hdr)} of 512 bytes)", path=path, offset=offset)


def _batch(
    hdrs: list[bytes],
    hdr_offsets: list[int],
    sizes: list[int],
    special: dict[int, tuple[str, str, int, int, int]],
    end: int,
    path: str,
) -> tuple[MemberBatch | None, TarFormatError | None]:
    """The walked members as a batch, after checking every header's checksum: cut before the
    first corrupt header (whose error is returned), if any.

    Without ``special`` members every header is a member's only one, so the header offsets are
    the members' offsets."""
    if not hdrs:
        return None, None
    buf = b"".join(hdrs)
    n = len(sizes)
    kinds = [REGULAR] * n
    if special:
        firsts: list[int] = []
        main = []  # index in hdrs of each member's own header (extension headers come before it)
        h = -1
        for i in range(n):
            if i in special:
                h += special[i][4]
                firsts.append(special[i][2])
            else:
                h += 1
                firsts.append(hdr_offsets[h])
            main.append(h)
        datas = [f + BLOCK for f in firsts]
        names = _names(buf, main)
        for i, (name, kind, _, data, _) in special.items():
            names[i], kinds[i], datas[i] = name, kind, data
    else:
        firsts = hdr_offsets[:n]  # (one more header if the walk stopped at a bad member)
        datas = [f + BLOCK for f in firsts]
        names = _names(buf, None)
        del names[n:]
    bad = _first_bad_header(buf, hdrs, hdr_offsets, path)
    error = None
    if bad is not None:
        # Only the members whose own header lies before the corrupt one, then its error.
        error, end = bad[1], bad[0]
        n = bisect.bisect_left(datas, bad[0] + BLOCK)
        del names[n:], kinds[n:], firsts[n:], datas[n:], sizes[n:]
    return (MemberBatch(names, kinds, firsts, datas, sizes, end) if names else None), error


def _names(buf: bytes, rows: list[int] | None) -> list[str]:
    """The name fields (up to their first NUL, decoded as ``tarfile`` does) of the headers at
    ``rows`` of ``buf`` (all of them if None), in one decode: the names are cut out with numpy,
    joined with NUL separators and split again (UTF-8 never puts a NUL inside a character)."""
    table = np.frombuffer(buf, dtype=np.uint8).reshape(-1, BLOCK)
    if rows is not None:
        table = table[rows]
    nul = table[:, :100] == 0
    length = np.where(nul.any(axis=1), nul.argmax(axis=1), 100)
    width = int(length.max()) + 1  # names and one NUL each
    fields = np.zeros((len(table), width), dtype=np.uint8)
    fields[:, : min(width, 100)] = table[:, : min(width, 100)]
    keep = np.arange(width) <= length[:, None]
    names = fields[keep].tobytes().decode("utf-8", "surrogateescape").split("\0")
    names.pop()
    return names


def iter_members(read_at: HeaderSource, file_size: int, path: str) -> Iterator[TarMember]:
    """Walk every member of a tar of ``file_size`` bytes, reading only headers through ``read_at``.

    Raises ``TarFormatError`` (or ``TruncatedTarError``) naming ``path`` and the byte offset.
    The last member's ``end`` is where the archive's end marker (or the file) starts.
    """
    for batch in iter_member_batches(read_at, file_size, path):
        yield from batch.members()


#: The fields of a ustar header the fast path reads: name, size, type flag, magic.
_USTAR_FIELDS = struct.Struct("100s24x12s20xc100x5s")


def plain_members(data: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[str, int, int]] | None:
    """``regular_members``'s fast path, for runs of plain ustar regular files: no extension
    header, type '0', octal fields. None as soon as one header is anything else (the caller then
    falls back to ``regular_members``).

    The run is ``data[lo:hi]`` (all of ``data`` by default; sequential iteration passes one read
    of many samples and a sample's bounds, so no sample is copied out before its parts are);
    the data offsets returned are offsets in ``data``.

    The header checksum is not recomputed here (it would cost a quarter of a random read):
    prepare verified every header when it built the index, and a shard that changed since is
    caught by the size/ETag check and by what this does check: the ustar magic and type of every
    header, sizes that parse and chain exactly to the end of the run.
    """
    n = len(data) if hi is None else hi
    if _tarwalk is not None:
        fast: list[tuple[str, int, int]] | None = _tarwalk.plain(data, lo, n)
        if fast is not NotImplemented:  # NotImplemented: a size field only Python's int() decides
            return fast
    out = []
    pos = lo
    unpack = _USTAR_FIELDS.unpack_from
    try:
        while pos < n:
            if pos + BLOCK > n:  # a short header
                return None
            name, size_field, typeflag, magic = unpack(data, pos)
            if typeflag != b"0" or magic != b"ustar":
                return None
            size = int(size_field.rstrip(b"\0 "), 8)
            text = _text(name)
            if data[pos + 345]:  # ustar name prefix
                text = _text(data[pos + 345 : pos + 500]) + "/" + text
            if text[-1:] == "/":  # an old-style directory entry
                return None
            start = pos + BLOCK
            pos = start + ((size + BLOCK - 1) & -BLOCK)
            out.append((text, start, size))
    except (ValueError, struct.error):  # not plain octal (GNU base-256, garbage); a short buffer
        return None
    return out if pos == n else None


def fill_plain_sample(sample: dict[str, Any], data: bytes, lo: int, hi: int) -> str | None:
    """The compiled fast path of a random read: store the parts of the one sample in
    ``data[lo:hi]`` in ``sample`` and return its key, when every member is a plain ustar file
    named ``key.part`` with no folder (``_tarwalk.fill``). None when it is not built or the
    sample is anything else: the caller then cuts the sample with ``plain_members`` and
    ``keys.split_name`` (into a fresh dict: entries may have been stored before the None)."""
    if _tarwalk is None:
        return None
    key: str | None = _tarwalk.fill(sample, data, lo, hi)
    return key


def regular_members(data: bytes, path: str) -> list[tuple[str, int, int]]:
    """``(name, data offset, size)`` of the regular files in ``data``, an in-memory run of whole
    members such as one sample's byte range; offsets are relative to ``data``.

    This is the random-access read path, so plain ustar headers (what webdataset and Python's
    ``tarfile`` write) are parsed with one ``struct`` unpack each; anything else (PAX or GNU
    extension headers, other member types, a bad checksum, a short buffer) goes through
    ``iter_members``, which handles every format and raises the errors, naming ``path``.
    """
    members = plain_members(data)
    if members is None:
        walked = iter_members(lambda o, n: data[o : o + n], len(data), path)
        members = [(m.name, m.data_offset, m.size) for m in walked if m.kind == REGULAR]
    return members


class _BlockCache:
    """``read_at`` over a storage object with large sequential reads, for remote shards.

    A header walk over small members touches every few KB; one request per header would cost a
    round trip each, so whole blocks are fetched and headers are cut out of them.
    """

    def __init__(self, storage: Storage, path: str, file_size: int, block_size: int) -> None:
        self.storage, self.path, self.file_size, self.block_size = storage, path, file_size, block_size
        self.start, self.data = 0, b""

    def __call__(self, offset: int, size: int) -> bytes:
        rel = offset - self.start
        if 0 <= rel and rel + size <= len(self.data):
            return self.data[rel : rel + size]
        want = min(max(size, self.block_size), self.file_size - offset)
        if want <= 0:
            return b""
        self.start, self.data = offset, self.storage.read_range(self.path, ByteRange(offset, want))
        return self.data[:size]


#: Linux's MADV_POPULATE_READ (5.14+): map every page of a range now, in one call.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None)


def _map_rest(mm: mmap.mmap, start: int, size: int, members: int) -> None:
    """Map the rest of a shard's pages at once when its members are small.

    A walk over members of a few KB touches every page the kernel maps around a fault (64 KB),
    and a page fault costs more than mapping the same pages in one call: about a tenth of the
    walk. With large members most pages are never touched, so they are left to fault.
    """
    if _MADV_POPULATE_READ is None or members == 0 or start // members > 32 << 10:
        return
    start -= start % mmap.PAGESIZE
    try:
        mm.madvise(_MADV_POPULATE_READ, start, size - start)
    except (OSError, ValueError):
        pass  # an older kernel: pages fault in as usual


def scan_storage(storage: Storage, path: str, block_size: int = 8 << 20) -> Iterator[TarMember]:
    """All members of shard ``path`` of ``storage``: memory-mapped if local, block reads if remote."""
    for batch in scan_storage_batches(storage, path, block_size):
        yield from batch.members()


def scan_storage_batches(storage: Storage, path: str, block_size: int = 8 << 20) -> Iterator[MemberBatch]:
    """``scan_storage`` in ``MemberBatch`` columns, for bulk consumers such as prepare."""
    local = storage.local_path(path)
    if local is None:
        size = storage.size(path)
        yield from iter_member_batches(_BlockCache(storage, path, size, block_size), size, storage.url(path))
        return
    try:
        fd = os.open(local, os.O_RDONLY)
    except FileNotFoundError:
        raise TarFormatError("shard does not exist", path=local) from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield from iter_member_batches(lambda o, n: b"", 0, local)
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
            populated = False
            for batch in iter_member_batches(lambda o, n: mm[o : o + n], size, local, buffer=mm):
                if not populated:
                    populated = True
                    _map_rest(mm, batch.end, size, len(batch))
                yield batch
    finally:
        os.close(fd)

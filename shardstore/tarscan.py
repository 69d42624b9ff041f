"""Header-only tar walker: reads the 512-byte headers and jumps over member contents.

It understands ustar (with the name prefix), GNU long names and long links, and PAX local
and global headers, and reports for each member the offset of its *first* header (the PAX or
GNU extension header that precedes it, if any), the offset of its data and its size: the
numbers Python's ``tarfile`` reports as ``offset``, ``offset_data`` and ``size``.

Unlike ``tarfile`` (and so Energon), a corrupt header in the middle of a shard is an error,
never a silent end of the archive.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from zlib import adler32

from .errors import TarFormatError, TruncatedTarError
from .storage import ByteRange, Storage

__all__ = [
    "TarMember",
    "iter_members",
    "regular_members",
    "plain_members",
    "scan_storage",
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


def _not_a_tar(hdr: bytes, path: str, why: str) -> TarFormatError:
    """The error for a first header that is no tar header: says so (and names gzip) before the detail."""
    what = "not a tar file"
    if hdr[:2] == b"\x1f\x8b":
        what = "gzip-compressed tar: shardstore needs uncompressed shards for random access"
    return TarFormatError(f"{what} ({why})", path=path, offset=0)


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
    signed = unsigned - 2 * sum(b for b in hdr[:148] + hdr[156:] if b > 127)
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


def iter_members(read_at: HeaderSource, file_size: int, path: str) -> Iterator[TarMember]:
    """Walk every member of a tar of ``file_size`` bytes, reading only headers through ``read_at``.

    Raises ``TarFormatError`` (or ``TruncatedTarError``) naming ``path`` and the byte offset.
    The last member's ``end`` is where the archive's end marker (or the file) starts.
    """
    if file_size == 0:
        raise TarFormatError("empty file, not a tar", path=path, offset=0)
    offset = 0
    global_pax: dict[str, str] = {}
    while True:
        if offset >= file_size:
            return
        hdr = read_at(offset, BLOCK)
        if len(hdr) < BLOCK and offset == 0:
            raise _not_a_tar(hdr, path, f"{len(hdr)} bytes, shorter than one 512-byte tar header")
        if len(hdr) < BLOCK:
            raise TruncatedTarError(f"file ends inside a tar header ({len(hdr)} of 512 bytes)", path=path, offset=offset)
        if hdr == _ZERO_BLOCK:
            return
        first = offset
        name: str | None = None
        pax: dict[str, str] = {}
        while True:
            _check_header(hdr, path, offset)
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
            raise TruncatedTarError(
                f"member data ({size} bytes from offset {data_offset}) runs past the end of the file ({file_size} bytes)",
                path=path,
                offset=first,
            )
        if kind == DIRECTORY:  # as tarfile: a GNU long name loses one trailing slash, a header name all
            name = name.removesuffix("/") if long_name else name.rstrip("/")
        yield TarMember(name, kind, first, data_offset, size if skip or kind == REGULAR else 0)
        offset = data_offset + skip


#: The fields of a ustar header the fast path reads: name, size, type flag, magic.
_USTAR_FIELDS = struct.Struct("100s24x12s20xc100x5s")


def plain_members(data: bytes) -> list[tuple[str, int, int]] | None:
    """``regular_members``'s fast path, for runs of plain ustar regular files: no extension
    header, type '0', octal fields. None as soon as one header is anything else (the caller then
    falls back to ``regular_members``).

    The header checksum is not recomputed here (it would cost a quarter of a random read):
    prepare verified every header when it built the index, and a shard that changed since is
    caught by the size/ETag check and by what this does check: the ustar magic and type of every
    header, sizes that parse and chain exactly to the end of ``data``.
    """
    out = []
    pos, n = 0, len(data)
    unpack = _USTAR_FIELDS.unpack_from
    try:
        while pos < n:
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


def scan_storage(storage: Storage, path: str, block_size: int = 8 << 20) -> Iterator[TarMember]:
    """All members of shard ``path`` of ``storage``: memory-mapped if local, block reads if remote."""
    local = storage.local_path(path)
    if local is None:
        size = storage.size(path)
        yield from iter_members(_BlockCache(storage, path, size, block_size), size, storage.url(path))
        return
    try:
        fd = os.open(local, os.O_RDONLY)
    except FileNotFoundError:
        raise TarFormatError("shard does not exist", path=local) from None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            yield from iter_members(lambda o, n: b"", 0, local)
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
            yield from iter_members(lambda o, n: mm[o : o + n], size, local)
    finally:
        os.close(fd)

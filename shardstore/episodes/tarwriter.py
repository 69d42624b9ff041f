"""A minimal tar writer for the episode shards: plain ustar headers, one ``write`` per member.

Why not webdataset's ``TarWriter``: it goes through Python's ``tarfile``, which builds each header
via ``create_pax_header`` and ``copy.copy`` of the ``TarInfo``: 79% of an import's time in a
profile (tools/bench/episodes.py: 1,400 steps/s with it). Here a header is a template with the
name, size and checksum filled in. The output is what ``tarfile`` writes in ustar form (mode
0444, user and group ``bigdata`` as webdataset writes, an integer mtime); a name longer than 100
bytes gets a GNU ``././@LongLink`` member before it, as GNU tar and ``tarfile`` do. Tests read the
shards back with ``tarfile`` and webdataset.
"""

from __future__ import annotations

from typing import IO

__all__ = ["TarMembers", "TarWriter"]

_BLOCK = 512
_RECORD = 20 * _BLOCK
_ZEROS = bytes(_BLOCK)


def _octal(value: int, width: int) -> bytes:
    """A NUL-terminated zero-padded octal field, as tarfile writes it (``%0*o`` + NUL)."""
    return b"%0*o\0" % (width - 1, value)


def _template(mtime: int) -> bytes:
    """A header with an empty name and size, the checksum field as spaces (how it is summed)."""
    h = bytearray(_BLOCK)
    h[100:108] = _octal(0o444, 8)  # mode
    h[108:116] = _octal(0, 8)  # uid
    h[116:124] = _octal(0, 8)  # gid
    h[136:148] = _octal(mtime, 12)
    h[148:156] = b" " * 8
    h[156:157] = b"0"  # regular file
    h[257:265] = b"ustar\x0000"
    h[265:272] = b"bigdata"
    h[297:304] = b"bigdata"
    return bytes(h)


class TarMembers:
    """Members encoded in memory (header, data, padding each), taken as one block of bytes: an
    episode's samples are encoded apart from the shard they go into (a tar member holds no offset,
    so the block is the same wherever it lands), on an executor's worker or in the writer."""

    def __init__(self, mtime: int) -> None:
        t = _template(mtime)
        self._mode_to_gid, self._mtime, self._after_kind = t[100:124], t[136:148], t[157:]
        # The checksum is the sum of the header's bytes: the template's, plus the name's and size's
        self._base_sum = sum(t) - ord("0")
        self._chunks: list[bytes] = []

    def _header(self, name: bytes, size: int, kind: bytes = b"0") -> bytes:
        size_field = _octal(size, 12)
        chk = self._base_sum + sum(name) + sum(size_field) + kind[0]
        return b"".join((name, bytes(100 - len(name)), self._mode_to_gid, size_field, self._mtime,
                         b"%06o\0 " % chk, kind, self._after_kind))

    def add(self, name: str, data: bytes) -> None:
        encoded = name.encode()
        if len(encoded) > 100:
            link = encoded + b"\0"
            self._put(self._header(b"././@LongLink", len(link), b"L"), link)
            encoded = encoded[:100]
        self._put(self._header(encoded, len(data)), data)

    def _put(self, header: bytes, data: bytes) -> None:
        self._chunks += (header, data, _ZEROS[: -len(data) % _BLOCK])

    def take(self) -> bytes:
        """The members added since the last ``take``, as tar bytes (one join: one copy of the data)."""
        block = b"".join(self._chunks)
        self._chunks = []
        return block


class TarWriter:
    """Members appended to ``fileobj`` (which it closes on ``close``)."""

    def __init__(self, fileobj: IO[bytes], mtime: int) -> None:
        self.file = fileobj
        self._members = TarMembers(mtime)
        self.offset = 0

    def write(self, name: str, data: bytes) -> None:
        self._members.add(name, data)
        self.write_members(self._members.take())

    def write_members(self, block: bytes) -> None:
        """Members encoded by ``TarMembers`` (one write: writes cost more than the join)."""
        self.file.write(block)
        self.offset += len(block)

    def close(self) -> None:
        """Two zero blocks, then zeros to a whole 10 KiB record (what ``tarfile`` ends with)."""
        end = self.offset + 2 * _BLOCK
        self.file.write(bytes(2 * _BLOCK + (-end % _RECORD)))
        self.file.close()

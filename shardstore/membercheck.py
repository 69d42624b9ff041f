"""Is the member at this data offset the member named? A cheap look at the headers before it.

A read by member name (``read_file``, ``cat``, aux stores, the mount) goes from the index straight
to the member's data range. If the shard was rewritten with the same size (and its mtime or ETag
kept), that range may now hold another member's bytes. The tar header of a member lies in the
512 bytes before its data, and a GNU long-name or PAX header usually in the 1,024 before that:
reading ``HEADER_SPAN`` bytes more in front of the payload (the same read, or one small read for
big members) shows whether the member there has the name and size the index says.

``header_names_member`` answers from those bytes alone when it can; when it cannot (a PAX record
or long name bigger than a block, a writer that puts something else in the ustar name field),
the caller checks the sample's headers instead (one more read, only then): never a false alarm,
never wrong bytes served without one of the two checks passing.
"""

from __future__ import annotations

__all__ = ["HEADER_SPAN", "header_names_member"]

#: Bytes read in front of a member's data: its header, and a one-block GNU/PAX extension before it.
HEADER_SPAN = 1536
_BLOCK = 512
_REGULAR = frozenset(b"0\x007")


def _number(field: bytes) -> int | None:
    """A tar numeric field (octal, or GNU base-256), None when it is neither."""
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.strip(b" \0") or b"0", 8)
    except ValueError:
        return None


def _cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _pax_records(data: bytes) -> dict[bytes, bytes] | None:
    """``key=value`` records of a PAX extension's data; None when it does not parse."""
    out: dict[bytes, bytes] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            return None
        record = data[space + 1 : pos + length]
        if space < 0 or length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            return None
        key, _, value = record[:-1].partition(b"=")
        out[key] = value
        pos += length
    return out


def header_names_member(buf: bytes, end: int, name: bytes, size: int) -> bool:
    """True when the headers that end at ``end`` of ``buf`` (where the member's data starts; up to
    ``HEADER_SPAN`` bytes before it) describe a regular file called ``name`` (the member's name as
    in the tar, encoded as the index encodes it) of ``size`` bytes. False means "not shown here",
    not "wrong": the caller then checks the sample's headers."""
    h = end - _BLOCK
    if h < 0:
        return False
    n = len(name)
    # The common case first, without slicing: a plain ustar header, the name in its name field
    # (no prefix), the size as tarfile and GNU tar write it.
    if (
        n < 100
        and buf[h + n] == 0
        and buf.startswith(name, h)
        and buf[h + 345] == 0
        and buf[h + 156] in _REGULAR
        and buf[h + 124 : h + 136] == b"%011o\0" % size
    ):
        return True
    hdr = buf[h:end]
    if hdr[156] not in _REGULAR:
        return False
    ustar_name = _cstr(hdr[0:100])
    if hdr[257:262] == b"ustar":
        prefix = _cstr(hdr[345:500])
        if prefix:
            ustar_name = prefix + b"/" + ustar_name
    header_size = _number(hdr[124:136])
    if ustar_name == name and header_size == size:
        return True
    if h < 2 * _BLOCK:
        return False
    ext, ext_data = buf[h - 2 * _BLOCK : h - _BLOCK], buf[h - _BLOCK : h]
    ext_size = _number(ext[124:136])
    if ext_size is None or ext_size > _BLOCK:
        return False
    if ext[156:157] == b"L":  # GNU long name: the name, NUL-terminated, is the extension's data
        return _cstr(ext_data[:ext_size]) == name and header_size == size
    if ext[156:157] == b"x":  # PAX: path and size records override the ustar fields
        records = _pax_records(ext_data[:ext_size])
        if records is None:
            return False
        pax_size = records.get(b"size")
        return records.get(b"path", ustar_name) == name and (
            header_size == size if pax_size is None else pax_size == str(size).encode()
        )
    return False

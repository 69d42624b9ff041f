"""Tar header surgery for the scanner and check tests: change one field, keep the header valid."""

from __future__ import annotations


def set_header_field(data: bytes, at: int, start: int, field: bytes) -> bytes:
    """Overwrite a field of the header at ``at`` and fix its checksum, so only the field is 'wrong'."""
    hdr = bytearray(data[at : at + 512])
    hdr[start : start + len(field)] = field
    hdr[148:156] = b" " * 8
    hdr[148:156] = b"%06o\0 " % sum(hdr)
    return data[:at] + bytes(hdr) + data[at + 512 :]

"""``.npy`` bytes without ``np.save`` / ``np.load`` on the hot paths.

Every step of a field has the same dtype and shape, so its ``.npy`` header is the same bytes each
time: the writer builds it once per (dtype, shape) and appends the row's bytes; the reader parses
a header once (``np.lib.format``, which never unpickles) and afterwards recognises it by its bytes,
so decoding a part is a dict lookup and ``np.frombuffer``. ``np.load`` of a 128-byte part through
``BytesIO`` costs ~15 us; this costs ~1.5 us (measured by tools/bench/episodes.py; ``np.prod`` of the
shape alone would be 3 us, so sizes are ``math.prod``).
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np

from ..errors import DecodeError, EpisodeFormatError

__all__ = ["npy_header", "encode_row", "decode", "decode_rows", "parse_header"]

_MAGIC = b"\x93NUMPY"
#: header bytes -> (dtype, shape, data offset); bounded: a dataset has few distinct headers.
_HEADERS: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}
_MAX_HEADERS = 4096
_WRITE_HEADERS: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header (magic, version, dict, padding) of a C-ordered array of ``dtype`` and
    ``shape``: what ``np.save`` writes before the data."""
    key = (dtype, shape)
    header = _WRITE_HEADERS.get(key)
    if header is None:
        if dtype.hasobject:
            raise EpisodeFormatError(f"dtype {dtype} holds Python objects; only plain arrays are stored")
        buf = io.BytesIO()
        d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        if len(repr(d)) < 65000:  # version 1.0 holds up to 65535 bytes of dict
            np.lib.format.write_array_header_1_0(buf, d)
        else:  # a structured dtype with very many fields
            np.lib.format.write_array_header_2_0(buf, d)
        header = buf.getvalue()
        _WRITE_HEADERS[key] = header
    return header


def encode_row(row: np.ndarray) -> bytes:
    """``row`` as ``.npy`` bytes, as ``np.save(allow_pickle=False)`` writes them."""
    if not row.flags.c_contiguous:  # not np.ascontiguousarray: it turns a 0-d array into 1-d
        row = row.copy()
    return npy_header(row.dtype, row.shape) + row.tobytes()


def parse_header(data: bytes | memoryview, where: str) -> tuple[bytes, tuple[np.dtype, tuple[int, ...], int]]:
    """``(header bytes, (dtype, shape, data offset))`` of a ``.npy`` part; refuses object dtypes."""
    if bytes(data[:6]) != _MAGIC or len(data) < 10:
        raise DecodeError("not a .npy part (bad magic)", member=where)
    major = data[6]
    if major == 1:
        end = 10 + int.from_bytes(data[8:10], "little")
    elif major in (2, 3):
        end = 12 + int.from_bytes(data[8:12], "little")
    else:
        raise DecodeError(f"unknown .npy version {major}", member=where)
    header = bytes(data[:end])
    cached = _HEADERS.get(header)
    if cached is not None:
        return header, cached
    f = io.BytesIO(header)
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
    except (ValueError, SyntaxError) as e:
        raise DecodeError(f"invalid .npy header: {e}", member=where) from e
    if dtype.hasobject:
        raise DecodeError("a .npy part of Python objects (it would need pickle)", member=where)
    if fortran and len(shape) > 1:
        raise DecodeError("a Fortran-ordered .npy part (the store writes C order)", member=where)
    value = (dtype, tuple(shape), end)
    if len(_HEADERS) < _MAX_HEADERS:
        _HEADERS[header] = value
    return header, value


def decode(data: bytes | memoryview, where: str = "") -> np.ndarray:
    """The array in ``.npy`` bytes (a writable copy); raises ``DecodeError`` naming ``where``."""
    _, (dtype, shape, start) = parse_header(data, where)
    count = math.prod(shape)  # not np.prod: ~3 us of the ~4 a step's small part would cost
    if len(data) - start != count * dtype.itemsize:
        raise DecodeError(f".npy data is {len(data) - start} bytes, its header says {count * dtype.itemsize}", member=where)
    return np.ndarray(shape, dtype, bytearray(data[start:]))  # writable, one copy; half frombuffer + copy's cost


def decode_rows(parts: list[Any], where: str = "") -> np.ndarray:
    """The rows of many ``.npy`` parts of one field stacked along a new first axis: one copy when
    every part has the same header (the store writes them so), else ``np.stack`` of each."""
    if not parts:
        raise DecodeError("no rows to stack", member=where)
    header, (dtype, shape, start) = parse_header(parts[0], where)
    size = math.prod(shape) * dtype.itemsize
    hl = len(header)
    if all(len(p) == start + size and p[:hl] == header for p in parts):
        joined = bytearray().join(memoryview(p)[start:] for p in parts)  # writable, one copy
        return np.frombuffer(joined, dtype=dtype).reshape((len(parts), *shape))
    rows = [decode(p, where) for p in parts]
    if any(r.dtype != dtype or r.shape != shape for r in rows):
        raise DecodeError(f"rows disagree in dtype or shape (the first is {dtype.str} {shape})", member=where)
    return np.stack(rows)

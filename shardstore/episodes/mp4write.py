"""An mp4 written from packets already known: the remux of indexed clips without a muxer.

A cut of a store's videos (``mp4.write_clips`` on clips with a packet index) knows every packet it
keeps: offset, size, time and keyframe flag. Writing the file is then copying their bytes and
listing them in the sample tables, which numpy makes in one go. FFmpeg's muxer through PyAV takes a
Python packet object per frame (0.3 s of CPU for 20,000 packets) and PyAV's import (0.1 s): a
quarter of the CPU time of an export of 33 episodes x 300 frames, two cameras.

The file is laid out as FFmpeg's mov muxer lays it out for the same packets: the source's ``ftyp``,
``mdat`` with the packets in decode order, then ``moov``: ``mvhd``; one ``trak`` with ``tkhd``, an
edit list of one edit (from the first frame shown: past 0 where frames are decoded before they are
shown, B-frames) and the sample tables: the source's sample description (``stsd``: codec, size,
decoder configuration, colour; without ``btrt``, the source's bit rates, which are not the cut's),
``stts`` (decode times), ``stss`` (keyframes, unless all are), ``ctts`` (presentation offsets,
where any), ``stsc``/``stsz``/``stco`` (``co64`` past 4 GB). The packets' bytes are the source's,
so a decoder gives the same frames; their times are those ``mp4._remux`` gives the muxer (a test
demuxes both files and compares every packet). ``write_indexed`` and ``source_heads`` say False or
None, nothing written, for what this writer does not do (sources whose sample descriptions differ,
not an mp4 of one video track, a cut that is not one range of packets, a frame shown before it is
decoded); the caller then muxes with PyAV.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np

from .mp4index import source_boxes

__all__ = ["Piece", "source_heads", "write_indexed"]

#: Bytes read and written at a time (a long run of packets is copied in pieces this big).
COPY_BYTES = 32 << 20
#: The movie time scale FFmpeg writes (``mvhd``, ``tkhd``, ``elst``: milliseconds).
MOVIE_SCALE = 1000
_MATRIX = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)


@dataclass(frozen=True, slots=True)
class Piece:
    """Packets ``first .. first + count`` (decode order) of one source, their times in the output
    (``pts``, ``dts``: int64 arrays of ``count``), their sizes and keyframe flags, and where their
    bytes lie in the source (``pos``; ``read(offset, size)`` reads them)."""

    read: Callable[[int, int], bytes]
    pos: np.ndarray
    size: np.ndarray
    pts: np.ndarray
    dts: np.ndarray
    key: np.ndarray


def source_heads(sources: Sequence[Callable[[], IO[bytes]]], names: Sequence[str]) -> tuple[bytes, bytes, bool] | None:
    """The ``ftyp`` and sample description the files ``sources`` open share, and whether one's
    muxer delayed decoding (an edit list starting past 0: the stream has B-frames); None where
    they differ or one is not an mp4 of one video track (``mp4index.source_boxes``)."""
    heads, delayed = set(), False
    for opener, name in zip(sources, names, strict=True):
        with opener() as f:
            head = source_boxes(f, _size(f), name)
        if head is None:
            return None
        stsd = _without_btrt(head[1])
        if stsd is None:
            return None
        heads.add((head[0], stsd))
        delayed = delayed or head[2] > 0
    return (*heads.pop(), delayed) if len(heads) == 1 else None


#: A visual sample entry's fields before its child boxes (ISO 14496-12 12.1.3), after the box header.
_VISUAL_ENTRY = 78


def _without_btrt(stsd: bytes) -> bytes | None:
    """The sample description without its ``btrt`` box (the source's bit rates: informative, and
    not the cut's; two files of one encoder differ only there), sizes fixed; None where the one
    visual sample entry's child boxes do not fill it exactly."""
    entry = stsd[16:]
    if len(entry) < 8 + _VISUAL_ENTRY or struct.unpack_from(">I", entry)[0] != len(entry):
        return None
    kept, pos = [], 8 + _VISUAL_ENTRY
    while pos < len(entry):
        if len(entry) - pos < 8:
            return None
        size, kind = struct.unpack_from(">I4s", entry, pos)
        if size < 8 or pos + size > len(entry):
            return None
        if kind != b"btrt":
            kept.append(entry[pos:pos + size])
        pos += size
    body = entry[4:8 + _VISUAL_ENTRY] + b"".join(kept)
    return _full(b"stsd", 0, struct.pack(">I", 1) + struct.pack(">I", 4 + len(body)) + body)


def write_indexed(
    pieces: Sequence[Piece], ftyp: bytes, stsd: bytes, timescale: int, width: int, height: int,
    last_duration: int, out: str,
) -> bool:
    """Write ``pieces`` (in order) as the mp4 ``out`` with the sources' ``ftyp`` and ``stsd`` boxes
    (``source_heads``). False, nothing written, where this writer does not apply (module docstring)."""
    if not pieces:
        return False
    pts = np.concatenate([p.pts for p in pieces])
    dts = np.concatenate([p.dts for p in pieces])
    sizes = np.concatenate([p.size for p in pieces])
    keys = np.concatenate([p.key for p in pieces])
    durations = np.append(np.diff(dts), last_duration)
    offsets = pts - dts
    if (durations <= 0).any() or (offsets < 0).any() or (sizes <= 0).any() or (sizes >= 1 << 32).any():
        return False
    start = int(pts.min()) - int(dts[0])  # the edit: from the first frame shown
    total = int(dts[-1] - dts[0]) + last_duration  # the track's duration (the stts sum)
    shown = int(pts.max() - pts.min()) + last_duration  # what the edit shows
    chunks = _chunks(pieces)
    mdat_size = 8 + int(sizes.sum())
    head = 16 if mdat_size >= 1 << 32 else 8
    at = len(ftyp) + head
    chunk_offsets = at + np.concatenate(([0], np.cumsum([n for _, _, n in chunks[:-1]]))).astype(np.int64)
    with open(out, "wb") as dst:
        dst.write(ftyp)
        dst.write(struct.pack(">I4sQ", 1, b"mdat", mdat_size + 8) if head == 16 else struct.pack(">I4s", mdat_size, b"mdat"))
        for read, offset, n in chunks:
            data = read(offset, n)
            if len(data) != n:
                raise OSError(f"read {len(data)} of {n} bytes")
            dst.write(data)
        dst.write(_moov(stsd, timescale, width, height, total, shown, start, durations, offsets, sizes, keys,
                        [n for _, _, n in chunks], chunk_offsets, pieces))
    return True


def _chunks(pieces: Sequence[Piece]) -> list[tuple[Callable[[int, int], bytes], int, int]]:
    """``(read, offset, size)`` per chunk: each piece's packets split where the source has a gap
    between them or a chunk would pass ``COPY_BYTES``; a chunk is one read and one write."""
    out = []
    for p in pieces:
        gaps = np.flatnonzero(p.pos[1:] != p.pos[:-1] + p.size[:-1]) + 1
        for lo, hi in zip(np.r_[0, gaps].tolist(), np.r_[gaps, len(p.pos)].tolist(), strict=True):
            while lo < hi:
                ends = p.pos[lo:hi] + p.size[lo:hi] - p.pos[lo]
                stop = lo + max(1, int(np.searchsorted(ends, COPY_BYTES, side="right")))
                out.append((p.read, int(p.pos[lo]), int(ends[stop - lo - 1])))
                lo = stop
    return out


def _moov(
    stsd: bytes, timescale: int, width: int, height: int, total: int, shown: int, start: int,
    durations: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, keys: np.ndarray,
    chunk_bytes: list[int], chunk_offsets: np.ndarray, pieces: Sequence[Piece],
) -> bytes:
    movie = -(-shown * MOVIE_SCALE // timescale)  # rounded up: the edit covers every frame
    counts = _samples_per_chunk(chunk_bytes, pieces)
    stbl = [
        stsd,
        _full(b"stts", 0, _rle(durations)),
        b"" if keys.all() else _full(b"stss", 0, _table(np.flatnonzero(keys) + 1, ">u4")),
        _full(b"ctts", 0, _rle(offsets)) if offsets.any() else b"",
        _full(b"stsc", 0, _stsc(counts)),
        _full(b"stsz", 0, struct.pack(">I", 0) + _table(sizes, ">u4")),
        _full(b"co64", 0, _table(chunk_offsets, ">u8"))
        if int(chunk_offsets[-1]) >= 1 << 32
        else _full(b"stco", 0, _table(chunk_offsets, ">u4")),
    ]
    minf = _box(
        b"minf",
        _full(b"vmhd", 1, bytes(8)),
        _box(b"dinf", _full(b"dref", 0, struct.pack(">I", 1) + _full(b"url ", 1, b""))),
        _box(b"stbl", *stbl),
    )
    mdia = _box(
        b"mdia",
        _versioned(b"mdhd", 0, struct.pack(">I", timescale), total, struct.pack(">HH", 0x55C4, 0)),  # language und
        _full(b"hdlr", 0, struct.pack(">I4s12s", 0, b"vide", bytes(12)) + b"VideoHandler\0"),
        minf,
    )
    wide = max(movie, start) >= 1 << 32
    elst = struct.pack(">I", 1) + struct.pack(">Qq" if wide else ">Ii", movie, start) + struct.pack(">hh", 1, 0)
    trak = _box(
        b"trak",
        _versioned(b"tkhd", 3, struct.pack(">II", 1, 0), movie,  # track 1, enabled and in the movie
                   bytes(8) + struct.pack(">hhhH", 0, 0, 0, 0) + _MATRIX + struct.pack(">II", width << 16, height << 16)),
        _box(b"edts", _full(b"elst", int(wide), elst)),
        mdia,
    )
    mvhd = _versioned(b"mvhd", 0, struct.pack(">I", MOVIE_SCALE), movie,
                      struct.pack(">IH", 0x10000, 0x100) + bytes(10) + _MATRIX + bytes(24) + struct.pack(">I", 2))
    return _box(b"moov", mvhd, trak)


def _samples_per_chunk(chunk_bytes: list[int], pieces: Sequence[Piece]) -> np.ndarray:
    """Packets per chunk, from the chunks' byte counts (chunks hold whole packets, in order)."""
    sizes = np.concatenate([p.size for p in pieces])
    ends = np.cumsum(sizes)
    return np.diff(np.searchsorted(ends, np.cumsum(chunk_bytes), side="right"), prepend=0)


def _stsc(counts: np.ndarray) -> bytes:
    """Runs of chunks with the same packet count: (first chunk, packets per chunk, description 1)."""
    first = np.flatnonzero(np.r_[True, counts[1:] != counts[:-1]])
    rows = np.stack([first + 1, counts[first], np.ones(len(first), np.int64)], 1)
    return _table(rows, ">u4")


def _rle(values: np.ndarray) -> bytes:
    """(count, value) runs of ``values``: ``stts``' and ``ctts``' entries."""
    first = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    counts = np.diff(np.r_[first, len(values)])
    return _table(np.stack([counts, values[first]], 1), ">u4")


def _table(rows: np.ndarray, dtype: str) -> bytes:
    """An entry count and the entries (every column of one big-endian type)."""
    return struct.pack(">I", len(rows)) + np.ascontiguousarray(rows, dtype=dtype).tobytes()


def _versioned(kind: bytes, flags: int, middle: bytes, duration: int, rest: bytes) -> bytes:
    """A header box (``mvhd``, ``tkhd``, ``mdhd``): creation and modification times (0), ``middle``
    (the time scale; ``tkhd``: the track id and a reserved word), the duration, the rest; version 1
    (64-bit times) where the duration needs it."""
    if duration >= 1 << 32:
        return _full(kind, flags, bytes(16) + middle + struct.pack(">Q", duration) + rest, 1)
    return _full(kind, flags, bytes(8) + middle + struct.pack(">I", duration) + rest)


def _full(kind: bytes, flags: int, payload: bytes, version: int = 0) -> bytes:
    return _box(kind, struct.pack(">I", version << 24 | flags) + payload)


def _box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I4s", 8 + len(body), kind) + body


def _size(f: IO[bytes]) -> int:
    end = f.seek(0, 2)
    f.seek(0)
    return int(end)

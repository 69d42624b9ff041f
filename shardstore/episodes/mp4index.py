"""An mp4's packets from its sample tables alone: what a demux of every packet gives, from one read.

A check that a video holds the frames its episodes claim needs each packet's time, keyframe flag,
byte offset and size, not its bytes. An mp4 (what LeRobot writes) lists all of them in the
``moov`` box's sample tables: ``stts`` (durations, so decode times), ``ctts`` (presentation
offsets), ``stss`` (keyframes), ``stsz`` (sizes), ``stsc`` with ``stco``/``co64`` (chunks, so
offsets), ``mdhd`` (the time base) and ``elst`` (the shift an encoder with B-frames writes). Reading
them is one read of the ``moov`` (found by walking the top-level box headers) and a few numpy
operations, where a demux creates one packet object per frame.

``sample_table`` gives the packets as FFmpeg's mov demuxer gives them, including where it stops on
a file cut short (at the first packet starting at or past the end), and gives ``None`` for anything
it does not read exactly like that demuxer: not an mp4, no complete ``moov``, a fragmented file,
more than one track, an edit list other than one shift to the first frame, negative presentation
offsets, a constant-size ``stsz``, sync sample groups (HEVC's open GOPs), several sample
descriptions, a packet the file's end cuts (the demuxer reads it short, flags it corrupt and lets
the codec's parser decide whether it is a keyframe). The caller then demuxes. Every count in the
tables is checked against its box's size before anything is allocated; a table that contradicts
another raises ``DecodeError`` naming the file and the box's offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import IO

import numpy as np

from ..errors import DecodeError

__all__ = ["SampleTable", "sample_table", "source_boxes"]

#: Top-level boxes walked before giving up on finding the ``moov`` (a file of tiny boxes is not
#: what an encoder writes; the demuxer reads it instead).
MAX_TOP_BOXES = 64
#: Boxes the tables of a track may not hold for this reading to be exact.
_UNSUPPORTED = (b"stz2", b"stps", b"sbgp", b"sgpd", b"cslg")


@dataclass(frozen=True, slots=True, eq=False)
class SampleTable:
    """One video track's packets as the demuxer reads them, in decode order (int64 arrays)."""

    timescale: int  # the track's time base is 1/timescale
    pts: np.ndarray  # presentation time, edit list applied
    offsets: np.ndarray  # byte offset in the file
    sizes: np.ndarray
    keys: np.ndarray  # bool: a sync sample


@dataclass(frozen=True, slots=True)
class _Box:
    kind: bytes
    start: int  # payload start in the moov buffer
    end: int


class _Moov:
    """The ``moov`` bytes and the file offset they start at (for error messages)."""

    def __init__(self, data: bytes, at: int, name: str) -> None:
        self.data, self.at, self.name = data, at, name

    def fail(self, what: str, box: _Box | None) -> DecodeError:
        return DecodeError(f"mp4 sample tables: {what}", path=self.name,
                           offset=None if box is None else self.at + box.start)

    def children(self, parent: _Box) -> list[_Box]:
        out, pos = [], parent.start
        while pos < parent.end:
            if parent.end - pos < 8:
                raise self.fail(f"{parent.end - pos} stray bytes in {parent.kind.decode('latin-1')}", parent)
            size, kind = struct.unpack_from(">I4s", self.data, pos)
            head = 8
            if size == 1:
                if parent.end - pos < 16:
                    raise self.fail("a box header cut short", parent)
                size, head = struct.unpack_from(">Q", self.data, pos + 8)[0], 16
            elif size == 0:
                size = parent.end - pos
            if size < head or pos + size > parent.end:
                raise self.fail(f"box {kind.decode('latin-1')!r} of {size} bytes does not fit its parent", _Box(kind, pos, pos))
            out.append(_Box(kind, pos + head, pos + size))
            pos += size
        return out

    def optional(self, parent: _Box, kind: bytes) -> _Box | None:
        """The ``kind`` box of ``parent``: at most one."""
        found = [b for b in self.children(parent) if b.kind == kind]
        if len(found) > 1:
            raise self.fail(f"{len(found)} {kind.decode('latin-1')} boxes in {parent.kind.decode('latin-1')}", parent)
        return found[0] if found else None

    def child(self, parent: _Box, kind: bytes) -> _Box:
        """The ``kind`` box of ``parent``: exactly one."""
        found = self.optional(parent, kind)
        if found is None:
            raise self.fail(f"no {kind.decode('latin-1')} box in {parent.kind.decode('latin-1')}", parent)
        return found

    def table(self, box: _Box, head: int, fields: str, fields_v1: str = "") -> np.ndarray:
        """A full box's table of ``fields`` (numpy dtype strings, one per column; ``fields_v1``
        for a version 1 box), after ``head`` bytes of its own and an entry count that must fit."""
        if box.end - box.start < 8 + head:
            raise self.fail("a table box cut short", box)
        if fields_v1 and self.data[box.start] == 1:
            fields = fields_v1
        count = struct.unpack_from(">I", self.data, box.start + 4 + head)[0]
        dtype = np.dtype([(f"f{i}", f) for i, f in enumerate(fields.split())])
        first = box.start + 8 + head
        if count * dtype.itemsize > box.end - first:
            raise self.fail(f"{count} entries in {box.end - first} bytes", box)
        return np.frombuffer(self.data, dtype, count, first)


def _find_moov(f: IO[bytes], size: int) -> tuple[int, int] | None:
    """The ``moov``'s payload offset and size from the top-level box headers; ``None`` for no
    complete ``moov`` or a fragmented file (``moof`` before it)."""
    pos = 0
    for _ in range(MAX_TOP_BOXES):
        if size - pos < 8:
            return None
        f.seek(pos)
        head = f.read(16)
        if len(head) < 8:
            return None
        box, kind = struct.unpack_from(">I4s", head)
        skip = 8
        if box == 1 and len(head) == 16:
            box, skip = struct.unpack_from(">Q", head, 8)[0], 16
        elif box == 0:
            box = size - pos
        if box < skip or pos + box > size or kind == b"moof":
            return None
        if kind == b"moov":
            return pos + skip, box - skip
        pos += box
    return None


def sample_table(f: IO[bytes], size: int, name: str) -> SampleTable | None:
    """The packets of the one video track of the mp4 ``f`` (``size`` bytes, named ``name``), as a
    demux reads them; ``None`` where this reading would not be exact (module docstring)."""
    found = _video_track(f, size, name)
    if found is None:
        return None
    m, tops, trak, mdia = found
    data = m.data
    mdhd, minf = (m.child(mdia, k) for k in (b"mdhd", b"minf"))
    timescale = _timescale(m, mdhd)
    stbl = m.child(minf, b"stbl")
    boxes = m.children(stbl)
    if any(b.kind in _UNSUPPORTED for b in boxes):
        return None
    stsd = m.child(stbl, b"stsd")
    if stsd.end - stsd.start < 8 or struct.unpack_from(">I", data, stsd.start + 4)[0] != 1:
        return None
    stsz = m.child(stbl, b"stsz")
    if stsz.end - stsz.start < 12 or struct.unpack_from(">I", data, stsz.start + 4)[0] != 0:
        return None  # one size for every sample: no table bounds the count
    sizes = m.table(stsz, 4, ">u4")["f0"].astype(np.int64)
    n = len(sizes)
    dts = _expand(m, m.child(stbl, b"stts"), ">u4 >u4", n, "stts")
    dts = np.concatenate(([0], np.cumsum(dts[:-1], dtype=np.int64))) if n else dts
    ctts_box = m.optional(stbl, b"ctts")
    ctts = None if ctts_box is None else _expand(m, ctts_box, ">u4 >i4", n, "ctts")
    if ctts is not None and (ctts < 0).any():
        return None  # negative offsets: the demuxer shifts decode times its own way
    pts = dts if ctts is None else dts + ctts
    shift = _edit_shift(m, trak, tops, timescale, pts)
    if shift is None:
        return None
    keys = _keys(m, m.optional(stbl, b"stss"), n)
    if keys is None:
        return None
    offsets = _offsets(m, stbl, sizes)
    # The demuxer stops at the first packet starting at or past the file's end. One the end cuts
    # is read short and its keyframe flag is then the codec parser's guess: left to the demuxer.
    past = np.flatnonzero(offsets >= size)
    stop = int(past[0]) if len(past) else n
    if (offsets[:stop] + sizes[:stop] > size).any():
        return None
    return SampleTable(timescale=timescale, pts=pts[:stop] - shift, offsets=offsets[:stop], sizes=sizes[:stop],
                       keys=keys[:stop])


def _video_track(f: IO[bytes], size: int, name: str) -> tuple[_Moov, list[_Box], _Box, _Box] | None:
    """The ``moov`` of an mp4 with one track, a video track, not fragmented: the box reader, its
    top-level boxes, the ``trak`` and its ``mdia``; ``None`` for any other file."""
    where = _find_moov(f, size)
    if where is None:
        return None
    f.seek(where[0])
    data = f.read(where[1])
    if len(data) != where[1]:
        return None
    m = _Moov(data, where[0], name)
    tops = m.children(_Box(b"moov", 0, len(data)))
    traks = [b for b in tops if b.kind == b"trak"]
    if len(traks) != 1 or any(b.kind == b"mvex" for b in tops):
        return None
    mdia = m.child(traks[0], b"mdia")
    hdlr = m.child(mdia, b"hdlr")
    if hdlr.end - hdlr.start < 12 or data[hdlr.start + 8:hdlr.start + 12] != b"vide":
        return None
    return m, tops, traks[0], mdia


def _timescale(m: _Moov, mdhd: _Box) -> int:
    version = m.data[mdhd.start] if mdhd.end > mdhd.start else 0
    at = mdhd.start + (20 if version == 1 else 12)
    if at + 4 > mdhd.end:
        raise m.fail("mdhd cut short", mdhd)
    scale = struct.unpack_from(">I", m.data, at)[0]
    if not scale:
        raise m.fail("a time scale of 0", mdhd)
    return int(scale)


def _expand(m: _Moov, box: _Box, fields: str, n: int, what: str) -> np.ndarray:
    """A run-length table (count, value) as one int64 value per sample; its counts must sum to
    the ``n`` samples of ``stsz`` (checked before anything that long is made)."""
    rows = m.table(box, 0, fields)
    counts = rows["f0"].astype(np.int64)
    if int(counts.sum()) != n:
        raise m.fail(f"{what} counts {int(counts.sum())} samples, stsz {n}", box)
    return np.repeat(rows["f1"].astype(np.int64), counts)


def _edit_shift(m: _Moov, trak: _Box, tops: list[_Box], timescale: int, pts: np.ndarray) -> int | None:
    """What the edit list takes from every time: none, or one edit starting at the first frame
    and covering every frame (what a muxer writes for B-frames); ``None`` for any other."""
    edts = m.optional(trak, b"edts")
    if edts is None:
        return 0
    elst = m.child(edts, b"elst")
    rows = m.table(elst, 0, ">u4 >i4 >i2 >i2", ">u8 >i8 >i2 >i2")
    if len(rows) != 1 or int(rows["f2"][0]) != 1 or int(rows["f3"][0]) != 0 or not len(pts):
        return None
    start = int(rows["f1"][0])
    if start != int(pts.min()):
        return None
    mvhd = next((b for b in tops if b.kind == b"mvhd"), None)
    if mvhd is None:
        return None
    movie_scale = _timescale(m, mvhd)
    span = int(rows["f0"][0]) * timescale / movie_scale  # the edit's length in the track's time base
    return start if start + span >= int(pts.max()) + 1 else None


def _keys(m: _Moov, stss: _Box | None, n: int) -> np.ndarray | None:
    """Keyframe flags: every sample without ``stss``; ``None`` for an empty ``stss`` (the demuxer
    then asks a parser)."""
    if stss is None:
        return np.ones(n, np.bool_)
    numbers = m.table(stss, 0, ">u4")["f0"].astype(np.int64)
    if not len(numbers):
        return None
    if numbers.min() < 1 or numbers.max() > n:
        raise m.fail(f"a sync sample outside samples 1..{n}", stss)
    keys = np.zeros(n, np.bool_)
    keys[numbers - 1] = True
    return keys


def _offsets(m: _Moov, stbl: _Box, sizes: np.ndarray) -> np.ndarray:
    """Each sample's byte offset: its chunk's offset (``stco``/``co64``) plus the sizes of the
    samples before it in the chunk (``stsc``: samples per chunk, in runs of chunks)."""
    stco = m.optional(stbl, b"stco")
    co64 = m.optional(stbl, b"co64")
    box = stco or co64
    if box is None or (stco and co64):
        raise m.fail("not one of stco and co64", stbl)
    chunks = m.table(box, 0, ">u4" if box is stco else ">u8")["f0"]
    if box is co64 and len(chunks) and int(chunks.max()) >= 1 << 62:
        raise m.fail("a chunk offset past any file", box)
    chunks = chunks.astype(np.int64)
    stsc = m.child(stbl, b"stsc")
    runs = m.table(stsc, 0, ">u4 >u4 >u4")
    first = runs["f0"].astype(np.int64)
    per = runs["f1"].astype(np.int64)
    n = len(sizes)
    if len(runs) and (first[0] != 1 or (np.diff(first) <= 0).any() or first[-1] > len(chunks) or per.max() > n):
        raise m.fail("runs of chunks out of order or past the chunk table", stsc)
    lengths = np.diff(np.append(first, len(chunks) + 1))
    if int((per * lengths).sum()) != n:
        raise m.fail(f"chunks holding {int((per * lengths).sum())} samples, stsz {n}", stsc)
    per_chunk = np.repeat(per, lengths)
    chunk = np.repeat(np.arange(len(chunks)), per_chunk)
    ends = np.cumsum(sizes)
    chunk_start = np.cumsum(per_chunk) - per_chunk  # each chunk's first sample
    before = ends - sizes - (ends - sizes)[chunk_start[chunk]]  # sizes before it in its chunk
    return chunks[chunk] + before


def source_boxes(f: IO[bytes], size: int, name: str) -> tuple[bytes, bytes, int] | None:
    """The ``ftyp`` box, the sample description box (``stsd``, whole) and the edit list's start
    (the decode delay a muxer writes for B-frames; 0 without one) of an mp4 with one video track
    and one sample description, to write another file of its packets (``mp4write``); ``None``
    for any other file."""
    f.seek(0)
    head = f.read(8)
    if len(head) < 8:
        return None
    box, kind = struct.unpack(">I4s", head)
    if kind != b"ftyp" or not 8 <= box <= min(size, 4096):
        return None
    ftyp = head + f.read(box - 8)
    found = _video_track(f, size, name) if len(ftyp) == box else None
    if found is None:
        return None
    m, _, trak, mdia = found
    data = m.data
    stsd = m.child(m.child(m.child(mdia, b"minf"), b"stbl"), b"stsd")
    if stsd.end - stsd.start < 8 or struct.unpack_from(">I", data, stsd.start + 4)[0] != 1:
        return None
    if struct.unpack_from(">I", data, stsd.start - 8)[0] != stsd.end - stsd.start + 8:
        return None  # a 64-bit header: not what a muxer writes for a few hundred bytes
    edts = m.optional(trak, b"edts")
    rows = None if edts is None else m.table(m.child(edts, b"elst"), 0, ">u4 >i4 >i2 >i2", ">u8 >i8 >i2 >i2")
    start = int(rows["f1"][0]) if rows is not None and len(rows) == 1 else 0
    return ftyp, data[stsd.start - 8:stsd.end], max(start, 0)

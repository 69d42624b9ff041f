"""The columns layout (layout 2): one sample per episode whose small fields cost their own bytes.

Why: the step layout (layout 1, ``layout.py``) gives every small field of every step a tar member
of its own, 512 bytes of header and up to 511 of padding for a few floats: 149 MB for a 9 MB
LeRobot dataset. Here an episode ``e{episode:08d}`` is one sample of these members, in this order:

- ``steps.npy``: one record per row (``steps`` rows, or ``steps + 1`` when the schema has
  ``steps+1`` fields), a structured dtype (``row_dtype``) with a column per array field (its dtype
  and per-step shape), three per video field (``<name>/file``: its index in the schema's
  ``attrs["video_files"]``, ``<name>/timestamp`` float64 seconds, ``<name>/frame`` int64), two
  per media or text field (``<name>/offset``, ``<name>/size``: where its value lies in
  ``blobs.bin``) and the flags ``is_first``, ``is_last``, ``is_terminal`` (bool). Records are
  packed (no alignment padding); a ``steps`` field's value in the final ``steps+1`` row is zeros.
  ``np.load`` reads it (Energon decodes it as any ``.npy``).
- ``blobs.bin`` (only when the schema has media or text fields): row after row, the row's record
  (a copy of its ``steps.npy`` record) then its values in schema order, concatenated: media their
  encoded bytes, text UTF-8. A value (of 64 bytes or more) equal to one the row before wrote is not
  written again: its offset points there (a next observation is the following step's observation).
  So a step or a window of a dataset with media is one read of its span of ``blobs.bin``, from the
  row before when it shares a value, wherever it lies in a large episode (the episode index has each
  row's start and the first byte it reads: ``encode_columns``'s second value); the copies cost a
  record per row (about 1% beside an image).
- ``<name>.json`` per video field: the rows' frame references by file name
  (``video.refs_to_bytes``, as layout 1's episode samples), for Energon, whose metadataset reaches
  the video store as an ``aux`` source by these names; the view reads the columns instead.

So row ``t`` of ``steps.npy`` lies at a fixed offset from the sample's first byte (known from the
``.tar.idx``): ``512 + len(npy header) + t * itemsize``, and a step or a window of rows is one read
of its records; with media or text fields, one read of its span of ``blobs.bin`` instead; a whole
episode is one read. ``ColumnLayout`` holds these offsets for a schema; the writer's
``encode.encode_episode`` calls ``encode_columns``, the view ``ColumnLayout``'s readers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..errors import DecodeError, EpisodeFormatError
from .model import FLAG_FIELDS, FieldSpec, Schema, StepValues
from .npy import npy_header, parse_header
from .video import VideoRef, refs_to_bytes

__all__ = ["RECENT", "RECENT_BYTES", "STEPS_PART", "BLOBS_PART", "ColumnEpisode", "ColumnLayout", "encode_columns", "row_dtype"]

STEPS_PART = "steps.npy"
BLOBS_PART = "blobs.bin"
_BLOCK = 512
#: Values this long or longer that equal one the row before wrote are stored once (shorter ones cost
#: less than the read of the row before that sharing would add to a step).
_SHARED_MIN = 64


def _padded(size: int) -> int:
    return size + (-size % _BLOCK)


def row_dtype(schema: Schema) -> np.dtype:
    """The record of one row of ``steps.npy`` for ``schema`` (see the module docstring). Field
    names cannot hold ``/``, so the ``name/column`` columns never clash with an array field."""
    cols: list[tuple[Any, ...]] = []
    for f in schema.fields:
        if f.kind == "array":
            cols.append((f.name, np.dtype(f.dtype), f.shape))
        elif f.kind == "video":
            cols += [(f"{f.name}/file", "<u4"), (f"{f.name}/timestamp", "<f8"), (f"{f.name}/frame", "<i8")]
        else:
            cols += [(f"{f.name}/offset", "<u8"), (f"{f.name}/size", "<u8")]
    cols += [(name, "?") for name in FLAG_FIELDS]
    try:
        dtype = np.dtype(cols)
    except (TypeError, ValueError) as e:
        raise EpisodeFormatError(f"the schema's fields make no record type: {e}") from e
    if dtype.hasobject:
        raise EpisodeFormatError("a field's dtype holds Python objects; only plain arrays are stored")
    return dtype


def _video_files(schema: Schema) -> dict[str, int]:
    return {str(name): i for i, name in enumerate(schema.attrs.get("video_files") or [])}


def encode_columns(
    schema: Schema, steps: Mapping[str, StepValues], n: int, extra: bool, terminal: bool, where: str
) -> tuple[list[tuple[str, bytes]], bytes]:
    """An episode's parts in the columns layout, in the order they are written (``steps.npy``
    first, so the reader finds its rows without reading a header), and where each row's values
    begin in ``blobs.bin`` (``rows + 1`` uint64), then where each row's values begin at the
    lowest (``rows`` uint64: the row's start, or the start of the row before whose value it
    shares), as bytes: the episode index keeps them; empty without media or text fields."""
    rows = n + 1 if extra else n
    dtype = row_dtype(schema)
    rec = np.zeros(rows, dtype)
    blobs: list[bytes] = []
    offset = 0
    variable = [f for f in schema.fields if f.kind in ("media", "text")]
    files = _video_files(schema) if any(f.kind == "video" for f in schema.fields) else {}
    for f in schema.fields:
        v = steps[f.name]
        if f.kind == "array":
            rec[f.name][: len(v)] = v
        elif f.kind == "video":
            refs: list[VideoRef] = v  # type: ignore[assignment]
            try:
                rec[f"{f.name}/file"][: len(refs)] = [files[r.file] for r in refs]
            except KeyError as e:
                raise EpisodeFormatError(f"video file {e.args[0]!r} is not in the schema's video_files",
                                         member=f"{where}, field {f.name!r}") from None
            rec[f"{f.name}/timestamp"][: len(refs)] = [r.timestamp for r in refs]
            rec[f"{f.name}/frame"][: len(refs)] = [r.frame for r in refs]
    starts = np.zeros(rows + 1, "<u8")
    lows = np.zeros(rows, "<u8")
    values: list[list[bytes]] = []
    if variable:
        offsets = {f.name: np.zeros(rows, np.uint64) for f in variable}
        sizes = {f.name: np.zeros(rows, np.uint64) for f in variable}
        previous: dict[bytes, int] = {}  # the values the row before wrote, by bytes: where they lie
        for t in range(rows):
            starts[t] = lows[t] = offset
            offset += dtype.itemsize  # the row's record comes first
            row: list[bytes] = []
            written: dict[bytes, int] = {}
            for f in variable:
                v = steps[f.name]
                if t >= len(v):
                    offsets[f.name][t] = offset
                    continue
                item = v[t]
                data = item.encode() if f.kind == "text" else bytes(item)  # type: ignore[union-attr,arg-type]
                sizes[f.name][t] = len(data)
                at = previous.get(data) if len(data) >= _SHARED_MIN else None
                if at is not None:  # the row before wrote these bytes (a next observation, a repeated text)
                    offsets[f.name][t] = at
                    lows[t] = starts[t - 1]
                    continue
                row.append(data)
                offsets[f.name][t] = written[data] = offset
                offset += len(data)
            values.append(row)
            previous = written
        starts[rows] = offset
        for f in variable:
            rec[f"{f.name}/offset"] = offsets[f.name]
            rec[f"{f.name}/size"] = sizes[f.name]
    rec["is_first"][0] = True
    rec["is_last"][-1] = True
    rec["is_terminal"][-1] = terminal
    records = rec.tobytes()
    parts = [(STEPS_PART, npy_header(dtype, (rows,)) + records)]
    if variable:
        size = dtype.itemsize
        for t, row in enumerate(values):
            blobs.append(records[t * size : (t + 1) * size])
            blobs += row
        parts.append((BLOBS_PART, b"".join(blobs)))
    for f in schema.fields:  # the references by file name, for Energon's aux stores (not read here)
        if f.kind == "video":
            parts.append((f"{f.name}.json", refs_to_bytes(steps[f.name])))  # type: ignore[arg-type]
    return parts, starts.tobytes() + lows.tobytes() if variable else b""


#: What a record's columns decode to, in ``ColumnLayout.row``'s plan.
_ARRAY, _MEDIA, _TEXT, _VIDEO = range(4)
#: Bytes of a media or text field's columns (offset, size: ``QQ``) and a video field's (file,
#: timestamp, frame: ``Idq``).
_SPAN_BYTES, _REF_BYTES = struct.calcsize("<QQ"), struct.calcsize("<Idq")
#: The episodes a view keeps opened (``Episodes._recent``), and the bytes of their row starts.
RECENT, RECENT_BYTES = 1 << 16, 64 << 20


class _Column(NamedTuple):
    """How ``ColumnLayout.row`` takes one field's value from a record: whether the final
    ``steps+1`` row lacks it, its kind (``_ARRAY`` ..), its name, for an array the byte offset,
    dtype, shape and size of its value, for the others the index of its first column in the tuple
    ``ColumnLayout.unpack`` gives (offset then size; file, timestamp then frame). A named tuple:
    ``row`` unpacks it in its loop, cheaper than attribute reads on every field of every step."""

    steps_only: bool
    kind: int
    name: str
    offset: int
    dtype: np.dtype | None
    shape: tuple[int, ...]
    size: int


@dataclass(frozen=True, slots=True)
class ColumnEpisode:
    """One episode of the columns layout, located and checked once (``ColumnLayout.open``) so that
    a step is one read and a few indexings: the view keeps the episodes it read last
    (``Episodes._recent``). Offsets are the shard's (``start``: the sample's first byte, ``records``:
    steps.npy's first record, ``blobs``: blobs.bin's first byte); ``starts`` is the episode index's
    table of row starts in ``blobs.bin`` (``encode_columns``' second value), None without media or
    text fields or from an older index."""

    shard: str
    where: str
    steps: int
    rows: int
    start: int
    records: int
    blobs: int
    blob_bytes: int
    starts: np.ndarray | None

    def span(self, lo: int, hi: int, itemsize: int) -> tuple[int, int]:
        """``(first, end)``: the bytes of ``blobs.bin`` that rows ``lo .. hi - 1`` read (their
        record copies, their values, and the values of the row before that row ``lo`` shares),
        checked to lie within ``blobs.bin`` and to hold row ``lo``'s record and one per row more
        (a few integer compares: the episode index is read once, not trusted)."""
        s = self.starts
        assert s is not None
        base, first, stop = s.item(self.rows + 1 + lo), s.item(lo), s.item(hi)
        if not (base <= first and first + (hi - lo) * itemsize <= stop <= self.blob_bytes):
            raise DecodeError(f"the episode index puts rows {lo} to {hi - 1} at bytes {base} to {stop} of blobs.bin, "
                              f"which has {self.blob_bytes}", member=self.where, noun="")
        return base, stop


@dataclass(frozen=True)
class ColumnLayout:
    """Where an episode's rows and values lie in its sample, and how they decode, for one schema."""

    schema: Schema
    dtype: np.dtype
    variable: tuple[FieldSpec, ...]
    columns: tuple[_Column, ...]
    #: One ``struct`` unpack of a record's media, text and video columns (array and flag bytes skipped).
    unpack: struct.Struct
    _rows_at: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, schema: Schema) -> ColumnLayout:
        variable = tuple(f for f in schema.fields if f.kind in ("media", "text"))
        dtype = row_dtype(schema)
        columns, fmt, at, index = [], "<", 0, 0
        for f in schema.fields:
            steps_only = f.rows == "steps"
            if f.kind == "array":
                sub, offset = dtype.fields[f.name][:2]  # type: ignore[index]
                columns.append(_Column(steps_only, _ARRAY, f.name, offset, sub.base, sub.shape, sub.itemsize))
                continue
            video = f.kind == "video"
            offset = dtype.fields[f"{f.name}/file" if video else f"{f.name}/offset"][1]  # type: ignore[index]
            fmt += f"{offset - at}x" + ("Idq" if video else "QQ")
            at = offset + (_REF_BYTES if video else _SPAN_BYTES)
            kind = _VIDEO if video else _TEXT if f.kind == "text" else _MEDIA
            columns.append(_Column(steps_only, kind, f.name, index, None, (), 0))
            index += 3 if video else 2
        return cls(schema, dtype, variable, tuple(columns), struct.Struct(fmt))

    def __reduce__(self) -> tuple[Any, tuple[Schema]]:
        """Rebuilt from the schema in a DataLoader worker: a ``struct.Struct`` does not pickle."""
        return ColumnLayout.of, (self.schema,)

    def rows_at(self, rows: int) -> int:
        """Offset of ``steps.npy``'s first record from the sample's first byte."""
        at = self._rows_at.get(rows)
        if at is None:  # the header's length changes only with the digits of ``rows``: few entries
            at = self._rows_at[rows] = _BLOCK + len(npy_header(self.dtype, (rows,)))
        return at

    def open(self, shard: str, start: int, end: int, steps: int, rows: int, starts: np.ndarray | None,
             where: str) -> ColumnEpisode:
        """The episode whose sample spans bytes ``start .. end`` of ``shard``, its ``rows`` records
        checked to fit in it and the episode index's row starts (``starts``) to be ``rows`` long
        (``DecodeError`` if not); ``ColumnEpisode.span`` checks the starts a read uses."""
        size = self.dtype.itemsize
        records = start + self.rows_at(rows)
        if records + rows * size > end:
            raise DecodeError(f"the episode's sample ({end - start} bytes) is too short for {rows} rows", member=where, noun="")
        if not self.variable:
            return ColumnEpisode(shard, where, steps, rows, start, records, records, 0, None)
        blobs = start + self.blobs_at(rows)
        if starts is not None and len(starts) != 2 * rows + 1:
            raise DecodeError(f"{len(starts)} row starts in the episode index for {rows} rows", member=where, noun="")
        return ColumnEpisode(shard, where, steps, rows, start, records, blobs, end - blobs, starts)

    def row(self, record: bytes | memoryview, at: int, blobs: bytes, base: int, t: int, steps: int,
            videos: list[str], where: str) -> dict[str, Any]:
        """Every field's value in row ``t`` (its record at byte ``at`` of ``record``; ``blobs``:
        ``blobs.bin`` from its byte ``base``, often the same read): what a step read returns,
        without numpy's per-call cost on one row (``fields`` does many rows). A ``steps`` field has
        no value in the final ``steps+1`` row."""
        out: dict[str, Any] = {}
        limit = len(blobs) + base
        values = self.unpack.unpack_from(record, at)
        last = t >= steps
        for steps_only, kind, name, i, dtype, shape, size in self.columns:
            if kind == _MEDIA:  # the common kinds first: this runs for every field of every step read
                if last and steps_only:
                    continue
                start, length = values[i], values[i + 1]
                if start < base or start + length > limit:
                    raise DecodeError(f"a value at byte {start} of blobs.bin lies outside the bytes {base} to {limit} read",
                                      member=f"{where}, field {name!r}")
                out[name] = blobs[start - base : start - base + length]
            elif last and steps_only:
                continue
            elif kind == _ARRAY:  # writable, one copy
                out[name] = np.ndarray(shape, dtype, bytearray(record[at + i : at + i + size]))
            elif kind == _VIDEO:
                if values[i] >= len(videos):
                    raise DecodeError("a frame reference names a video file the schema does not list",
                                      member=f"{where}, field {name!r}")
                out[name] = VideoRef(videos[values[i]], values[i + 1], values[i + 2])
            else:
                start, length = values[i], values[i + 1]
                if start < base or start + length > limit:
                    raise DecodeError(f"a value at byte {start} of blobs.bin lies outside the bytes {base} to {limit} read",
                                      member=f"{where}, field {name!r}")
                out[name] = _texts([blobs[start - base : start - base + length]], f"{where}, field {name!r}")[0]
        return out

    def blobs_at(self, rows: int) -> int:
        """Offset of ``blobs.bin``'s first byte from the sample's first byte."""
        return _padded(self.rows_at(rows) + rows * self.dtype.itemsize) + _BLOCK

    def check_sample(self, data: bytes | memoryview, key: str, rows: int, where: str) -> None:
        """That the first member of a read sample is ``steps.npy`` of ``rows`` records of this
        layout's record type: a whole-episode read checks this, and the first step or window read of
        an episode before the view keeps it."""
        name = bytes(data[:100]).rstrip(b"\0")
        if name != f"{key}.{STEPS_PART}".encode():
            raise DecodeError(f"the episode's first member is {name[:120]!r}, not {key}.{STEPS_PART}", member=where, noun="")
        _, (dtype, shape, start) = parse_header(memoryview(data)[_BLOCK : _BLOCK + 65536 + 12], where)
        if dtype != self.dtype or shape != (rows,) or _BLOCK + start != self.rows_at(rows):
            raise DecodeError(f"steps.npy holds {shape} of {dtype}, the schema says ({rows},) of {self.dtype}", member=where, noun="")

    def records(self, data: bytes | bytearray | memoryview, count: int, where: str, offset: int = 0) -> np.ndarray:
        """``count`` records from ``data`` at ``offset`` (``DecodeError`` when it is too short)."""
        if len(data) - offset < count * self.dtype.itemsize:
            raise DecodeError(f"{len(data) - offset} bytes where {count} rows need {count * self.dtype.itemsize}", member=where, noun="")
        return np.frombuffer(data, self.dtype, count, offset)

    def blob_span(self, rec: np.ndarray, limit: int, where: str, base: int = 0) -> tuple[int, int]:
        """``(start, end)`` in ``blobs.bin`` of the values of the rows ``rec``: one contiguous span
        (values are row after row); checked to lie within ``base .. limit``."""
        if not self.variable or len(rec) == 0:
            return base, base
        starts = [rec[f"{f.name}/offset"] for f in self.variable]
        ends = [s + rec[f"{f.name}/size"] for s, f in zip(starts, self.variable, strict=True)]
        lo, hi = int(min(int(s.min()) for s in starts)), int(max(int(e.max()) for e in ends))
        if lo < base or hi > limit:
            raise DecodeError(f"values at bytes {lo} to {hi} of blobs.bin, outside the {base} to {limit} "
                              "its sample (and the episode index) hold", member=where, noun="")
        return lo, hi

    def fields(self, rec: np.ndarray, blobs: bytes | memoryview, base: int, first: int, steps: int,
               videos: list[str], where: str) -> dict[str, Any]:
        """Every field's values over the records ``rec`` (rows ``first ..`` of an episode of
        ``steps`` steps): arrays stacked (own, writable memory), media bytes and text as lists,
        video references as ``VideoRef`` lists. ``blobs`` holds ``blobs.bin`` from its byte
        ``base``. A ``steps`` field leaves out the final ``steps+1`` row."""
        out: dict[str, Any] = {}
        m = len(rec)
        for f in self.schema.fields:
            k = min(m, max(0, steps - first)) if f.rows == "steps" else m
            if f.kind == "array":
                out[f.name] = np.array(rec[f.name][:k], copy=True, order="C")
            elif f.kind == "video":
                try:
                    out[f.name] = [VideoRef(videos[i], float(ts), int(fr)) for i, ts, fr in zip(
                        rec[f"{f.name}/file"][:k].tolist(), rec[f"{f.name}/timestamp"][:k].tolist(),
                        rec[f"{f.name}/frame"][:k].tolist(), strict=True)]
                except IndexError:
                    raise DecodeError("a frame reference names a video file the schema does not list",
                                      member=f"{where}, field {f.name!r}") from None
            else:
                offs = (rec[f"{f.name}/offset"][:k].astype(np.int64) - base).tolist()
                sizes = rec[f"{f.name}/size"][:k].astype(np.int64).tolist()
                values = [bytes(blobs[o : o + s]) for o, s in zip(offs, sizes, strict=True)]
                out[f.name] = _texts(values, f"{where}, field {f.name!r}") if f.kind == "text" else values
        return out


def _texts(values: list[bytes], where: str) -> list[str]:
    try:
        return [v.decode() for v in values]
    except UnicodeDecodeError as e:
        raise DecodeError(f"text that is not UTF-8: {e}", member=where, noun="") from None

"""The episode view of a prepared dataset: ``shardstore.episodes(ds)`` (also ``ds.episodes``).

Opening reads ``schema.json`` and the positional columns of ``episodes.sqlite`` for the split's
shards (one query, kept as numpy arrays). After that an episode, a step or a window is one read of
a contiguous byte range found through the shard's memory-mapped ``.tar.idx``: no SQL per step (the
metadata of ``[e]`` is one indexed lookup per episode), no scan, the same on S3 (range GETs; the
small index files are downloaded once into the cache keyed by ``index.uuid``).

Arrays come back as numpy arrays (``.npy`` parts decoded by ``npy.py``), media as their encoded
bytes, text as ``str``. Video fields: ``step`` and ``window`` decode the frames (HWC ``uint8``,
stacked in a window) from the dataset's video store (``video.VideoStore``); ``[e]`` and ``stream``
give the per-step ``VideoRef`` references, which an export cuts the files by. Steps and windows also carry the flags ``is_first``, ``is_last``,
``is_terminal`` (numpy bools); windows carry ``is_pad``, see ``Episodes.window``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from .. import nvmeta, safepickle
from ..dataset import Dataset, ShardRef
from ..dataset import open as open_dataset
from ..errors import (
    DatasetNotPreparedError,
    DecodeError,
    IndexCorruptError,
    PickleNotAllowedError,
    SampleNotFoundError,
    ShardstoreError,
    StorageError,
)
from ..keys import split_name
from ..storage import ByteRange, LocalStorage
from ..tarscan import fill_plain_sample, plain_members
from . import layout
from .columns import RECENT, RECENT_BYTES, ColumnEpisode, ColumnLayout
from .index import EPISODES_SQLITE, SCHEMA_JSON, SOURCE_DIR, EpisodeIndexReader
from .model import Episode, EpisodeStream, FieldSpec, Schema
from .names import safe_relpath
from .npy import decode, decode_rows, parse_header
from .packets import PACKETS_FILE, Frame
from .recent import Recent
from .video import VideoRef, VideoStore, refs_from_bytes

__all__ = ["Episodes", "episodes"]

_META = nvmeta.META_DIR
#: Header bytes of a step key ``e{8 digits}_s{6 digits}``: the first 11 (``e########_s``) are the
#: same in every sample of an episode, the next 6 (the step) differ.
_KEY_FIXED, _KEY_LEN = 11, 17
#: How far into a local episode's sample its first read may end and still take the headers along
#: (one read): beyond, a read of the headers apart costs less than copying the bytes between.
_LOCAL_GAP = 4096
#: Bytes read: a memoryview when cut from a larger read.
Buffer = bytes | memoryview
#: ``rows(lo, hi)``: every field's rows ``lo .. hi - 1`` of an episode already read.
RowReader = Callable[[int, int], dict[str, Any]]
#: Bytes of whole episodes a view keeps once a batch read them (``SHARDSTORE_EPISODES_KEPT_MB``):
#: a training loop comes back to each episode every epoch, and over S3 reading a batch's episodes
#: is a round trip of its own, a third of a batch of 32 policy windows behind a 20 ms delay.
READ_BYTES = int(float(os.environ.get("SHARDSTORE_EPISODES_KEPT_MB", "128")) * 2**20)
#: The keys of ``Episodes.to_dict``: the research code's dict of concatenated trajectories.
DICT_KEYS = ("obs", "next_obs", "acts", "dones")


class Episodes:
    """The episodes of a dataset's split, by position ``0 .. len - 1`` (shard order of the split,
    then write order). ``number(e)`` is the episode's own number (its keys' ``e{number:08d}``).

    Thread-safe for reads; pickles cheaply for DataLoader workers (the index connection and memory
    maps are reopened in each process).
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        storage = dataset.storage
        try:
            schema_text = storage.read(f"{_META}/{SCHEMA_JSON}")
        except (StorageError, FileNotFoundError):
            raise DatasetNotPreparedError(
                "not an episode dataset (no schema.json); write it with EpisodeWriter or `shardstore import`",
                path=storage.url(f"{_META}/{SCHEMA_JSON}"),
            ) from None
        self.schema = Schema.from_json(schema_text)
        self.layout = layout.read_layout(schema_text, storage.url(f"{_META}/{SCHEMA_JSON}"))
        self.index = EpisodeIndexReader(dataset._local_copy(f"{_META}/{EPISODES_SQLITE}"))
        self.granularity = self.index.granularity
        if self.granularity not in layout.GRANULARITIES or (self.granularity == "columns") != (self.layout == 2):
            raise DecodeError(f"layout {self.layout} with granularity {self.granularity!r}: they do not go together",
                              path=storage.url(f"{_META}/{EPISODES_SQLITE}"))
        self._columns = ColumnLayout.of(self.schema) if self.layout == 2 else None
        self._video_names = [str(name) for name in self.schema.attrs.get("video_files") or []]
        self._recent: Recent[ColumnEpisode] = Recent(RECENT, RECENT_BYTES)
        self._read: Recent[RowReader] = Recent(RECENT, READ_BYTES)
        self._video_fields = [f.name for f in self.schema.fields if f.kind == "video"]
        pos = self.index.positions([s.name for s in dataset.shards])
        self._number, self._shard, self._first = pos.number, pos.shard, pos.first
        self._samples, self._steps, self._terminal = pos.samples, pos.steps, pos.terminal
        self._by_number = {int(n): e for e, n in enumerate(self._number.tolist())}
        self._parts = {layout.part_name(f): f for f in self.schema.fields}
        self._extra = any(f.rows == "steps+1" for f in self.schema.fields)
        self._split_of = _split_of_shards(dataset)
        self._video: VideoStore | None = None

    # ----- sizes and bookkeeping ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._number)

    def __iter__(self) -> Iterator[Episode]:
        for e in range(len(self)):
            yield self[e]

    @property
    def lengths(self) -> np.ndarray:
        """Step count of each episode (int64, by position)."""
        return self._steps

    @property
    def total_steps(self) -> int:
        return int(self._steps.sum())

    def number(self, e: int) -> int:
        """The episode number of position ``e`` (what its keys and ``Episode.index`` say)."""
        return int(self._number[self._e(e)])

    def position(self, number: int) -> int:
        """The position of episode ``number`` in this view; ``KeyError`` if it is not in the split."""
        return self._by_number[number]

    def split(self, e: int) -> str | None:
        """The split the episode's shard is in (``split.yaml``), None when no split names it."""
        return self._split_of.get(self.dataset.shards[self._shard[self._e(e)]].name)

    def metadata(self, e: int) -> dict[str, Any]:
        """The episode's metadata, typed values restored (one indexed lookup)."""
        return self.index.row(self.number(e)).metadata

    def source(self, e: int) -> dict[str, Any]:
        """Where the episode came from in its source (format-specific; empty for user-written ones)."""
        return self.index.row(self.number(e)).source

    def source_files(self) -> dict[str, int]:
        """Relative path -> size of the source's metadata files kept under ``.nv-meta/source/``."""
        return self.index.source_files()

    def source_file(self, relpath: str) -> bytes:
        """The bytes of one kept source file; only names the index lists are read."""
        if relpath not in self.source_files():
            raise SampleNotFoundError("no such source file", path=self.dataset.storage.url(f"{_META}/{SOURCE_DIR}"), member=relpath)
        where = self.dataset.storage.url(f"{_META}/{EPISODES_SQLITE}")
        rel = safe_relpath(relpath, where, "kept source file name").replace(os.sep, "/")
        return self.dataset.storage.read(f"{_META}/{SOURCE_DIR}/{rel}")

    @property
    def video(self) -> VideoStore:
        """The store of the dataset's video files (an import keeps them in ``.videos/``)."""
        if self._video is None:
            rel = self.schema.attrs.get("video_store")
            if not rel:
                raise DatasetNotPreparedError("this dataset has no video store", path=self.dataset.url)
            where = self.dataset.storage.url(f"{_META}/{SCHEMA_JSON}")
            url = self.dataset.url.rstrip("/") + "/" + safe_relpath(rel, where, "video_store").replace(os.sep, "/")
            names = self.schema.attrs.get("video_files") or []
            packets = self.schema.attrs.get("video_packets")
            if packets not in (None, PACKETS_FILE):  # a name from the dataset: only the one it may be
                raise DecodeError(f"video_packets names {packets!r}, not {PACKETS_FILE!r}", path=url)
            self._video = VideoStore(url, names, self.dataset.storage_options, packets)
        return self._video

    def _frames(self, refs: list[VideoRef]) -> np.ndarray:
        """Decoded frames of ``refs``, stacked (T, H, W, 3) uint8."""
        return np.stack(self.video.decoder.frames(refs))

    def _e(self, e: int) -> int:
        n = len(self._number)
        if e < 0:
            e += n
        if not 0 <= e < n:
            raise IndexError(f"episode {e} out of range ({n} episodes)")
        return e

    # ----- reading --------------------------------------------------------------------------------
    def _locate(self, e: int, lo: int, hi: int) -> tuple[ShardRef, list[int], bool]:
        """(shard, byte offsets of samples ``lo .. hi - 1`` of episode position ``e`` and the end
        of the last, whether a sample follows the episode's last), through the shard's ``.tar.idx``."""
        ds = self.dataset
        shard = ds.shards[self._shard[e]]
        offs = ds._offsets.get(shard.tar_file_id)
        if offs is None:
            offs = ds._shard_offsets(shard)
        if shard.tar_file_id not in ds._checked:
            ds.check_shard(shard)
        first = int(self._first[e])
        end = first + int(self._samples[e])
        if end >= len(offs):
            raise IndexCorruptError(f"episodes.sqlite places samples {first}..{end - 1} in a shard of {len(offs) - 1}: rerun the import",
                                    path=ds.storage.url(shard.name), member=f"episode {int(self._number[e])}")
        return shard, offs[first + lo : first + hi + 1].tolist(), first + hi == end and end < len(offs) - 1

    def _read_range(self, e: int, lo: int, hi: int) -> tuple[ShardRef, int, bytes, list[int]]:
        """(shard, offset, bytes, sample bounds relative to them) of samples ``lo .. hi - 1`` of
        episode position ``e``: one read, located through the shard's ``.tar.idx``."""
        return self._read_ranges([(e, lo, hi)])[0]

    def _read_ranges(self, spans: Sequence[tuple[int, int, int]]) -> list[tuple[ShardRef, int, bytes, list[int]]]:
        """``_read_range`` of each ``(e, lo, hi)``, the reads concurrent (``read_ranges``): a
        batch's episodes over S3 in about one round trip, not one each."""
        located = [self._locate(e, lo, hi) for e, lo, hi in spans]
        # one header more when the episode's last sample is read: the next sample must not be its
        tails = [512 if followed else 0 for _, _, followed in located]
        requests = [(shard.name, ByteRange(b[0], b[-1] - b[0] + tail)) for (shard, b, _), tail in zip(located, tails, strict=True)]
        storage = self.dataset.storage
        if len(requests) > 1 and storage.local_path(requests[0][0]) is None:
            datas = storage.read_ranges(requests)
        else:  # local files: one pread after another is faster than a thread pool
            datas = [storage.read_at(path, rng.offset, rng.size) for path, rng in requests]
        out = []
        for (e, lo, hi), (shard, bounds, _), tail, data in zip(spans, located, tails, datas, strict=True):
            rel = [b - bounds[0] for b in bounds]
            self._check_keys(e, lo, hi, data, rel, tail, shard)
            out.append((shard, bounds[0], data, rel))
        return out

    def _check_keys(self, e: int, lo: int, hi: int, data: bytes, bounds: list[int], tail: int, shard: ShardRef) -> None:
        """The identity check of a read (a few byte compares): the first and last samples read have
        the keys ``episodes.sqlite`` says (``first_key``'s numbering), and when the episode's last
        sample is read, the sample after it is another episode's, so the stored counts agree with the
        shard. A plain ustar header holds the name at its start; a PAX or GNU long name header
        (which our writer never makes for these keys) is left to the part parser."""
        number = self._number.item(e)
        step = self.granularity == "step"
        # layout.step_key / episode_key as bytes, one format each: this runs on every read
        key = b"e%08d_s%06d." % (number, lo) if step else b"e%08d." % number
        at = bounds[0]
        if data[at + 156] in (48, 0) and data[at : at + len(key)] != key:  # typeflag '0' or NUL: plain ustar
            self._refuse_key(e, data, at, key, shard)
        if step and hi - lo > 1:
            key = b"e%08d_s%06d." % (number, hi - 1)
            at = bounds[-2]
            if data[at + 156] in (48, 0) and data[at : at + len(key)] != key:
                self._refuse_key(e, data, at, key, shard)
        if tail:
            at = bounds[-1]
            prefix = b"e%08d_s" % number if step else key
            if data[at + 156] in (48, 0) and data[at : at + len(prefix)] == prefix:
                raise IndexCorruptError(
                    f"the episode goes on past its stored {int(self._samples[e])} samples "
                    f"({_header_name(data, at)!r} follows): rerun the import",
                    path=self.dataset.storage.url(shard.name), member=f"episode {number}")

    def _refuse_key(self, e: int, data: bytes, at: int, key: bytes, shard: ShardRef) -> None:
        raise IndexCorruptError(
            f"the sample read is {_header_name(data, at)!r}, where episodes.sqlite and .tar.idx place "
            f"{key[:-1].decode()!r}: rerun prepare (or the import)",
            path=self.dataset.storage.url(shard.name), member=f"episode {self._number.item(e)}")
    # ----- the columns layout (layout 2, ``columns.py``) ----------------------------------------------
    def _column_open(self, e: int) -> tuple[ColumnEpisode, bool]:
        """Episode position ``e`` located and its offsets checked (``ColumnLayout.open``), and
        whether it is new: a new one is kept among the recent ones by its first read
        (``_column_fetch``), which checks its identity. After that a step or window of it reads
        no index: it checks the row starts it uses (``ColumnEpisode.span``) and the values' offsets."""
        ep = self._recent.get(e)
        if ep is not None:
            return ep, False
        cl = self._columns
        assert cl is not None
        n = int(self._steps[e])
        rows = n + 1 if self._extra else n
        shard, (start, end), _ = self._locate(e, 0, 1)
        number = int(self._number[e])
        starts = self.index.blob_starts(number) if cl.variable else None
        return cl.open(shard.name, start, end, n, rows, starts, f"{shard.name}, episode {number}"), True

    def _column_fetch(self, e: int, ep: ColumnEpisode, new: bool, offset: int, size: int) -> bytes:
        """Bytes ``offset .. offset + size`` of the episode's shard. The first read of an episode
        (``new``) also checks that its sample is the episode's (key, ``steps.npy`` of its rows,
        ``ColumnLayout.check_sample``): in the same read when the range lies within the storage's
        merge gap of the sample's first byte (``_LOCAL_GAP`` on a local disk), else by a read of the
        sample's headers before. Then
        the episode is kept (``_recent``): later reads of it are the range alone."""
        storage = self.dataset.storage
        if not new:
            return storage.read_at(ep.shard, offset, size)
        cl = self._columns
        assert cl is not None
        head = ep.records - ep.start  # the tar header and steps.npy's header
        reach = offset + size - ep.start
        # from the page cache a read more costs less than copying the bytes between (a few KiB)
        near = reach <= (_LOCAL_GAP if isinstance(storage, LocalStorage) else getattr(storage, "merge_gap", 0))
        data = storage.read_at(ep.shard, ep.start, reach if near else head)
        cl.check_sample(data, layout.episode_key(self._number.item(e)), ep.rows, ep.where)
        self._recent.put(e, ep, 0 if ep.starts is None else ep.starts.nbytes)
        if near:
            return data[offset - ep.start :]  # bytes: values cut from bytes cost less than from a memoryview
        return storage.read_at(ep.shard, offset, size)

    def _column_step(self, e: int, t: int) -> dict[str, Any]:
        """Every field of row ``t`` of episode position ``e`` (video fields as ``VideoRef``): one
        read of its record, or with media or text fields of its span of ``blobs.bin`` (the row's
        record copy, then its values)."""
        cl = self._columns
        assert cl is not None
        ep, new = self._column_open(e)
        starts = ep.starts
        if starts is not None:
            base, stop = ep.span(t, t + 1, cl.dtype.itemsize)
            data = self._column_fetch(e, ep, new, ep.blobs + base, stop - base)
            return cl.row(data, starts.item(t) - base, data, base, t, ep.steps, self._video_names, ep.where)
        if not cl.variable:  # arrays and video references only: the record alone
            size = cl.dtype.itemsize
            return cl.row(self._column_fetch(e, ep, new, ep.records + t * size, size), 0, b"", 0, t, ep.steps,
                          self._video_names, ep.where)
        records, blobs, base = self._column_read(e, t, t + 1, ep, new)  # an index without row starts
        return cl.row(records, 0, blobs, base, t, ep.steps, self._video_names, ep.where)

    def _column_read(self, e: int, lo: int, hi: int, ep: ColumnEpisode, new: bool) -> tuple[Buffer, bytes, int]:
        """(records, values, the values' first byte in ``blobs.bin``) of rows ``lo .. hi - 1`` of
        episode position ``e`` (``ep``, ``new``: ``_column_open``'s): one read of their records in
        ``steps.npy`` and, with media or text fields, of their span of ``blobs.bin``, at once when
        the episode index has the rows' starts (each row's record copy is there too)."""
        cl = self._columns
        assert cl is not None
        size = cl.dtype.itemsize
        span = (ep.records + lo * size, (hi - lo) * size)
        if not cl.variable:
            return self._column_fetch(e, ep, new, *span), b"", 0
        if ep.starts is None:  # an index without the starts: records first, then the span they name
            records = self._column_fetch(e, ep, new, *span)
            base, stop = cl.blob_span(cl.records(records, hi - lo, ep.where), ep.blob_bytes, ep.where)
            return records, self.dataset.storage.read_at(ep.shard, ep.blobs + base, stop - base), base
        # one read of the rows' span of blobs.bin: each row's record copy, then its values (and
        # the values of the row before that the first row shares)
        base, stop = ep.span(lo, hi, size)
        cuts = ep.starts[lo:hi].tolist()
        if any(b - a < size for a, b in zip(cuts, [*cuts[1:], stop], strict=True)):
            raise DecodeError("the episode index's row starts leave no room for the rows' records", member=ep.where, noun="")
        blobs = self._column_fetch(e, ep, new, ep.blobs + base, stop - base)
        view = memoryview(blobs)
        return b"".join(view[c - base : c - base + size] for c in cuts), blobs, base

    def _column_rows(self, e: int, lo: int, hi: int) -> dict[str, Any]:
        """Every field's rows ``lo .. hi - 1`` of episode position ``e``: arrays stacked, media,
        text and video references as lists."""
        cl = self._columns
        assert cl is not None
        ep, new = self._column_open(e)
        records, blobs, base = self._column_read(e, lo, hi, ep, new)
        rec = cl.records(records, hi - lo, ep.where)
        cl.blob_span(rec, base + len(blobs), ep.where, base)
        return cl.fields(rec, blobs, base, lo, ep.steps, self._video_names, ep.where)

    def _column_episode(self, e: int) -> dict[str, Any]:
        """Every field of episode position ``e``: one read of its sample, its first header checked."""
        n = int(self._steps[e])
        return self._column_reader(e, self._read_range(e, 0, 1))(0, n + 1 if self._extra else n)

    def _column_reader(self, e: int, read: tuple[ShardRef, int, bytes, list[int]]) -> RowReader:
        """``rows(lo, hi)``: every field's rows ``lo .. hi - 1`` of episode position ``e``, from the
        read of its sample (checked once here). A batch reads whole episodes at once (one round
        trip on S3) but takes a row or two of each: only those rows become values (building a
        whole episode's frame references cost a random frame more than decoding it)."""
        cl = self._columns
        assert cl is not None
        n = int(self._steps[e])
        rows = n + 1 if self._extra else n
        shard, _, data, _ = read
        where = f"{shard.name}, episode {self.number(e)}"
        cl.check_sample(data, layout.episode_key(self.number(e)), rows, where)
        rec = cl.records(data, rows, where, cl.rows_at(rows))
        first = cl.blobs_at(rows)
        view = memoryview(data)[first:] if cl.variable else memoryview(b"")
        cl.blob_span(rec, len(view), where)
        names = self._video_names
        return lambda lo, hi: cl.fields(rec[lo:hi], view, 0, lo, n, names, where)

    def _read_samples(self, e: int, lo: int, hi: int) -> list[dict[str, bytes]]:
        """The parts of samples ``lo .. hi - 1`` of episode position ``e``: one read of their range."""
        shard, base, data, bounds = self._read_range(e, lo, hi)
        return [self._cut(shard, base, data, bounds[i], bounds[i + 1]) for i in range(hi - lo)]

    def _cut(self, shard: ShardRef, base: int, data: bytes, lo: int, hi: int) -> dict[str, bytes]:
        """The parts of the one sample in ``data[lo:hi]`` (read from ``base`` of ``shard``): the
        compiled walk, else the parser."""
        parts: dict[str, Any] = {}
        if fill_plain_sample(parts, data, lo, hi) is None:
            parts = {}
            self.dataset._cut(parts, shard, base + lo, data, lo, hi)  # type: ignore[arg-type]
        return parts

    def raw(self, e: int) -> bytes:
        """The tar members of episode position ``e``'s samples, as the shard holds them (one read):
        what an edit that keeps the episode unchanged copies into its new shards."""
        e = self._e(e)
        _, _, data, bounds = self._read_range(e, 0, int(self._samples[e]))
        return data[: bounds[-1]]  # without the next sample's header the identity check read

    def __getitem__(self, e: int) -> Episode:
        """The whole episode: arrays stacked over its rows, media as lists of bytes, text as lists
        of strings, its metadata, split and source info; its samples are read at once."""
        e = self._e(e)
        n = int(self._steps[e])
        if self._columns is not None:
            steps = self._column_episode(e)
        elif self.granularity == "step":
            steps = self._read_rows(e, 0, int(self._samples[e]))
        else:
            sample = self._read_samples(e, 0, 1)[0]
            steps = {f.name: self._episode_field(f, sample, _rows(f, n)) for f in self.schema.fields}
            for f in self.schema.fields:  # the stored rows against the index's step count
                if isinstance(steps[f.name], np.ndarray) and len(steps[f.name]) != _rows(f, n):
                    raise IndexCorruptError(
                        f"field {f.name!r} holds {len(steps[f.name])} rows where episodes.sqlite says {n} steps: "
                        "rerun the import", path=self.dataset.storage.url(self.dataset.shards[self._shard[e]].name),
                        member=f"episode {int(self._number[e])}")
        row = self.index.row(int(self._number[e]))
        return Episode(row.number, steps, row.metadata, row.terminal, self.split(e), row.source)

    def _read_rows(self, e: int, lo: int, hi: int) -> dict[str, Any]:
        """Every field's rows of samples ``lo .. hi - 1`` of episode position ``e`` (step
        granularity), from one read: arrays stacked, media and text as lists. A final
        ``steps+1`` sample in the range adds its row to those fields only."""
        n = int(self._steps[e])
        full = min(hi, n) - lo  # samples holding every field
        shard, base, data, bounds = self._read_range(e, lo, hi)
        sizes = np.diff(bounds[: full + 1])
        out = None
        if full >= 2 and (sizes == sizes[0]).all():
            out = self._uniform_rows(data, full, int(sizes[0]))
        if out is None:
            samples = [self._cut(shard, base, data, bounds[i], bounds[i + 1]) for i in range(full)]
            out = {f.name: self._stack(f, samples) for f in self.schema.fields}
        if hi > n:  # the final sample: the last row of the steps+1 fields
            last = self._cut(shard, base, data, bounds[-2], bounds[-1])
            for f in self.schema.fields:
                if f.rows == "steps+1":
                    row = self._stack(f, [last])
                    out[f.name] = np.concatenate([out[f.name], row]) if isinstance(row, np.ndarray) else out[f.name] + row
        return out

    def _uniform_rows(self, data: bytes, m: int, size: int) -> dict[str, Any] | None:
        """``_read_rows``'s fast path for ``m`` samples of equal size (no media or text of varying
        length): the samples are the rows of a ``(m, size)`` byte matrix, each field a column
        range, cut and converted by numpy at once instead of parsing ``m`` x parts headers.

        Only taken when every sample's headers equal the first's (but for the step digits of the
        key and the checksum) and every ``.npy`` header too; None sends the caller to the parser.
        """
        members = plain_members(data, 0, size)
        if members is None:
            return None
        rows = np.frombuffer(data, np.uint8, count=m * size).reshape(m, size)
        out: dict[str, Any] = {}
        for name, start, length in members:
            head = rows[:, start - 512 : start - 376]  # name .. size field of the member's header
            if not ((head[:, :_KEY_FIXED] == head[0, :_KEY_FIXED]).all() and (head[:, _KEY_LEN:] == head[0, _KEY_LEN:]).all()):
                return None
            kp = split_name(name)
            f = self._parts.get(kp[1]) if kp is not None else None
            if f is None:
                continue
            column = rows[:, start : start + length]
            if f.kind == "array":
                _, (dtype, shape, hl) = parse_header(column[0].tobytes()[:4096], f.name)
                if not (column[:, :hl] == column[0, :hl]).all():
                    return None
                out[f.name] = np.ascontiguousarray(column[:, hl:]).view(dtype).reshape((m, *shape))
            elif f.kind == "media":
                out[f.name] = [column[k].tobytes() for k in range(m)]
            elif f.kind == "text":
                out[f.name] = [column[k].tobytes().decode() for k in range(m)]
            else:  # another kind (video references) is the parser's, through _stack
                return None
        return out if len(out) == len(self.schema.fields) else None

    def _stack(self, f: FieldSpec, samples: list[dict[str, bytes]]) -> Any:
        name = layout.part_name(f)
        where = f"field {f.name!r}"
        try:
            parts = [s[name] for s in samples]
        except KeyError:
            raise SampleNotFoundError("a step lacks this field's part", member=name) from None
        if f.kind == "text":
            return [p.decode() for p in parts]
        if f.kind == "media":
            return parts
        if f.kind == "video":
            return [VideoRef.from_bytes(p) for p in parts]
        if not parts:
            return np.empty((0, *f.shape), dtype=np.dtype(f.dtype))
        return decode_rows(parts, where)

    def _episode_field(self, f: FieldSpec, sample: dict[str, bytes], rows: int) -> Any:
        if f.kind == "video":
            return refs_from_bytes(sample[layout.part_name(f)])
        if f.kind in ("text", "media"):
            values = [sample[layout.row_part_name(f, t)] for t in range(rows)]
            return [v.decode() for v in values] if f.kind == "text" else values
        return decode(sample[layout.part_name(f)], f"field {f.name!r}")

    def _decode_part(self, f: FieldSpec, data: bytes) -> Any:
        if f.kind == "array":  # the common kind first: this runs for every part of every step read
            return decode(data, f.name)
        if f.kind == "text":
            return data.decode()
        if f.kind == "media":
            return data
        ref = VideoRef.from_bytes(data)  # video, the one kind left (FieldSpec checks kinds)
        return self.video.decoder.frame(ref.file, ref.timestamp)

    def step(self, e: int, t: int) -> dict[str, Any]:
        """Step ``t`` of episode position ``e``: ``{field: value, is_first, is_last, is_terminal}``.
        ``t`` may be the step count when the dataset has ``steps+1`` fields: that final sample
        holds only their last row (the observation after the last action)."""
        e = self._e(e)
        n = int(self._steps[e])
        rows = int(self._samples[e]) if self.granularity == "step" else (n + 1 if self._extra else n)
        if t < 0:
            t += n
        if not 0 <= t < rows:
            raise IndexError(f"step {t} out of range (episode {self.number(e)} has {n} steps)")
        out: dict[str, Any] = {}
        if self._columns is not None:
            out = self._column_step(e, t)
            for name in self._video_fields:
                if name in out:
                    ref = out[name]
                    out[name] = self.video.decoder.frame(ref.file, ref.timestamp)
        elif self.granularity == "step":
            shard, base, data, bounds = self._read_range(e, t, t + 1)
            fields = self._parts
            for name, part in self._cut(shard, base, data, 0, bounds[1]).items():
                f = fields.get(name)
                if f is not None:
                    out[f.name] = self._decode_part(f, part)
        else:
            episode = self[e]
            for f in self.schema.fields:
                values = episode.steps[f.name]
                if t < len(values):  # [t, ...]: a 0-d array keeps its byte order, [t] a scalar would not
                    out[f.name] = values[t, ...] if isinstance(values, np.ndarray) else values[t]
                    if f.kind == "video":
                        out[f.name] = self._frames([values[t]])[0]  # type: ignore[list-item]
        last = t == rows - 1
        out["is_first"] = np.bool_(t == 0)
        out["is_last"] = np.bool_(last)
        out["is_terminal"] = np.bool_(last and bool(self._terminal[e]))
        return out

    def window(self, e: int, t: int, before: int = 0, after: int = 0) -> dict[str, Any]:
        """Steps ``t - before .. t + after`` of episode position ``e``, stacked (an observation
        history and an action chunk, as policy training samples them).

        Rows beyond the episode's ends repeat its first or last step (LeRobot's padding), and
        ``is_pad`` (bool, one per row) marks them. ``t`` is a step ``0 .. steps - 1``; the rows of
        ``steps+1`` fields are taken at the same step numbers. Flags are stacked like the fields.
        """
        e = self._e(e)
        n = int(self._steps[e])
        if before < 0 or after < 0:
            raise ValueError("before and after must be >= 0")
        if t < 0:
            t += n
        if not 0 <= t < n:
            raise IndexError(f"step {t} out of range (episode {self.number(e)} has {n} steps)")
        want = np.arange(t - before, t + after + 1)
        idx = np.clip(want, 0, n - 1)
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        out: dict[str, Any] = {}
        if self._columns is not None:
            for name, values in self._column_rows(e, lo, hi).items():
                out[name] = _take(values, idx - lo)
        elif self.granularity == "step":
            for name, values in self._read_rows(e, lo, hi).items():
                out[name] = _take(values, idx - lo)
        else:
            episode = self[e]
            for f in self.schema.fields:
                out[f.name] = _take(episode.steps[f.name], idx)
        for f in self.schema.fields:
            if f.kind == "video":  # frames in time order: the decoder reads forward, seeking once
                out[f.name] = self._frames(out[f.name])
        rows = int(self._samples[e]) if self.granularity == "step" else (n + 1 if self._extra else n)
        out["is_first"] = idx == 0
        out["is_last"] = idx == rows - 1
        out["is_terminal"] = out["is_last"] & bool(self._terminal[e])
        out["is_pad"] = want != idx
        return out

    def sample(
        self,
        e: int,
        t: int,
        offsets: Mapping[str, Sequence[int]],
        *,
        fields: Collection[str] | None = None,
        decode: bool = True,
        steps: RowReader | None = None,
    ) -> dict[str, Any]:
        """Step ``t`` of episode position ``e`` with, for each field named in ``offsets``, its rows
        at ``t + offset`` stacked (a policy's observation history and action chunk, LeRobot's
        ``delta_timestamps`` in steps) and ``<field>_is_pad``; other fields hold step ``t``'s row.

        Rows beyond the episode's ends repeat its first or last step (LeRobot's padding) and are
        marked in ``<field>_is_pad``. Only the frames returned are decoded: two frames and a
        50-step action chunk decode two frames per camera, in time order, one keyframe start per
        group of pictures. ``fields`` keeps only those fields (default all: a camera left out is
        not decoded); ``decode=False`` leaves video fields as ``VideoRef`` (for ``get_many``);
        ``steps``: a reader of the episode's rows already read (``get_many`` reads a batch's
        episodes at once).
        """
        e = self._e(e)
        n = int(self._steps[e])
        if t < 0:
            t += n
        if not 0 <= t < n:
            raise IndexError(f"step {t} out of range (episode {self.number(e)} has {n} steps)")
        want = {name: t + np.asarray(o, np.int64).reshape(-1) for name, o in offsets.items()}
        for name in want:
            self.schema[name]  # KeyError for a field the dataset lacks
        idx = {name: np.clip(w, 0, n - 1) for name, w in want.items()}
        reach = [t, *(int(i.min()) for i in idx.values() if len(i)), *(int(i.max()) for i in idx.values() if len(i))]
        lo, hi = min(reach), max(reach) + 1
        if steps is not None:  # the episode, already read (a batch): its rows reached
            rows, base = steps(lo, hi), lo
        elif self._columns is not None:  # the rows reached, one read (as a window)
            rows, base = self._column_rows(e, lo, hi), lo
        elif self.granularity == "step":
            rows, base = self._read_rows(e, lo, hi), lo
        else:
            rows, base = self[e].steps, 0
        out: dict[str, Any] = {}
        for f in self.schema.fields:
            if fields is not None and f.name not in fields:
                continue
            values = rows[f.name]
            if f.name in idx:
                out[f.name] = _take(values, idx[f.name] - base)
                out[f"{f.name}_is_pad"] = want[f.name] != idx[f.name]
            else:
                out[f.name] = values[t - base, ...] if isinstance(values, np.ndarray) else values[t - base]
        if decode:
            self._decode_videos([out])
        return out

    def get_many(
        self,
        steps: Sequence[tuple[int, int]],
        offsets: Mapping[str, Sequence[int]] | None = None,
        *,
        frames: Callable[[list[Frame]], Any] | None = None,
        planar: bool = False,
    ) -> list[dict[str, Any]]:
        """``sample(e, t, offsets)`` of each ``(e, t)`` of ``steps``, their frames decoded together
        in file and time order (a batch's frames of one group of pictures share its keyframe start,
        each distinct frame is decoded once): what a DataLoader's batched fetch calls. ``frames``
        puts one field's frames of an item together (default ``np.stack``, a step's frame as it
        is; given, a step's is ``frames([frame])[0]``): a loader's own output made straight from
        the decoded frames, without a stacked copy between. ``planar``: ``frames`` is given each
        frame as its ``Planes`` R, G and B (views of the colour converter's output), what a CHW
        tensor is made of without a transposing copy, and the default gives CHW arrays; else HWC."""
        read = self._column_episodes([self._e(e) for e, _ in steps]) if self._columns is not None else {}
        items = [self.sample(e, t, offsets or {}, decode=False, steps=read.get(self._e(e))) for e, t in steps]
        self._decode_videos(items, frames, planar)
        return items

    def _column_episodes(self, es: Sequence[int]) -> dict[int, RowReader]:
        """A row reader of each distinct episode position of ``es`` (columns layout): the ones
        read lately kept (``READ_BYTES``), the others read at once (one round trip on S3)."""
        readers = {e: self._read.get(e) for e in sorted(set(es))}
        todo = [e for e, reader in readers.items() if reader is None]
        if todo:
            for e, read in zip(todo, self._read_ranges([(e, 0, 1) for e in todo]), strict=True):
                readers[e] = reader = self._column_reader(e, read)
                self._read.put(e, reader, len(read[2]))
        return cast(dict[int, RowReader], readers)

    def _decode_videos(
        self, items: list[dict[str, Any]], put: Callable[[list[Frame]], Any] | None = None, planar: bool = False
    ) -> None:
        """Replace the ``VideoRef`` values of ``items``' video fields by their frames (a list of
        refs by its frames put together: ``put``, default stacked), all decoded in one call
        (``FrameDecoder.put_together``: on its threads, each putting together its files' frames)."""
        videos = [f.name for f in self.schema.fields if f.kind == "video" and items and f.name in items[0]]
        slots = [(item, name) for item in items for name in videos]
        if not slots:
            return
        whole = put or np.stack
        one: Callable[[list[Frame]], Any] = (lambda frames: np.asarray(frames[0])) if put is None else (lambda frames: put(frames)[0])
        groups = [(v, whole) if isinstance(v, list) else ([v], one) for v in (item[name] for item, name in slots)]
        if not any(refs for refs, _ in groups):
            return
        for (item, name), value in zip(slots, self.video.decoder.put_together(groups, planar), strict=True):
            item[name] = value

    def stream(self) -> EpisodeStream:
        """The episodes as a stream for a format's writer (``write_minari(view.stream(), out)``),
        in episode-number order (the source's order; positions follow the splits' shards), with
        the kept source files."""
        files = {rel: self.source_file(rel) for rel in self.source_files()}
        order = np.argsort(self._number, kind="stable").tolist()
        videos = self.video if self.schema.attrs.get("video_store") else {}
        return EpisodeStream(self.schema, (self[e] for e in order), len(self), files, self.total_steps, videos)

    # ----- the dict view of imitation-learning research (the episode-frame layout) -------------------
    def to_dict(
        self, episodes: Sequence[int] | slice | None = None, *, allow_pickle: bool = False
    ) -> dict[str, np.ndarray]:
        """``{"obs", "next_obs", "acts", "dones"}``: each an array over the steps of the chosen
        episode positions (default all) concatenated in order, as the research code's
        ``load_dataset_dict`` returns small datasets; ``dones`` cuts them back into trajectories.

        Fields by those names; else ``observations`` with its ``steps+1`` row (``obs`` its first
        ``n`` rows, ``next_obs`` its last ``n``) and ``actions``; without ``dones``, true at each
        episode's last step. Array fields are used as stored; pickled ones (an episode-frame import)
        only with ``allow_pickle=True``, through the restricted unpickler (``safepickle``). Raises
        ``PickleNotAllowedError``, ``UnsafePickleError`` or ``DecodeError`` naming episode, field
        and step, ``KeyError`` for a field the dataset lacks.
        """
        if isinstance(episodes, slice):
            chosen: Sequence[int] = range(len(self))[episodes]
        else:
            chosen = range(len(self)) if episodes is None else episodes
        rows: dict[str, list[np.ndarray]] = {k: [] for k in DICT_KEYS}
        for e in chosen:
            episode = self[e]
            n = int(self._steps[self._e(e)])
            for key, values in self._dict_rows(episode, n, allow_pickle).items():
                rows[key].append(values)
        return {k: np.concatenate(v) if v else np.empty(0) for k, v in rows.items()}

    def _dict_rows(self, episode: Episode, n: int, allow_pickle: bool) -> dict[str, np.ndarray]:
        names = self.schema.names

        def field(name: str) -> np.ndarray:
            return self._as_array(episode, name, allow_pickle)

        if "obs" in names:
            obs = field("obs")
            next_obs = field("next_obs") if "next_obs" in names else None
        elif "observations" in names:
            obs = field("observations")
            obs, next_obs = (obs[:n], obs[1:]) if self.schema["observations"].rows == "steps+1" else (obs, None)
        else:
            raise KeyError("the dataset has neither an 'obs' nor an 'observations' field")
        if next_obs is None:
            raise KeyError("the dataset has no 'next_obs' field nor an 'observations' field with the final row")
        acts = field("acts") if "acts" in names else field("actions") if "actions" in names else None
        if acts is None:
            raise KeyError("the dataset has neither an 'acts' nor an 'actions' field")
        if "dones" in names:
            dones = field("dones").astype(bool).reshape(n)
        else:
            dones = np.zeros(n, dtype=bool)
            dones[-1:] = True
        return {"obs": obs, "next_obs": next_obs, "acts": acts, "dones": dones}

    def _as_array(self, episode: Episode, name: str, allow_pickle: bool) -> np.ndarray:
        f = self.schema[name]
        values = episode.steps[name]
        if f.kind == "array":
            return values  # type: ignore[return-value]
        where = f"episode {episode.index}, field {name!r}"
        if f.kind != "media" or f.encoding != "pickle":
            raise DecodeError(f"a {f.kind} field has no array form", path=self.dataset.url, member=where, noun="")
        if not allow_pickle:
            raise PickleNotAllowedError(
                "pickled steps (an episode-frame import): to_dict(allow_pickle=True) decodes them through "
                "the restricted unpickler (numpy and builtins only)",
                path=self.dataset.url, member=where, noun="",
            )
        out = []
        for t, data in enumerate(values):
            try:
                out.append(np.asarray(safepickle.loads(bytes(data))))  # type: ignore[arg-type]
            except ShardstoreError as err:
                raise type(err)(err.detail, path=self.dataset.url, member=f"{where}, step {t}", noun="") from None
        return np.stack(out) if out else np.empty((0, *f.shape), dtype=np.dtype(f.dtype or "u1"))

    def __repr__(self) -> str:
        return f"Episodes({self.dataset.url!r}, split={self.dataset.split!r}, episodes={len(self)}, granularity={self.granularity!r})"


def _header_name(data: bytes, at: int) -> str:
    return data[at : at + 100].split(b"\0", 1)[0].decode("utf-8", "replace")


def _rows(f: FieldSpec, n: int) -> int:
    return n + 1 if f.rows == "steps+1" else n


def _take(values: Any, idx: np.ndarray) -> Any:
    if isinstance(values, np.ndarray):
        return values[idx]
    return [values[i] for i in idx.tolist()]


def _split_of_shards(dataset: Dataset) -> dict[str, str]:
    """Shard name -> the split ``split.yaml`` puts it in."""
    if dataset.splits is None:
        return {}
    out: dict[str, str] = {}
    for name in dataset.splits.split_parts:
        for shard in dataset.splits.shards(name):
            out.setdefault(shard, name)
    return out


def episodes(
    dataset: Dataset | str | os.PathLike[str],
    split: str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
) -> Episodes:
    """The episode view of ``dataset`` (an open ``Dataset``: its split; or a URL: ``split``, by
    default every episode). Raises ``DatasetNotPreparedError`` for a dataset without episodes."""
    if not isinstance(dataset, Dataset):
        dataset = open_dataset(os.fspath(dataset), split, storage_options=storage_options)
    elif storage_options is not None:
        raise TypeError("storage_options apply only when a URL is given")
    return Episodes(dataset)


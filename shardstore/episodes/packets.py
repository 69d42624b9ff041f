"""Video frames read at the packet level: an index of each mp4's packets, and decoders fed from it.

Opening an mp4 with a demuxer per file (parse its boxes, start a decoder, seek) costs more than
decoding the frame asked for. So an import indexes every video once (``index_packets``): per
packet in decode order its byte offset and size in the file, its pts and keyframe flag, and per
file the codec, its decoder configuration (``extradata``: avcC, av1C), size, pixel format and time
base. A frame is then read as (``PacketReader``): one range read of the bytes from the keyframe at
or before the frame to the frame (they lie inside the video's tar member: ``os.pread`` locally, one
range GET on S3), those packets sent to a decoder kept per (codec, extradata, size, pixel format)
and shared by every file alike (flushed between files and seeks), the frame converted to RGB by a
kept reformatter. No container is opened, nothing seeks; consecutive frames of a file (a window)
continue from where the decoder stands.

Only plain files qualify, where decoding from a keyframe gives exactly what PyAV's own decode of
the whole file gives: the first packet a keyframe, closed groups of pictures (no frame decoded
after a keyframe is shown before it: B-frames are fine, HEVC's open GOPs are not), packets laid out
in file order, each packet's bytes exactly the file's bytes at its offset (no demuxer rewriting),
no discarded packets (edit lists). Other files get no entry and are read through the demuxer
(``video.FrameDecoder``'s fallback).

The index of a dataset is ``packets.npz`` in its video store: arrays only (loaded without pickle),
checked against each member's size before any byte is read, since a dataset's files are untrusted.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import IO, Any, NamedTuple

import numpy as np

from ..errors import DecodeError

__all__ = [
    "PacketIndex",
    "PacketSource",
    "PacketReader",
    "served",
    "index_packets",
    "save_packets",
    "load_packets",
    "PACKETS_FILE",
]

#: The packet index of a video store, beside its shards.
PACKETS_FILE = "packets.npz"
#: Threads per decoder (``SHARDSTORE_VIDEO_THREADS``): measured on 224x224 GOP-2 AV1 and H.264, one
#: thread decodes a random frame in the least CPU time, and frame threads add a frame of latency.
THREADS = int(os.environ.get("SHARDSTORE_VIDEO_THREADS", "1"))
#: Threads of the RGB conversion: FFmpeg's default (automatic) costs 3x the CPU time of one thread
#: for a 224x224 frame (0.07 against 0.02 ms measured), more on a loaded machine; the pixels are the same.
RGB_THREADS = 1


def rgb24(reformatter: Any, frame: Any) -> np.ndarray:
    """``frame`` as an RGB uint8 array (HWC)."""
    return _reformat(reformatter, frame, "rgb24").to_ndarray()


class Planes(NamedTuple):
    """A frame as its colour planes R, G and B: 2-D uint8 views of the converter's frame (rows may
    be padded), CHW without a copy. ``np.stack`` of a list of them is TCHW, ``np.asarray`` CHW."""

    r: np.ndarray
    g: np.ndarray
    b: np.ndarray


def planar_rgb(reformatter: Any, frame: Any) -> Planes:
    """``frame`` as planar RGB: FFmpeg's converter writes planes G, B and R as fast as it writes
    rgb24 (the values are the same), and a float cast reads them as they are: copying them into
    one CHW array first cost 7% of a batch of 16-frame windows."""
    h, w = frame.height, frame.width
    g, b, r = (np.frombuffer(p, np.uint8).reshape(h, p.line_size)[:, :w] for p in _reformat(reformatter, frame, "gbrp").planes)
    return Planes(r, g, b)


#: A decoded frame: HWC RGB, or its ``Planes``.
Frame = np.ndarray | Planes


def _reformat(reformatter: Any, frame: Any, pix_fmt: str) -> Any:
    """``frame`` converted, on ``RGB_THREADS`` threads where PyAV takes a thread count (16 and
    later); PyAV 15, which lerobot 0.6 pins (``av<16``), has no ``threads`` argument."""
    if _takes_threads():
        return reformatter.reformat(frame, format=pix_fmt, threads=RGB_THREADS)
    return reformatter.reformat(frame, format=pix_fmt)


@functools.cache
def _takes_threads() -> bool:
    """Asked on first use: importing PyAV costs a quarter second that commands reading no frame
    (an edit) need not pay."""
    try:
        import av
    except ImportError:
        return False
    return int(str(av.__version__).split(".")[0]) >= 16


#: Decoded frames kept (a window asked again, padding rows repeating a frame, decode once).
FRAMES_KEPT = 32

Kind = tuple[str, bytes, int, int, str]
#: A decoded frame kept: the file, its frame number and whether it is planar (CHW).
Kept = tuple[str, int, bool]


@dataclass(frozen=True, slots=True, eq=False)
class PacketIndex:
    """One video's packets in decode order (= presentation order) and what its decoder needs."""

    codec: str  # the decoder's name, as PyAV's demuxer picks it (libdav1d, h264, hevc)
    extradata: bytes
    width: int
    height: int
    pix_fmt: str
    time_base: Fraction
    pos: np.ndarray  # int64 byte offset of each packet in the file
    size: np.ndarray  # int64 byte size
    pts: np.ndarray  # int64, each packet's presentation time
    key: np.ndarray  # bool
    # derived: per packet the keyframe at or before it (decode order); the pts sorted (presentation
    # order); per frame (presentation order) its packet, and the last packet the decoder needs
    # before it can give the frame; one frame's duration in pts
    last_key: np.ndarray = field(init=False, repr=False)
    shown: np.ndarray = field(init=False, repr=False)
    packet: np.ndarray = field(init=False, repr=False)
    reach: np.ndarray = field(init=False, repr=False)
    step: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keys = np.where(self.key, np.arange(len(self.key)), -1)
        order = np.argsort(self.pts, kind="stable")
        shown = self.pts[order]
        derived = {
            "last_key": np.maximum.accumulate(keys) if len(keys) else keys,
            "shown": shown,
            "packet": order,
            "reach": np.maximum.accumulate(order) if len(order) else order,
            "step": int(shown[1] - shown[0]) if len(shown) > 1 else 1,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def plain(self) -> bool:
        """Whether decoding from any keyframe gives exactly what decoding the whole file gives:
        times unique, keyframe first, no frame after a keyframe shown before it (closed GOPs)."""
        if not len(self.pts) or not self.key[0] or (np.diff(self.shown) <= 0).any():
            return False
        return bool((self.pts >= self.pts[self.last_key]).all())

    @property
    def kind(self) -> Kind:
        """What decides whether one decoder can read this file after another."""
        return (self.codec, self.extradata, self.width, self.height, self.pix_fmt)

    @property
    def frames(self) -> int:
        return len(self.pts)

    def frames_at(self, timestamps: Sequence[float], name: str) -> list[int]:
        """The frame shown at each of ``timestamps`` seconds: the first within half a frame of it.
        A few timestamps (an item's frame) are looked up one by one: the array path's dozen numpy
        calls cost 28 us, a hundredth of a random frame's item."""
        half = max(1, self.step) // 2
        if len(timestamps) <= 4:
            tb, shown, found = float(self.time_base), self.shown, list[int]()
            for t in timestamps:
                if not math.isfinite(t):
                    raise _no_frame(t, name)
                at = round(t / tb)  # half to even, as np.round
                i = int(shown.searchsorted(at - half))
                if i >= len(shown) or shown[i] > at + half:
                    raise _no_frame(t, name)
                found.append(i)
            return found
        seconds = np.asarray(timestamps, np.float64)
        if not np.isfinite(seconds).all():
            raise _no_frame(timestamps[int(np.flatnonzero(~np.isfinite(seconds))[0])], name)
        target = np.round(seconds / float(self.time_base)).astype(np.int64)
        where = np.searchsorted(self.shown, target - half)
        past = where >= len(self.shown)
        missed = past | (self.shown[np.minimum(where, len(self.shown) - 1)] > target + half)
        if missed.any():
            raise _no_frame(timestamps[int(np.flatnonzero(missed)[0])], name)
        return where.tolist()

    def keyframe_before(self, i: int) -> int:
        """The packet number of the keyframe to decode frame ``i`` (presentation order) from."""
        return int(self.last_key[self.packet[i]])

    def check(self, member_size: int, name: str) -> None:
        """Every packet inside the file's ``member_size`` bytes: the index is untrusted data."""
        bad = (self.pos < 0) | (self.size <= 0) | (self.pos + self.size > member_size)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            frame = int(np.flatnonzero(self.packet == j)[0])
            raise DecodeError(
                f"packet index: frame {frame} (packet {j}) at bytes {int(self.pos[j])}+{int(self.size[j])} "
                f"lies outside the video's {member_size} bytes",
                path=name,
            )


def _no_frame(t: float, name: str) -> DecodeError:
    return DecodeError(f"no frame at {t:.6f} s (the video ends or skips it)", path=name)


@dataclass(frozen=True, slots=True)
class PacketSource:
    """A video's packet index and ``read(offset, size)`` of its bytes (the index checked first)."""

    index: PacketIndex
    read: Callable[[int, int], bytes]


def index_packets(open_file: Callable[[], IO[bytes]], name: str) -> PacketIndex | None:
    """The packet index of the video ``open_file()`` gives, or None when it does not qualify for
    packet-level reading (see the module docstring); reads the file twice (demux, then compare)."""
    from .video import import_av

    av = import_av()
    pos, size, pts, key = [], [], [], []
    try:
        with open_file() as f, av.open(f, "r") as c:
            if not c.streams.video:
                return None
            s = c.streams.video[0]
            cc = s.codec_context
            for p in c.demux(s):
                if not p.size:
                    continue  # the demuxer's end-of-stream packet
                if p.pts is None or p.pos is None or p.pos < 0 or p.is_discard or p.is_corrupt:
                    return None
                pos.append(p.pos)
                size.append(p.size)
                pts.append(p.pts)
                key.append(p.is_keyframe)
            if not pts or cc.width <= 0 or cc.height <= 0:
                return None
            index = PacketIndex(
                codec=cc.codec.name,
                extradata=bytes(cc.extradata or b""),
                width=cc.width,
                height=cc.height,
                pix_fmt=cc.pix_fmt or "yuv420p",
                time_base=Fraction(s.time_base),
                pos=np.asarray(pos, np.int64),
                size=np.asarray(size, np.int64),
                pts=np.asarray(pts, np.int64),
                key=np.asarray(key, np.bool_),
            )
    except (av.error.FFmpegError, ValueError) as e:
        raise DecodeError(f"cannot read the video: {e}", path=name) from e
    if not index.plain() or (index.pos[1:] < index.pos[:-1] + index.size[:-1]).any():
        return None  # open GOPs, or packets out of file order
    return index if _same_bytes(open_file, index) else None


def _same_bytes(open_file: Callable[[], IO[bytes]], index: PacketIndex) -> bool:
    """Whether each packet's bytes, as the demuxer hands them out, are the file's at its offset."""
    from .video import import_av

    av = import_av()
    with open_file() as f, av.open(open_file(), "r") as c:
        packets = (p for p in c.demux(c.streams.video[0]) if p.size)
        for p, offset, n in zip(packets, index.pos.tolist(), index.size.tolist(), strict=False):
            f.seek(offset)
            if f.read(n) != bytes(p):
                return False
    return True


# ----- the sidecar file ---------------------------------------------------------------------------
def save_packets(indexes: Mapping[str, PacketIndex], path: str) -> None:
    """Write the indexes of many files as one ``.npz`` (arrays concatenated, files as JSON)."""
    names = list(indexes)
    files = [
        {
            "name": n,
            "codec": i.codec,
            "extradata": i.extradata.hex(),
            "width": i.width,
            "height": i.height,
            "pix_fmt": i.pix_fmt,
            "time_base": [i.time_base.numerator, i.time_base.denominator],
        }
        for n, i in indexes.items()
    ]
    counts = [indexes[n].frames for n in names]
    arrays: dict[str, Any] = {
        a: np.concatenate([getattr(indexes[n], a) for n in names]) if names else np.empty(0, dtype)
        for a, dtype in (("pos", np.int64), ("size", np.int64), ("pts", np.int64), ("key", np.bool_))
    }
    with open(path, "wb") as f:
        np.savez_compressed(
            f,
            files=np.frombuffer(json.dumps(files).encode(), np.uint8),
            start=np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
            **arrays,
        )


def load_packets(data: bytes, where: str) -> dict[str, PacketIndex]:
    """The indexes ``save_packets`` wrote; ``DecodeError`` naming ``where`` if they do not parse."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            files = json.loads(z["files"].tobytes())
            start = z["start"].astype(np.int64)
            pos, size, pts = (z[a].astype(np.int64) for a in ("pos", "size", "pts"))
            key = z["key"].astype(np.bool_)
        if not (len(pos) == len(size) == len(pts) == len(key) == start[-1]) or len(start) != len(files) + 1:
            raise ValueError("array lengths disagree")
        if (np.diff(start) <= 0).any() or start[0] != 0:
            raise ValueError("file ranges out of order")
        out = {}
        for k, f in enumerate(files):
            lo, hi = int(start[k]), int(start[k + 1])
            index = PacketIndex(
                codec=str(f["codec"]),
                extradata=bytes.fromhex(f["extradata"]),
                width=int(f["width"]),
                height=int(f["height"]),
                pix_fmt=str(f["pix_fmt"]),
                time_base=Fraction(int(f["time_base"][0]), int(f["time_base"][1])),
                pos=pos[lo:hi],
                size=size[lo:hi],
                pts=pts[lo:hi],
                key=key[lo:hi],
            )
            if not index.plain():
                raise ValueError(f"file {f['name']!r}: not a file the index may describe")
            out[str(f["name"])] = index
        return out
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError, OSError, zipfile.BadZipFile) as e:
        raise DecodeError(f"not a packet index: {e}", path=where) from e


# ----- decoding -----------------------------------------------------------------------------------
class _Decoder:
    """A decoder for one kind of video and where it stands: the file and the last packet sent."""

    def __init__(self, av: Any, index: PacketIndex, restarts: dict[str, int], decoded: dict[str, int]) -> None:
        self.av = av
        self.restarts = restarts  # per file, how often decoding it started over at a keyframe
        self.decoded = decoded  # per file, how many packets (frames) were sent to the decoder
        self.ctx = av.CodecContext.create(index.codec, "r")
        if index.extradata:
            self.ctx.extradata = index.extradata
        self.ctx.thread_type = "SLICE"
        self.ctx.thread_count = THREADS
        self.file: str | None = None
        self.sent = -1  # the last packet sent of ``file``
        self.shown = -1  # the pts of the last frame it gave
        self.pending: list[Any] = []  # frames given past the one asked
        self.drained = False  # sent the end of the stream: only ``pending`` is left to give

    def restart(self, name: str, first: int) -> None:
        """Forget the last file (and a drain): decode ``name`` from its packet ``first``. Counted
        as a restart unless it goes on where the decoder stopped (after a drain at a GOP's end)."""
        if name != self.file or first != self.sent + 1:
            self.restarts[name] = self.restarts.get(name, 0) + 1
        self.ctx.flush_buffers()
        self.file, self.sent, self.shown, self.pending, self.drained = name, first - 1, -1, [], False

    def to(self, name: str, index: PacketIndex, i: int, packet: Callable[[int], bytes], final: bool) -> Any:
        """Frame ``i`` of ``name`` (an ``av.VideoFrame``): decoded on from where the decoder stands
        when it stands in the same group of pictures before ``i``, else from its keyframe.

        A decoder holds frames back while later packets may be shown before them (B-frames;
        H.264 without a promise of no reordering). When ``i`` is the ``final`` frame asked, every
        packet it may wait for is sent and the next packet is a keyframe, the decoder is drained
        instead of fed that keyframe to decode (the next frame would start over there anyway);
        otherwise it is fed on, so that reading frame after frame never starts over."""
        want = int(index.shown[i])
        k = index.keyframe_before(i)
        reach = int(index.reach[i])
        if self.file != name or self.sent < k - 1 or self.shown >= want:
            self.restart(name, k)
        elif self.drained and all(f.pts != want for f in self.pending):
            self.restart(name, k)
        while True:
            while self.pending:
                frame = self.pending.pop(0)
                self.shown = frame.pts
                if frame.pts == want:
                    return frame
                if frame.pts > want:
                    self.file = None
                    raise DecodeError(f"the decoder skipped frame {i} (pts {want})", path=name)
            if self.drained:
                self.file = None
                raise DecodeError(f"the decoder gave no frame {i} (pts {want})", path=name)
            if (final and self.sent >= reach and self._key_next(index)) or self.sent + 1 >= index.frames:
                self.pending = list(self.ctx.decode(None))  # what the decoder holds, nothing new
                self.drained = True
            else:
                self.sent += 1
                self.decoded[name] = self.decoded.get(name, 0) + 1
                p = self.av.Packet(packet(self.sent))
                p.pts = int(index.pts[self.sent])
                self.pending = list(self.ctx.decode(p))

    def _key_next(self, index: PacketIndex) -> bool:
        return self.sent + 1 >= index.frames or bool(index.key[self.sent + 1])


class PacketReader:
    """Frames of indexed videos, decoders and RGB converters kept per kind of video (one per process)."""

    def __init__(self) -> None:
        from .video import import_av

        self.av = import_av()
        self._decoders: dict[Kind, _Decoder] = {}
        self._reformatters: dict[Kind, Any] = {}
        self._kept: OrderedDict[Kept, Frame] = OrderedDict()
        self.restarts: dict[str, int] = {}
        self.decoded: dict[str, int] = {}

    def frames(
        self,
        name: str,
        index: PacketIndex,
        read: Callable[[int, int], bytes],
        wanted: Iterable[int],
        planar: bool = False,
    ) -> list[Frame]:
        """Frames ``wanted`` (numbers in the file) of ``name``, HWC uint8 RGB (``planar``: their
        ``Planes``), in the order asked.
        ``read(offset, size)`` gives the file's bytes. Frames are decoded in file order, each
        group of pictures from its keyframe once (frames of one group share it); the packets of
        neighbouring groups are read in one go, a gap of unneeded groups (a batch's frames spread
        over a file) starts a new read instead of reading through it (``stretches`` names those
        reads beforehand, for a caller reading many files' at once)."""
        wanted = list(wanted)
        got = {i: self._kept[(name, i, planar)] for i in wanted if (name, i, planar) in self._kept}
        todo = sorted(set(wanted) - set(got))
        if todo:
            kind = index.kind
            decoder = self._decoders.get(kind)
            if decoder is None:
                decoder = self._decoders[kind] = _Decoder(self.av, index, self.restarts, self.decoded)
            reformatter = self._reformatters.get(kind)
            if reformatter is None:
                reformatter = self._reformatters[kind] = self.av.video.reformatter.VideoReformatter()
            convert = functools.partial(planar_rgb if planar else rgb24, reformatter)
            for run in _runs(index, todo):
                self._decode_run(name, index, read, run, decoder, convert, planar, got)
        return [got[i] for i in wanted]

    def stretches(
        self, name: str, index: PacketIndex, wanted: Iterable[int], planar: bool = False
    ) -> list[tuple[int, int]]:
        """``(offset, size)`` of the reads ``frames(name, index, ..., wanted, planar)`` would make
        at most: a stretch of packets per run of its groups of pictures (frames kept need none)."""
        todo = sorted({i for i in wanted if (name, i, planar) not in self._kept})
        return [_stretch(index, run) for run in _runs(index, todo)] if todo else []

    def _decode_run(
        self,
        name: str,
        index: PacketIndex,
        read: Callable[[int, int], bytes],
        todo: list[int],
        decoder: _Decoder,
        convert: Callable[[Any], Frame],
        planar: bool,
        got: dict[int, Frame],
    ) -> None:
        """Decode frames ``todo`` (sorted) whose packets lie in one stretch, read in one go."""
        first = index.keyframe_before(todo[0])
        on = decoder.file == name and not decoder.drained and decoder.shown < index.shown[todo[0]]
        if on and first <= decoder.sent:
            first = decoder.sent + 1  # decoding on from where the decoder stands
        last = int(index.reach[todo[-1]])
        lo = int(index.pos[min(first, last)])
        data = read(lo, int(index.pos[last] + index.size[last]) - lo) if first <= last else b""

        def packet(j: int) -> bytes:
            start, n = int(index.pos[j]) - lo, int(index.size[j])
            if start < 0 or start + n > len(data):  # outside what was read (a restart)
                return read(int(index.pos[j]), n)
            return data[start : start + n]

        for i in todo:
            try:
                frame = decoder.to(name, index, i, packet, i == todo[-1])
                got[i] = convert(frame)
            except self.av.error.FFmpegError as e:
                decoder.file = None  # in an unknown state: flushed before its next use
                raise DecodeError(f"frame {i}: {e}", path=name) from e
            self._keep((name, i, planar), got[i])

    def _keep(self, key: Kept, frame: Frame) -> None:
        self._kept[key] = frame
        if len(self._kept) > FRAMES_KEPT:
            self._kept.popitem(last=False)


def _stretch(index: PacketIndex, run: list[int]) -> tuple[int, int]:
    """(offset, size) of the packets a run decodes from its keyframe (what ``_decode_run`` reads
    at most: decoding on from where the decoder stands reads a part of it)."""
    first, last = index.keyframe_before(run[0]), int(index.reach[run[-1]])
    lo = int(index.pos[min(first, last)])
    return lo, int(index.pos[last] + index.size[last]) - lo


def served(read: Callable[[int, int], bytes], spans: list[tuple[int, int]], datas: list[bytes]) -> Callable[[int, int], bytes]:
    """``read`` served from ``spans`` already read (``datas``); a read outside them: ``read``."""

    def cached(offset: int, size: int) -> bytes:
        for (lo, n), data in zip(spans, datas, strict=True):
            if lo <= offset and offset + size <= lo + n:
                return data[offset - lo : offset - lo + size]
        return read(offset, size)

    return cached


def _runs(index: PacketIndex, todo: list[int]) -> list[list[int]]:
    """``todo`` (sorted frame numbers) cut where the next frame's keyframe lies past the packets
    the run so far needs: each run's packets are one stretch of the file, none skipped inside."""
    runs: list[list[int]] = []
    reach = -2
    for i in todo:
        if index.keyframe_before(i) > reach + 1:
            runs.append([])
        runs[-1].append(i)
        reach = max(reach, int(index.reach[i]))
    return runs

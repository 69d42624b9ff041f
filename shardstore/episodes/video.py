"""Video frames at random: the reference a step keeps to its frame, and the decoder that finds it.

A video field (``FieldSpec.kind == "video"``) keeps its mp4 files whole elsewhere (an auxiliary
dataset of the import); each step holds a ``VideoRef``: the file's name there, the frame's
presentation time in seconds and its frame number in the file. Reading a frame is then, for a
file of the store's packet index (``packets``: the usual case), one range read of its packets and a
decoder kept per kind of video; for any other file (the index leaves it out, or the caller gives
no ``packets``) the demuxer path:

- bytes come through ``RangeFile``, a read-only file object over ``Storage.read_at`` (``os.pread``
  locally, a range GET on S3) of the member's byte range inside its tar shard, read in blocks with
  a few blocks kept, so a decoder seeking in the mp4 never downloads the whole file;
- ``FrameDecoder`` keeps the last few files open (container, stream, decoder) per process. A frame
  ahead of the last one decoded and within one group of pictures is reached by decoding forward;
  anything else seeks to the keyframe at or before the time and decodes forward to the exact frame
  (the first whose time is within half a frame of the one asked). Consecutive frames of an
  episode, as a window reads them, never seek again.

Frames come out as HWC ``uint8`` RGB numpy arrays. PyAV (``av``) is the ``convert`` extra.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any, cast

import numpy as np

from ..errors import DecodeError, MissingExtraError
from ..storage import ByteRange, Storage
from .packets import (
    THREADS,
    Frame,
    PacketIndex,
    PacketReader,
    PacketSource,
    Planes,
    index_packets,
    load_packets,
    rgb24,
    served,
)

__all__ = [
    "VideoRef",
    "RangeFile",
    "FrameDecoder",
    "VideoStore",
    "VIDEO_STORE",
    "import_av",
    "scheduling_kept",
    "refs_to_bytes",
    "refs_from_bytes",
]

#: Bytes fetched per read of a ``RangeFile`` (a range GET on S3): an mp4's boxes are read in small
#: pieces by the demuxer, so reading ahead saves requests; a few blocks are kept for seeks back.
BLOCK_SIZE = 256 * 1024
BLOCKS_KEPT = 8
#: Open videos a ``FrameDecoder`` keeps per process (about 3 MB each at 224x224;
#: ``SHARDSTORE_VIDEO_OPEN``): reopening a video (parsing its index, starting a decoder, whose first
#: frames come out of fresh buffers, slow to touch) costs more than decoding a frame or two.
OPEN_VIDEOS = int(os.environ.get("SHARDSTORE_VIDEO_OPEN", "64"))
#: Decoded frames a ``FrameDecoder`` keeps per open video (a window asked twice decodes once).
FRAMES_KEPT = 32
#: Threads a ``FrameDecoder`` decodes a call's files on (``SHARDSTORE_DECODE_THREADS``; 1: the
#: caller's only), each with its own decoders (a codec context is not thread-safe): PyAV lets go
#: of the GIL while decoding and numpy while turning frames into floats: a LeRobot batch of 32
#: items of two 224x224 AV1 cameras took 1.2-1.5x less wall time on two cores (and 1.3x the CPU
#: time). At most 4 by default; 1 in a DataLoader worker, whose siblings fill the cores already.
DECODE_THREADS = max(1, int(os.environ.get("SHARDSTORE_DECODE_THREADS", min(4, os.cpu_count() or 1))))
#: Frames per thread at least: a step's two cameras decode on two threads. Handing a frame to a
#: waiting worker costs 0.03 ms, and a random frame's item of two 224x224 AV1 cameras took 0.7-0.8x
#: the wall time for about the same CPU time.
FRAMES_PER_THREAD = 1


def import_av() -> Any:
    """PyAV, or a ``MissingExtraError`` naming the extra. FFmpeg's own log lines are silenced
    (``PANIC``): an error reaches the user once, as shardstore's one line, whose exception text
    still carries FFmpeg's last error message. SVT-AV1 prints its banner and warnings itself, past
    FFmpeg's log: ``SVT_LOG=1`` (errors only) unless the user set it."""
    os.environ.setdefault("SVT_LOG", "1")
    try:
        import av
    except ImportError as e:
        raise MissingExtraError(f"video needs PyAV: pip install 'shardstore[convert]' ({e})") from e
    av.logging.set_level(av.logging.PANIC)
    return av


@contextlib.contextmanager
def scheduling_kept() -> Iterator[None]:
    """Around a video encoder: SVT-AV1 (``libsvtav1``), in a process running as root, switches the
    thread that opens it to SCHED_FIFO priority 99 and leaves it so. Every process started from that
    thread afterwards inherits a real-time policy, under which CPU-bound processes of equal priority
    never yield to each other: scan workers, readers and servers starve one another (a hung test run
    was traced to this). The thread's policy is put back as it was when the block ends."""
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    except (AttributeError, OSError):  # no such calls on this platform
        yield
        return
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) != before:
            os.sched_setscheduler(0, before[0], os.sched_param(before[1]))


#: ``VideoRef.to_bytes``'s output for a plain name (no escapes) and finite time; anything else is
#: parsed as JSON.
_REF = re.compile(rb'\{"file": "([^"\\]*)", "timestamp": (-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?), "frame": (-?[0-9]+)\}\Z')


@dataclass(frozen=True, slots=True)
class VideoRef:
    """Where a step's frame is: ``file`` (its name in the video store), ``timestamp`` (seconds from
    the file's start, as LeRobot's ``from_timestamp + frame_index / fps``) and ``frame`` (its
    number in the file, for messages and for cutting files at frames)."""

    file: str
    timestamp: float
    frame: int

    def to_bytes(self) -> bytes:
        return json.dumps({"file": self.file, "timestamp": self.timestamp, "frame": self.frame}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> VideoRef:
        m = _REF.match(data)  # what to_bytes writes, read without the JSON parser (one per step read)
        if m is not None:
            return cls(m.group(1).decode(), float(m.group(2)), int(m.group(3)))
        try:
            obj = json.loads(data)
            return cls(str(obj["file"]), float(obj["timestamp"]), int(obj["frame"]))
        except (ValueError, KeyError, TypeError) as e:
            raise DecodeError(f"not a video frame reference: {e}") from e


def refs_to_bytes(refs: Sequence[VideoRef]) -> bytes:
    """Many references as one compact JSON document (an episode sample's ``<field>.json``): each
    file named once, then ``[file number, timestamp, frame]`` per row."""
    files: dict[str, int] = {}
    rows = [[files.setdefault(r.file, len(files)), r.timestamp, r.frame] for r in refs]
    return json.dumps({"files": list(files), "rows": rows}, separators=(",", ":")).encode()


def refs_from_bytes(data: bytes) -> list[VideoRef]:
    """The inverse of ``refs_to_bytes``."""
    try:
        obj = json.loads(data)
        files = [str(f) for f in obj["files"]]
        return [VideoRef(files[int(i)], float(t), int(n)) for i, t, n in obj["rows"]]
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise DecodeError(f"not a list of video frame references: {e}") from e


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over ``size`` bytes at ``offset`` of ``path`` in ``storage``.

    Reads go out in ``BLOCK_SIZE`` blocks (the last ``BLOCKS_KEPT`` kept), so a demuxer's many
    small reads become a few range reads, and nothing outside the range is ever read.
    """

    def __init__(self, storage: Storage, path: str, offset: int = 0, size: int | None = None) -> None:
        super().__init__()
        self.storage, self.path, self.base = storage, path, offset
        self.length = storage.size(path) - offset if size is None else size
        self.pos = 0
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def _block(self, n: int) -> bytes:
        data = self._blocks.get(n)
        if data is None:
            start = n * BLOCK_SIZE
            data = self.storage.read_at(self.path, self.base + start, min(BLOCK_SIZE, self.length - start))
            self._blocks[n] = data
            if len(self._blocks) > BLOCKS_KEPT:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(n)
        return data

    def read(self, size: int = -1) -> bytes:
        end = self.length if size is None or size < 0 else min(self.length, self.pos + size)
        out = bytearray()
        while self.pos < end:
            n, skip = divmod(self.pos, BLOCK_SIZE)
            piece = self._block(n)[skip : skip + end - self.pos]
            out += piece
            self.pos += len(piece)
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _OpenVideo:
    """One open file: container, its first video stream, the running decoder and what it gave."""

    def __init__(
        self, av: Any, name: str, fileobj: IO[bytes], reformatters: dict[tuple[Any, ...], Any]
    ) -> None:
        self.name = name
        self.fileobj = fileobj
        try:
            self.container = av.open(fileobj, "r")
            self.stream = self.container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as e:
            raise DecodeError(f"cannot open the video: {e}", path=name) from e
        # slice threads only: frame threading adds a frame of latency per seek, and closing a
        # frame-threaded decoder left in the middle of a file can hang (seen with PyAV 18)
        self.stream.thread_type = "SLICE"
        self.stream.codec_context.thread_count = THREADS
        cc = self.stream.codec_context
        kind = (cc.name, cc.width, cc.height, cc.pix_fmt)
        if kind not in reformatters:
            reformatters[kind] = av.video.reformatter.VideoReformatter()
        self.reformatter = reformatters[kind]
        self.time_base: Fraction = self.stream.time_base
        rate = self.stream.average_rate or self.stream.guessed_rate or 30
        self.frame_pts = max(1, round(1 / (float(rate) * self.time_base)))  # one frame, in pts
        self.gop = 1  # the longest distance between keyframes seen, in pts (decode forward within it)
        self.last_key: int | None = None
        self.frames: OrderedDict[int, np.ndarray] = OrderedDict()
        self.decoder: Any = None
        self.position: int | None = None  # pts of the last frame the running decoder gave
        self.seeks = 0  # how often this video was sought (a measure of the cache's use)
        self.decoded = 0  # how many frames its decoder gave

    def close(self) -> None:
        self.container.close()
        self.fileobj.close()

    def frame(self, timestamp: float) -> np.ndarray:
        target = round(timestamp / self.time_base)
        half = self.frame_pts // 2
        for pts, arr in self.frames.items():
            if abs(pts - target) <= half:
                return arr
        ahead = self.position is not None and self.position < target <= self.position + max(
            self.gop, self.frame_pts
        )
        # A seek lands on the keyframe whose *decode* time is at or before the target; with B-frames
        # and open GOPs (HEVC) that keyframe may be shown after the target, its leading frames
        # dropped: then seek again from further back, down to the start of the file.
        back = 0
        for attempt in range(8):
            if not ahead or attempt:
                start = 0 if attempt == 7 else max(0, target - half - back)
                self.container.seek(start, stream=self.stream, backward=True, any_frame=False)
                self.seeks += 1
                self.decoder = self.container.decode(self.stream)
                self.position = None
            first = True
            for frame in self.decoder:
                self.decoded += 1
                pts = frame.pts if frame.pts is not None else 0
                self._learn(pts, frame.key_frame)
                self.position = pts
                if pts + half < target:
                    first = False
                    continue
                if abs(pts - target) > half:
                    break  # past the frame: no frame at this time, or landed after it
                arr = rgb24(self.reformatter, frame)
                self.frames[pts] = arr
                if len(self.frames) > FRAMES_KEPT:
                    self.frames.popitem(last=False)
                return arr
            if not first or self.position is None:
                break  # decoded through the time without meeting a frame there (or the file ended)
            back = max(2 * back, self.gop, 4 * self.frame_pts)
        self.position = None
        raise DecodeError(f"no frame at {timestamp:.6f} s (the video ends or skips it)", path=self.name)

    def _learn(self, pts: int, key: bool) -> None:
        if key:
            if self.last_key is not None and pts > self.last_key:
                self.gop = max(self.gop, pts - self.last_key)
            self.last_key = pts


class FrameDecoder:
    """Frames of videos by (name, timestamp), with open videos cached per process.

    ``opener(name)`` gives a seekable binary file of the video (a ``RangeFile`` over a tar
    member, a local file); ``read_many([(name, offset, size), ...])``, when given, reads the
    packets of many files at once (S3: concurrently, every camera's groups of pictures of a batch
    in one round trip), else each file's are read as it is decoded. A call's files are decoded on
    up to ``threads`` threads (started per call: no thread outlives it, so a process forking
    DataLoader workers afterwards has none), each file by one of them with its own decoders.
    Safe to share between threads (one lock); after a fork the child starts with an empty cache,
    since a container's state cannot be shared between processes.
    """

    def __init__(
        self,
        opener: Callable[[str], IO[bytes]],
        max_open: int = OPEN_VIDEOS,
        packets: Callable[[str], PacketSource | None] | None = None,
        read_many: Callable[[list[tuple[str, int, int]]], list[bytes]] | None = None,
        threads: int = DECODE_THREADS,
    ) -> None:
        self.opener = opener
        self.packets = packets
        self.read_many = read_many
        self.threads = max(1, threads)
        self._sources: dict[str, PacketSource | None] = {}
        self._readers: dict[int, PacketReader] = {}  # per thread of a call: its decoders
        self._owner: dict[str, int] = {}  # per indexed file, the thread that decoded it last
        self.max_open = max_open
        self._open: OrderedDict[str, _OpenVideo] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        # RGB converters kept per kind of video (codec, size, pixel format): a frame's own
        # to_ndarray(format=...) builds a scaler per call (about 1 ms at 224x224, more than
        # decoding the frame); a kept one reuses its scaler while its input stays alike
        self._reformatters: dict[tuple[Any, ...], Any] = {}

    def _forked(self) -> None:
        if self._pid != os.getpid():
            self._open = OrderedDict()  # inherited through fork: never touch the parent's decoders
            self._pid = os.getpid()
            self._reformatters = {}
            self._readers, self._owner = {}, {}

    def _source(self, name: str) -> PacketSource | None:
        """The packet index of ``name`` and its bytes, or None: read through the demuxer."""
        if self.packets is None:
            return None
        if name not in self._sources:
            self._sources[name] = self.packets(name)
        return self._sources[name]

    def _video(self, name: str) -> _OpenVideo:
        video = self._open.get(name)
        if video is None:
            video = _OpenVideo(import_av(), name, self.opener(name), self._reformatters)
            self._open[name] = video
            if len(self._open) > self.max_open:
                self._open.popitem(last=False)[1].close()
        else:
            self._open.move_to_end(name)
        return video

    def frame(self, name: str, timestamp: float) -> np.ndarray:
        """The frame of ``name`` shown at ``timestamp`` seconds, HWC uint8 RGB."""
        return self.frames([VideoRef(name, timestamp, -1)])[0]

    def _frames_of(
        self, thread: int, name: str, timestamps: list[float], read: Callable[[int, int], bytes] | None, planar: bool
    ) -> list[Frame]:
        source = self._source(name)
        if source is None:
            video = self._video(name)
            frames = [video.frame(t) for t in timestamps]
            return [Planes(*np.ascontiguousarray(f.transpose(2, 0, 1))) for f in frames] if planar else list(frames)
        index = source.index
        reader = self._packet_reader(thread)
        return reader.frames(name, index, read or source.read, index.frames_at(timestamps, name), planar)

    def _packet_reader(self, thread: int) -> PacketReader:
        reader = self._readers.get(thread)
        if reader is None:
            reader = self._readers[thread] = PacketReader()
        return reader

    def _prefetch(
        self, by_file: dict[str, list[float]], owner: dict[str, int], planar: bool
    ) -> dict[str, Callable[[int, int], bytes]]:
        """Per indexed file, a ``read`` served from its stretches of packets for ``by_file``'s
        frames (what its ``owner`` thread's reader lacks), all read in one ``read_many`` call
        (none without ``read_many``)."""
        if self.read_many is None:
            return {}
        plans: dict[str, tuple[PacketSource, list[tuple[int, int]]]] = {}
        for name, times in by_file.items():
            source = self._source(name)
            if source is not None:
                reader = self._packet_reader(owner[name])
                spans = reader.stretches(name, source.index, source.index.frames_at(times, name), planar)
                if spans:
                    plans[name] = (source, spans)
        if sum(len(spans) for _, spans in plans.values()) < 2:
            return {}
        datas = iter(self.read_many([(name, lo, n) for name, (_, spans) in plans.items() for lo, n in spans]))
        return {name: served(source.read, spans, [next(datas) for _ in spans]) for name, (source, spans) in plans.items()}

    def _share(self, by_file: dict[str, list[float]]) -> list[list[str]]:
        """``by_file``'s files shared out between this call's threads, each share in file order:
        files read through the demuxer (one cache of open containers) to the first, each other
        file, most frames first, to the share with the fewest frames so far, the one that
        decoded it last when that is one of them (its decoder may go on from where it stands,
        its frames kept serve it)."""
        frames = sum(len(times) for times in by_file.values())
        n = 1 if _in_loader_worker() else max(1, min(self.threads, len(by_file), frames // FRAMES_PER_THREAD))
        shares: list[list[str]] = [[] for _ in range(n)]
        load = [0] * n
        demuxed = [name for name in by_file if self._source(name) is None]
        indexed = sorted(set(by_file) - set(demuxed), key=lambda name: (-len(by_file[name]), name))
        for name in demuxed + indexed:
            least = min(load)
            last = self._owner.get(name, -1)
            k = 0 if self._source(name) is None else last if 0 <= last < n and load[last] == least else load.index(least)
            shares[k].append(name)
            load[k] += len(by_file[name])
            self._owner[name] = k
        return [sorted(share) for share in shares]

    def indexed(self, name: str) -> bool:
        """Whether ``name`` is read at the packet level (else through the demuxer)."""
        with self._lock:
            return self._source(name) is not None

    def seeks(self, name: str) -> int:
        """How often reading ``name`` started over at a keyframe: seeks of its open container,
        restarts of the decoders reading its packets (0 if it was not read)."""
        video = self._open.get(name)
        restarts = sum(r.restarts.get(name, 0) for r in self._readers.values())
        return restarts + (0 if video is None else video.seeks)

    def decoded(self, name: str) -> int:
        """How many frames of ``name`` this process's decoders decoded (packets sent, frames the
        demuxer path's decoder gave): what a reader's cost is measured by."""
        video = self._open.get(name)
        packets = sum(r.decoded.get(name, 0) for r in self._readers.values())
        return packets + (0 if video is None else video.decoded)

    def frames(self, refs: Sequence[VideoRef]) -> list[np.ndarray]:
        """The frames of ``refs`` in the order asked, decoded together in file and time order,
        each distinct frame once (a batch's or a window's frames: one keyframe start per group of
        pictures, frames of one group decoded on from it)."""
        return cast(list[np.ndarray], self.put_together([(refs, list)])[0])

    def put_together(
        self, groups: Sequence[tuple[Sequence[VideoRef], Callable[[list[Frame]], Any]]], planar: bool = False
    ) -> list[Any]:
        """``put(frames)`` of each ``(refs, put)`` of ``groups`` (a batch's items' fields: a
        window's frames put together as one array), every frame decoded as ``frames`` decodes
        them, ``planar``: as its ``Planes`` (CHW). Each thread decodes its share of the files, then puts together the
        groups whose frames all lie in its files (numpy turns frames into floats without the GIL
        too); the others are put together on the caller's thread once every frame is there."""
        distinct: dict[str, set[float]] = {}
        for refs, _ in groups:
            for r in refs:
                distinct.setdefault(r.file, set()).add(r.timestamp)
        by_file = {name: sorted(distinct[name]) for name in sorted(distinct)}
        out: list[Any] = [None] * len(groups)
        got: dict[tuple[str, float], Frame] = {}
        with self._lock:
            self._forked()
            shares = self._share(by_file)
            owner = {name: k for k, share in enumerate(shares) for name in share}
            reads = self._prefetch(by_file, owner, planar)
            theirs: list[list[int]] = [[] for _ in shares]
            left: list[int] = []
            for g, (refs, _) in enumerate(groups):
                ks = {owner[r.file] for r in refs}
                (theirs[ks.pop()] if len(ks) == 1 else left).append(g)

            def work(k: int) -> None:
                mine: dict[tuple[str, float], Frame] = {}
                for name in shares[k]:
                    times = by_file[name]
                    frames = self._frames_of(k, name, times, reads.get(name), planar)
                    mine.update(zip(((name, t) for t in times), frames, strict=True))
                for g in theirs[k]:
                    refs, put = groups[g]
                    out[g] = put([mine[(r.file, r.timestamp)] for r in refs])
                got.update(mine)

            _on_threads(work, len(shares))
        for g in left:
            refs, put = groups[g]
            out[g] = put([got[(r.file, r.timestamp)] for r in refs])
        return out

    def close(self) -> None:
        with self._lock:
            for video in self._open.values():
                video.close()
            self._open.clear()


def _on_threads(work: Callable[[int], None], n: int) -> None:
    """``work(k)`` for ``k`` in ``range(n)``: 0 on this thread, each other on a thread of the
    process's decode workers, all finished when this returns (the first error raised then)."""
    if n <= 1:
        work(0)
        return
    done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
    workers = _workers(n - 1)
    for k in range(1, n):
        workers[k - 1].put((work, k, done))
    errors: list[BaseException] = []
    try:
        work(0)
    except BaseException as e:  # raised once the others are finished: they may still use its state
        errors.append(e)
    for _ in range(1, n):
        error = done.get()
        if error is not None:
            errors.append(error)
    if errors:
        raise errors[0]


Task = tuple[Callable[[int], None], int, "queue.SimpleQueue[BaseException | None]"]
#: The task queues of this process's decode workers (``_workers``): starting a thread per call
#: cost 0.17 ms, a twentieth of a random frame's item.
_WORKERS: list[queue.SimpleQueue[Task]] = []
_WORKERS_LOCK = threading.Lock()


def _forget_workers() -> None:
    """In a forked child: the parent's threads did not come along, and its lock may have been
    held by one of them at the fork."""
    global _WORKERS_LOCK
    _WORKERS.clear()
    _WORKERS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _workers(n: int) -> list[queue.SimpleQueue[Task]]:
    """The task queues of ``n`` decode worker threads (daemons, started on first use)."""
    with _WORKERS_LOCK:
        while len(_WORKERS) < n:
            q: queue.SimpleQueue[Task] = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(q,), name=f"shardstore-decode-{len(_WORKERS) + 1}", daemon=True).start()
            _WORKERS.append(q)
        return _WORKERS[:n]


def _serve(tasks: queue.SimpleQueue[Task]) -> None:
    """A decode worker: runs ``work(k)`` of each task, then reports to its caller's ``done``."""
    while True:
        work, k, done = tasks.get()
        try:
            work(k)
        except BaseException as e:  # handed to the caller's thread
            done.put(e)
        else:
            done.put(None)


def _in_loader_worker() -> bool:
    """Whether this is a DataLoader worker (torch consulted only when something imported it)."""
    if sys.modules.get("torch") is None:
        return False
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None


#: Where an import keeps its video files: a prepared dataset in this folder of the episode dataset
#: (hidden, so neither tool's prepare of the episode dataset takes its shards for its own).
VIDEO_STORE = ".videos"


class VideoStore(Mapping[str, Callable[[], IO[bytes]]]):
    """The video files of an episode dataset: a prepared dataset of mp4 members (``IndexedTarStore``)
    named as in the source (``videos/chunk-000/observation.images.front/episode_000000.mp4``).

    As a mapping it gives, per file name, an opener of a ``RangeFile`` over the member's bytes in
    its shard (what ``EpisodeStream.video_files`` holds on export); ``decoder`` decodes frames
    from it. ``names`` are the files the import wrote (``Schema.attrs["video_files"]``).
    """

    def __init__(
        self,
        url: str,
        names: Sequence[str],
        storage_options: dict[str, Any] | None = None,
        packets: str | None = None,
    ) -> None:
        self.url = url
        self.names = list(names)
        self.storage_options = storage_options
        self.packets = packets
        self._store: Any = None
        self._decoder: FrameDecoder | None = None
        self._indexes: dict[str, PacketIndex] | None = None

    @property
    def store(self) -> Any:
        if self._store is None:
            from ..filestores import IndexedTarStore

            self._store = IndexedTarStore(self.url, storage_options=self.storage_options)
        return self._store

    def open(self, name: str) -> IO[bytes]:
        """A seekable file over the member ``name``; ``SampleNotFoundError`` if there is none."""
        path, rng = self.store.locate(name)
        return cast(IO[bytes], RangeFile(self.store.storage, path, rng.offset, rng.size))

    def source(self, name: str) -> PacketSource | None:
        """The packet index of the member ``name`` and a reader of its bytes, or None when the
        file is read through the demuxer. The index comes from the store's ``packets`` file
        (which leaves out files that do not qualify); a store written before there was one
        (no ``packets``) has each file indexed here on first use, once per process."""
        path, rng = self.store.locate(name)
        if self.packets is not None:
            if self._indexes is None:
                where = f"{self.url.rstrip('/')}/{self.packets}"
                self._indexes = load_packets(self.store.storage.read(self.packets), where)
            index = self._indexes.get(name)
        else:
            index = index_packets(lambda: self.open(name), name)
        if index is None:
            return None
        index.check(rng.size, name)
        storage, base = self.store.storage, rng.offset
        return PacketSource(index, lambda offset, size: storage.read_at(path, base + offset, size))

    def read_many(self, spans: list[tuple[str, int, int]]) -> list[bytes]:
        """Bytes ``offset .. offset + size`` of each ``(name, offset, size)``, in one concurrent
        ``read_ranges`` (S3: one round trip for a batch's groups of pictures of every camera)."""
        located = [self.store.locate(name) for name, _, _ in spans]
        return self.store.storage.read_ranges(
            [(path, ByteRange(rng.offset + offset, size)) for (path, rng), (_, offset, size) in zip(located, spans, strict=True)]
        )

    def packet_indexes(self) -> dict[str, PacketIndex] | None:
        """Every file's packet index from the store's ``packets`` file (files that did not
        qualify absent), each checked against its member's size; None for a store without one."""
        if self.packets is None:
            return None
        if self._indexes is None:
            where = f"{self.url.rstrip('/')}/{self.packets}"
            self._indexes = load_packets(self.store.storage.read(self.packets), where)
        out = {name: index for name, index in self._indexes.items() if name in self.names}
        for name, index in out.items():
            index.check(self.store.locate(name)[1].size, name)
        return out

    @property
    def decoder(self) -> FrameDecoder:
        if self._decoder is None:
            remote = self.store.storage.local_path("") is None  # local files: one pread after another is faster
            self._decoder = FrameDecoder(self.open, packets=self.source, read_many=self.read_many if remote else None)
        return self._decoder

    def __getitem__(self, name: str) -> Callable[[], IO[bytes]]:
        if name not in self.names:
            raise KeyError(name)
        return lambda: self.open(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getstate__(self) -> dict[str, Any]:
        # open stores and decoders stay in their process; a worker opens its own
        return {
            "url": self.url,
            "names": self.names,
            "storage_options": self.storage_options,
            "packets": self.packets,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["url"], state["names"], state["storage_options"], state.get("packets")
        )

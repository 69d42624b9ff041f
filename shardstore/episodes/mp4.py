"""mp4 files cut and joined without re-encoding where the group of pictures allows.

LeRobot v2.1 keeps one mp4 per episode and camera, v3.0 concatenates episodes into larger files;
converting between them either joins files or cuts one file at episode boundaries. Both are
remuxes (packets copied, timestamps shifted) when they can be:

- **join**: every input has the same codec, size, pixel format and decoder configuration
  (``extradata``: H.264's SPS/PPS, AV1's sequence header), so one decoder reads them all;
- **cut**: the clip starts on a keyframe and ends where no frame inside it refers to one after it
  (``cut_ends``: anywhere without B-frames; the file's end or a keyframe always). A format whose
  episodes are time ranges into a file (LeRobot v3.0) needs no such luck: ``whole_gop_runs`` widens
  each run of clips back to its keyframe and on to such an end, the frames before and after the
  episode kept in the file and skipped by its range.

A clip of a store's file with a packet index (``packets.npz``) is cut from the index: no demuxing,
the kept packets read in one range per run.

Otherwise the frames are decoded and encoded again with the source's codec (``libx264`` for H.264,
``libsvtav1`` for AV1, ``libx265`` for HEVC) and the result says so (``reencoded``). Every output is
checked by counting its frames.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import IO, Any

import numpy as np

from ..errors import DecodeError
from .mp4index import sample_table
from .mp4write import Piece, source_heads, write_indexed
from .packets import PacketIndex, PacketSource
from .video import import_av, scheduling_kept

__all__ = ["Clip", "Placed", "VideoInfo", "gop_padding", "indexed_info", "probe", "whole_gop_runs", "whole_gops", "write_clips", "ENCODERS", "cut_ends"]

#: Decoder name -> the encoder that writes the same codec.
ENCODERS = {
    "h264": "libx264",
    "av1": "libsvtav1",
    "libdav1d": "libsvtav1",
    "hevc": "libx265",
    "mpeg4": "mpeg4",
}
#: Frames between keyframes when re-encoding (LeRobot's recorder uses 2: cheap random access).
REENCODE_GOP = 2

Opener = Callable[[], IO[bytes]]


@dataclass(frozen=True, slots=True)
class VideoInfo:
    """A video's stream as ``probe`` finds it: what checking it against LeRobot's ``info.json`` and
    deciding a remux need."""

    codec: str  # the codec's short name: h264, av1, hevc
    width: int
    height: int
    pix_fmt: str
    fps: float
    frames: int
    keyframes: tuple[int, ...]  # frame numbers (presentation order) of the keyframes
    ends: tuple[int, ...]  # where a cut may end (``cut_ends``)
    extradata: bytes
    has_audio: bool
    leading: bool  # frames shown before a keyframe but decoded after it (open GOPs: HEVC's CRA)


@dataclass(frozen=True, slots=True)
class Clip:
    """Frames ``start`` to ``start + count`` of the video ``open()`` gives; ``packets``, when the
    file has a packet index (a store's ``packets.npz``), its index and a reader of its bytes: the
    cut reads only the packets it keeps, without demuxing the file."""

    open: Opener
    name: str
    start: int
    count: int
    packets: PacketSource | None = None


def probe(fileobj: IO[bytes], name: str, *, packets: bool = True) -> VideoInfo:
    """Codec, size, frame count and keyframe positions, reading packets only (nothing decoded).

    ``packets=False`` takes the frame count from the container's index (mp4's sample table: only
    the header is read) and leaves ``keyframes`` empty: enough to check a file, not to cut it.
    """
    av = import_av()
    size = _file_size(fileobj)
    try:  # FFmpeg's log lines of a broken file are swallowed: the error below says what they say
        with av.logging.Capture(), av.open(fileobj, "r") as c:
            s = c.streams.video[0]
            pts: list[int] = []
            keys = []
            leading = False
            counted = 0
            if not packets and s.frames > 0:
                # the sample table's count, checked before use: a frame takes at least a byte
                if s.frames > size:
                    raise DecodeError(f"the sample table claims {s.frames} frames in a file of {size} bytes",
                                      path=name)
                counted = s.frames
            for p in c.demux(s) if packets or not counted else ():
                if p.size and p.pts is not None:
                    pts.append(p.pts)
                    if p.is_keyframe:
                        keys.append(p.pts)
                    elif keys and p.pts < keys[-1]:
                        leading = True
            order = {v: i for i, v in enumerate(sorted(pts))}
            decoded = np.argsort(np.asarray(pts, np.int64), kind="stable")
            cc = s.codec_context
            return VideoInfo(
                codec=_codec_name(cc.name),
                width=cc.width,
                height=cc.height,
                pix_fmt=cc.pix_fmt or "yuv420p",
                fps=float(s.average_rate or s.guessed_rate or 0),
                frames=counted or len(pts),
                keyframes=tuple(sorted(order[k] for k in keys)),
                ends=tuple(np.flatnonzero(cut_ends(decoded)).tolist()),
                extradata=bytes(cc.extradata or b""),
                has_audio=bool(c.streams.audio),
                leading=leading,
            )
    except (av.error.FFmpegError, IndexError) as e:
        raise DecodeError(f"cannot read the video: {e}", path=name) from e


def indexed_info(index: PacketIndex) -> VideoInfo:
    """What ``probe`` finds, from a packet index, nothing read: the index holds plain files only
    (closed GOPs, so no leading frames) and their video stream (``has_audio`` False: an export
    writes video streams alone)."""
    keyframes = np.searchsorted(index.shown, index.pts[index.key])
    return VideoInfo(
        codec=_codec_name(index.codec),
        width=index.width,
        height=index.height,
        pix_fmt=index.pix_fmt,
        fps=float(1 / (index.step * index.time_base)),
        frames=index.frames,
        keyframes=tuple(sorted(keyframes.tolist())),
        ends=tuple(np.flatnonzero(cut_ends(index.packet)).tolist()),
        extradata=index.extradata,
        has_audio=False,
        leading=False,
    )


def cut_ends(decoded: np.ndarray) -> np.ndarray:
    """Per frame count ``h`` in ``0 .. n`` (``decoded``: each frame's place in decode order, in
    presentation order), whether frames ``0 .. h-1`` are the first ``h`` packets decoded: a cut
    (of closed GOPs) may end there, no kept frame needing a later one (a B-frame's reference).
    Without B-frames every ``h``; with them, where no frame before ``h`` waits for one after."""
    out = np.ones(len(decoded) + 1, np.bool_)
    if len(decoded):
        out[1:] = np.maximum.accumulate(decoded) == np.arange(len(decoded))
    return out


def _file_size(fileobj: IO[bytes]) -> int:
    here = fileobj.tell()
    end = fileobj.seek(0, 2)
    fileobj.seek(here)
    return int(end)


def _codec_name(name: str) -> str:
    return {"libdav1d": "av1", "libaom-av1": "av1"}.get(name, name)


def write_clips(clips: Sequence[Clip], infos: Sequence[VideoInfo], out: str, fps: float) -> bool:
    """Write the clips one after another into the mp4 ``out``; True when it had to re-encode.

    Remuxes when every clip is a whole-GOP cut and all inputs share one decoder configuration
    (see the module docstring); otherwise decodes and encodes with the first input's codec.
    """
    first = infos[0]
    same = all(
        (i.codec, i.width, i.height, i.pix_fmt, i.extradata)
        == (first.codec, first.width, first.height, first.pix_fmt, first.extradata)
        for i in infos
    )
    cuttable = all(whole_gops(c, i) for c, i in zip(clips, infos, strict=True))
    if same and cuttable:
        if not _write_indexed(clips, out):
            _remux(clips, out)
        reencoded = False
    else:
        _reencode(clips, first, out, fps)
        reencoded = True
    want = sum(c.count for c in clips)
    with open(out, "rb") as f:  # the container's own count (its sample table): no demuxing
        table = sample_table(f, _file_size(f), out)
        got = len(table.pts) if table is not None else probe(f, out, packets=False).frames
    if got != want:
        raise DecodeError(f"wrote {got} frames where the clips have {want}", path=out)
    return reencoded


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a clip landed in a file of runs: run ``run``, ``lead`` frames after the run's start."""

    run: int
    lead: int


def whole_gop_runs(
    clips: Sequence[tuple[Clip, VideoInfo]],
) -> tuple[list[tuple[Clip, VideoInfo]], list[Placed]]:
    """Runs that hold the clips and can be remuxed: clips that follow each other in one file joined
    into one run, each run widened back to the keyframe at or before its start and on to the next
    keyframe (or the file's end) after its end, a file with open GOPs (``leading``) taken whole.
    The clips' frames keep their bytes; the runs hold extra frames before and after them, which a
    format with time ranges into files (LeRobot v3.0's ``from_timestamp``) skips. Returns the runs
    and, per clip, its run and its first frame's place in it."""
    runs: list[tuple[Clip, VideoInfo]] = []
    placed: list[Placed] = []
    for clip, info in clips:
        if runs and runs[-1][0].name == clip.name and runs[-1][0].start + runs[-1][0].count == clip.start:
            last = runs[-1][0]
            runs[-1] = (replace(last, count=last.count + clip.count), info)
            placed.append(Placed(len(runs) - 1, clip.start - last.start))
        else:
            runs.append((clip, info))
            placed.append(Placed(len(runs) - 1, 0))
    widened = []
    for r, (run, info) in enumerate(runs):
        lo, hi = _widened(run, info)
        widened.append((replace(run, start=lo, count=hi - lo), info))
        shift = run.start - lo
        placed = [Placed(p.run, p.lead + shift) if p.run == r else p for p in placed]
    return widened, placed


def gop_padding(covered: np.ndarray, keys: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """Per frame (presentation order), whether it is padding that ``whole_gop_runs`` adds around
    the ``covered`` frames (those some episode's time range holds; ``keys``: the keyframes;
    ``decoded``: each frame's place in decode order): after covered frames, those up to the first
    place a cut may end (``cut_ends``: frames B-frames before them refer to); then at most the start
    of one GOP up to covered frames (from its keyframe to an episode's first frame, not a keyframe:
    else nothing would need it). Any other uncovered frame (a whole GOP, an appended take) is not."""
    n = len(covered)
    out = np.zeros(n, np.bool_)
    loose = np.flatnonzero(~covered)
    if not len(loose):
        return out
    ends = np.flatnonzero(cut_ends(decoded))
    breaks = np.flatnonzero(np.diff(loose) > 1)
    for a, last in zip(loose[np.r_[0, breaks + 1]].tolist(), loose[np.r_[breaks, len(loose) - 1]].tolist(), strict=True):
        b = last + 1  # the uncovered run [a, b)
        e = int(ends[np.searchsorted(ends, a)]) if a > 0 else a  # the trailing padding is [a, e)
        out[a:b] = e >= b or (
            b < n and bool(keys[e]) and not keys[b] and not keys[e + 1 : b].any()  # [e, b): one GOP's start
        )
    return out


def _widened(clip: Clip, info: VideoInfo) -> tuple[int, int]:
    """The frames ``[lo, hi)`` of the smallest whole-GOP cut that holds the clip."""
    end = clip.start + clip.count
    if info.leading or not info.keyframes:
        return 0, info.frames
    at = bisect.bisect_right(info.keyframes, clip.start)  # (both sorted: a file of thousands of
    past = bisect.bisect_left(info.ends, end)  # frames is cut once per episode)
    lo = info.keyframes[at - 1] if at else 0
    hi = info.ends[past] if past < len(info.ends) else info.frames
    return lo, hi


def whole_gops(clip: Clip, info: VideoInfo) -> bool:
    """Whether the clip is a cut that remuxes as it is (see the module docstring)."""
    end = clip.start + clip.count
    if info.leading and (clip.start, end) != (0, info.frames):
        return False  # a leading frame may refer across the cut
    return _holds(info.keyframes, clip.start) and (end == info.frames or _holds(info.ends, end))


def _holds(ordered: tuple[int, ...], value: int) -> bool:
    """``value in ordered`` for a sorted tuple, by bisection."""
    at = bisect.bisect_left(ordered, value)
    return at < len(ordered) and ordered[at] == value


@dataclass(frozen=True, slots=True)
class _Packets:
    """One source file's packets in decode order, and ``read(chosen)``: the bytes of some of them."""

    name: str
    pts: np.ndarray  # int64
    dts: np.ndarray  # int64; -1 << 62 where the packet has none
    key: np.ndarray  # bool
    duration: np.ndarray  # int64, 0 where unknown
    time_base: Any
    read: Callable[[list[int]], list[bytes]]
    shown: list[int] = field(init=False)  # the pts sorted (presentation order)
    step: int = field(init=False)  # one frame's duration

    def __post_init__(self) -> None:
        shown = sorted(self.pts.tolist())
        object.__setattr__(self, "shown", shown)
        object.__setattr__(self, "step", _frame_step(shown))


_NO_DTS = -(1 << 62)


def _remux(clips: Sequence[Clip], out: str) -> None:
    """Copy the clips' packets into one file, shifting each clip's times to follow the last. A
    file with a packet index is not demuxed: its kept packets are one range read; another is
    demuxed once for a run of clips from it (not once per clip: a v3.0 export takes many
    episodes' clips from one file)."""
    av = import_av()
    with av.open(out, "w", format="mp4") as dst:
        ostream = None
        offset = 0  # in the output's time base (set from the first input; all inputs share it)
        source: _Packets | None = None
        # one reorder delay for every indexed file: decode times must rise across the joins too
        delay = max((_reorder_delay(c.packets.index) for c in clips if c.packets is not None), default=0)
        for clip in clips:
            if source is None or source.name != clip.name:
                with clip.open() as f, av.open(f, "r") as src:
                    template = src.streams.video[0]
                    if ostream is None:
                        ostream = dst.add_stream_from_template(template, opaque=True)
                    source = _indexed(clip, template, delay) if clip.packets is not None else _demuxed(src, clip)
            shown = source.shown
            chosen, lo = _cut(clip, shown, source.pts)
            end = clip.start + clip.count
            shift = offset - lo
            time_base = source.time_base
            fields = zip(
                source.read(chosen.tolist()),
                (source.pts[chosen] + shift).tolist(),
                np.where(source.dts[chosen] == _NO_DTS, _NO_DTS, source.dts[chosen] + shift).tolist(),
                source.key[chosen].tolist(),
                source.duration[chosen].tolist(),
                strict=True,
            )
            for data, pts, dts, key, duration in fields:  # the hot loop: plain Python values only
                p = av.Packet(data)
                p.pts = pts
                p.dts = None if dts == _NO_DTS else dts
                p.is_keyframe = key
                if duration:
                    p.duration = duration
                p.time_base = time_base
                p.stream = ostream
                dst.mux(p)
            offset += _span(shown, clip.start, end, source.step)


def _cut(clip: Clip, shown: Sequence[int] | np.ndarray, pts: np.ndarray) -> tuple[np.ndarray, int]:
    """The packets (positions in decode order) of the clip's frames, and its first frame's pts;
    ``shown``: the file's pts in presentation order."""
    end = clip.start + clip.count
    if end > len(shown):
        raise DecodeError(f"frames {clip.start}..{end} asked of a video of {len(shown)}", path=clip.name)
    lo = int(shown[clip.start])
    hi = shown[end] if end < len(shown) else None
    return np.flatnonzero((pts >= lo) & (pts < hi if hi is not None else True)), lo


def _write_indexed(clips: Sequence[Clip], out: str) -> bool:
    """``_remux`` of clips that all have a packet index, written without PyAV (``mp4write``):
    the same packets and times. False, nothing written, where that writer does not apply (files
    whose sample descriptions differ, a clip that is not one range of packets)."""
    sources = {c.name: c.open for c in clips}
    indexes = [c.packets.index for c in clips if c.packets is not None]
    if len(indexes) != len(clips) or len({(i.time_base, i.width, i.height) for i in indexes}) != 1:
        return False
    time_base = indexes[0].time_base
    heads = source_heads(list(sources.values()), list(sources))
    if heads is None or time_base.numerator != 1:
        return False
    ftyp, stsd, delayed = heads
    # decode times as ``_indexed`` sets them: rising across the joins, a frame behind at least
    # where the stream has B-frames (PyAV's ``has_b_frames``; here: its muxer delayed it)
    reorder = max(_reorder_delay(i) for i in indexes)
    pieces, offset = [], 0
    for clip, index in zip(clips, indexes, strict=True):
        assert clip.packets is not None
        delay = max(reorder, index.step) if delayed else reorder
        chosen, lo = _cut(clip, index.shown, index.pts)
        if not len(chosen) or int(chosen[-1] - chosen[0]) + 1 != len(chosen):
            return False
        run = slice(int(chosen[0]), int(chosen[-1]) + 1)
        shift = offset - lo
        pieces.append(Piece(clip.packets.read, index.pos[run], index.size[run], index.pts[run] + shift,
                            index.shown[run] - delay + shift, index.key[run]))
        steps = np.diff(index.shown)
        step = int(steps[steps > 0].min()) if (steps > 0).any() else 1  # ``_frame_step``, as ``_remux`` takes it
        offset += int(_span(index.shown, clip.start, clip.start + clip.count, step))
    return write_indexed(pieces, ftyp, stsd, time_base.denominator, indexes[0].width, indexes[0].height,
                         indexes[-1].step, out)


def _demuxed(src: Any, clip: Clip) -> _Packets:
    """Every packet of the open container ``src`` (the clip's file), bytes and all."""
    s = src.streams.video[0]
    packets = [(bytes(p), p.pts, p.dts, p.is_keyframe, p.duration) for p in src.demux(s) if p.size and p.pts is not None]
    data = [p[0] for p in packets]
    return _Packets(
        name=clip.name,
        pts=np.array([p[1] for p in packets], np.int64),
        dts=np.array([_NO_DTS if p[2] is None else p[2] for p in packets], np.int64),
        key=np.array([p[3] for p in packets], bool),
        duration=np.array([p[4] or 0 for p in packets], np.int64),
        time_base=s.time_base,
        read=lambda chosen: [data[j] for j in chosen],
    )


def _reorder_delay(index: PacketIndex) -> int:
    """How far (in pts) a frame is decoded before it is shown, at most: presentation times in order
    minus the packets' own, at their deepest."""
    return int(np.max(index.shown - index.pts)) if index.frames else 0


def _indexed(clip: Clip, template: Any, delay: int) -> _Packets:
    """The packets of the clip's file from its packet index, their bytes read when chosen (one
    range read over them: the index keeps plain files, packets in file order). The index keeps no
    decode times: they are the presentation times in order, shifted back by ``delay`` (the
    deepest reordering of the files joined, at least a frame where the stream says it reorders),
    as an encoder sets them."""
    assert clip.packets is not None
    index, read = clip.packets.index, clip.packets.read
    if template.codec_context.has_b_frames:
        delay = max(delay, index.step)

    def chosen_bytes(chosen: list[int]) -> list[bytes]:
        if not chosen:
            return []
        first, last = chosen[0], chosen[-1]
        base = int(index.pos[first])
        span = memoryview(read(base, int(index.pos[last] + index.size[last]) - base))
        return [bytes(span[int(index.pos[j]) - base : int(index.pos[j] + index.size[j]) - base]) for j in chosen]

    return _Packets(
        name=clip.name,
        pts=index.pts,
        dts=index.shown - delay,
        key=index.key,
        duration=np.full(index.frames, index.step, np.int64),
        time_base=index.time_base,
        read=chosen_bytes,
    )


def _frame_step(pts_sorted: Sequence[int]) -> int:
    return min((b - a for a, b in zip(pts_sorted, pts_sorted[1:], strict=False) if b > a), default=1)


def _span(pts_sorted: Sequence[int] | np.ndarray, start: int, end: int, step: int) -> int:
    """Duration of frames start..end in pts: up to the next frame, or one frame past the last."""
    last = pts_sorted[end] if end < len(pts_sorted) else pts_sorted[end - 1] + step
    return last - pts_sorted[start]


def _reencode(clips: Sequence[Clip], info: VideoInfo, out: str, fps: float) -> None:
    """Decode the clips' frames and encode them again with the source's codec."""
    av = import_av()
    encoder = ENCODERS.get(info.codec, info.codec)
    rate = Fraction(fps).limit_denominator(1001)
    with scheduling_kept(), av.open(out, "w", format="mp4") as dst:
        ostream = dst.add_stream(encoder, rate=rate)
        ostream.width, ostream.height, ostream.pix_fmt = info.width, info.height, info.pix_fmt
        ostream.options = {"g": str(REENCODE_GOP)}
        if encoder == "libsvtav1":
            ostream.options = {"g": str(REENCODE_GOP), "preset": "12", "crf": "30"}
        n = 0
        for clip in clips:
            with clip.open() as f, av.open(f, "r") as src:
                for i, frame in enumerate(src.decode(video=0)):
                    if i >= clip.start + clip.count:
                        break
                    if i < clip.start:
                        continue
                    new = frame.reformat(format=info.pix_fmt)
                    new.pts, new.time_base = n, 1 / rate
                    n += 1
                    for p in ostream.encode(new):
                        dst.mux(p)
        for p in ostream.encode():
            dst.mux(p)

"""mp4 files cut and joined without re-encoding where the group of pictures allows.

LeRobot v2.1 keeps one mp4 per episode and camera, v3.0 concatenates episodes into larger files;
converting between them either joins files or cuts one file at episode boundaries. Both are
remuxes (packets copied, timestamps shifted) when they can be:

- **join**: every input has the same codec, size, pixel format and decoder configuration
  (``extradata``: H.264's SPS/PPS, AV1's sequence header), so one decoder reads them all;
- **cut**: the clip starts on a keyframe and ends where the file ends or the next keyframe starts,
  so no frame inside it refers to one outside. A format whose episodes are time ranges into a
  file (LeRobot v3.0) needs no such luck: ``whole_gop_runs`` widens each run of clips to whole
  GOPs, the frames before and after the episode kept in the file and skipped by its range.

Otherwise the frames are decoded and encoded again with the source's codec (``libx264`` for H.264,
``libsvtav1`` for AV1, ``libx265`` for HEVC) and the result says so (``reencoded``). Every output is
checked by counting its frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any

import numpy as np

from ..errors import DecodeError
from .video import import_av, scheduling_kept

__all__ = ["Clip", "Placed", "VideoInfo", "probe", "whole_gop_runs", "whole_gops", "write_clips", "ENCODERS"]

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
    """What LeRobot's ``info.json`` says of a video feature, and what deciding a remux needs."""

    codec: str  # the codec's short name: h264, av1, hevc
    width: int
    height: int
    pix_fmt: str
    fps: float
    frames: int
    keyframes: tuple[int, ...]  # frame numbers (presentation order) of the keyframes
    extradata: bytes
    has_audio: bool
    leading: bool  # frames shown before a keyframe but decoded after it (open GOPs: HEVC's CRA)

    def info_json(self) -> dict[str, Any]:
        """LeRobot's ``video_info`` / ``info`` entry of a video feature."""
        return {
            "video.height": self.height,
            "video.width": self.width,
            "video.codec": self.codec,
            "video.pix_fmt": self.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": self.fps,
            "video.channels": 3,
            "has_audio": self.has_audio,
        }


@dataclass(frozen=True, slots=True)
class Clip:
    """Frames ``start`` to ``start + count`` of the video ``open()`` gives."""

    open: Opener
    name: str
    start: int
    count: int


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
            cc = s.codec_context
            return VideoInfo(
                codec=_codec_name(cc.name),
                width=cc.width,
                height=cc.height,
                pix_fmt=cc.pix_fmt or "yuv420p",
                fps=float(s.average_rate or s.guessed_rate or 0),
                frames=counted or len(pts),
                keyframes=tuple(sorted(order[k] for k in keys)),
                extradata=bytes(cc.extradata or b""),
                has_audio=bool(c.streams.audio),
                leading=leading,
            )
    except (av.error.FFmpegError, IndexError) as e:
        raise DecodeError(f"cannot read the video: {e}", path=name) from e


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
        _remux(clips, out)
        reencoded = False
    else:
        _reencode(clips, first, out, fps)
        reencoded = True
    want = sum(c.count for c in clips)
    with open(out, "rb") as f:  # the container's own count (its sample table): no demuxing
        got = probe(f, out, packets=False).frames
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
            runs[-1] = (Clip(last.open, last.name, last.start, last.count + clip.count), info)
            placed.append(Placed(len(runs) - 1, clip.start - last.start))
        else:
            runs.append((clip, info))
            placed.append(Placed(len(runs) - 1, 0))
    widened = []
    for r, (run, info) in enumerate(runs):
        lo, hi = _widened(run, info)
        widened.append((Clip(run.open, run.name, lo, hi - lo), info))
        shift = run.start - lo
        placed = [Placed(p.run, p.lead + shift) if p.run == r else p for p in placed]
    return widened, placed


def _widened(clip: Clip, info: VideoInfo) -> tuple[int, int]:
    """The frames ``[lo, hi)`` of the smallest whole-GOP cut that holds the clip."""
    end = clip.start + clip.count
    if info.leading or not info.keyframes:
        return 0, info.frames
    lo = max((k for k in info.keyframes if k <= clip.start), default=0)
    hi = min((k for k in info.keyframes if k >= end), default=info.frames)
    return lo, hi


def whole_gops(clip: Clip, info: VideoInfo) -> bool:
    """Whether the clip is a cut that remuxes as it is (see the module docstring)."""
    end = clip.start + clip.count
    if info.leading and (clip.start, end) != (0, info.frames):
        return False  # a leading frame may refer across the cut
    return clip.start in info.keyframes and (end == info.frames or end in info.keyframes)


_Demuxed = tuple[str, list[tuple[bytes, int, "int | None", bool, "int | None"]], list[int], Any, int, np.ndarray]


def _remux(clips: Sequence[Clip], out: str) -> None:
    """Copy the clips' packets into one file, shifting each clip's times to follow the last. Each
    source file is demuxed once for a run of clips from it (not once per clip: a v3.0 export
    takes many episodes' clips from one file)."""
    av = import_av()
    with av.open(out, "w", format="mp4") as dst:
        ostream = None
        offset = 0  # in the output's time base (set from the first input; all inputs share it)
        demuxed: _Demuxed | None = None
        for clip in clips:
            if demuxed is None or demuxed[0] != clip.name:
                demuxed = _demux(av, clip)
            _, packets, pts_sorted, time_base, step, _ = demuxed
            if ostream is None:
                with clip.open() as f, av.open(f, "r") as src:
                    ostream = dst.add_stream_from_template(src.streams.video[0], opaque=True)
            if clip.start + clip.count > len(pts_sorted):
                raise DecodeError(
                    f"frames {clip.start}..{clip.start + clip.count} asked of a video of {len(pts_sorted)}",
                    path=clip.name,
                )
            lo = pts_sorted[clip.start]
            end = clip.start + clip.count
            hi = pts_sorted[end] if end < len(pts_sorted) else None
            shift = offset - lo
            all_pts = demuxed[5]
            chosen = np.flatnonzero((all_pts >= lo) & (all_pts < hi if hi is not None else True))
            for j in chosen.tolist():
                data, pts, dts, key, duration = packets[j]
                p = av.Packet(data)
                p.pts = pts + shift
                p.dts = None if dts is None else dts + shift
                p.is_keyframe = key
                if duration:
                    p.duration = duration
                p.time_base = time_base
                p.stream = ostream
                dst.mux(p)
            offset += _span(pts_sorted, clip.start, end, step)


def _demux(av: Any, clip: Clip) -> _Demuxed:
    """(name, packets as (bytes, pts, dts, keyframe, duration), the sorted pts, the time base, one
    frame's duration, the packets' pts as an array) of a clip's file."""
    with clip.open() as f, av.open(f, "r") as src:
        s = src.streams.video[0]
        packets = [
            (bytes(p), p.pts, p.dts, p.is_keyframe, p.duration) for p in src.demux(s) if p.size and p.pts is not None
        ]
        pts_sorted = sorted(p[1] for p in packets)
        pts = np.array([p[1] for p in packets], np.int64)
        return clip.name, packets, pts_sorted, s.time_base, _frame_step(pts_sorted), pts


def _frame_step(pts_sorted: Sequence[int]) -> int:
    return min((b - a for a, b in zip(pts_sorted, pts_sorted[1:], strict=False) if b > a), default=1)


def _span(pts_sorted: Sequence[int], start: int, end: int, step: int) -> int:
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

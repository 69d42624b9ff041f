"""mp4 files cut and joined without re-encoding where the group of pictures allows.

LeRobot v2.1 keeps one mp4 per episode and camera, v3.0 concatenates episodes into larger files;
converting between them either joins files or cuts one file at episode boundaries. Both are
remuxes (packets copied, timestamps shifted) when they can be:

- **join**: every input has the same codec, size, pixel format and decoder configuration
  (``extradata``: H.264's SPS/PPS, AV1's sequence header), so one decoder reads them all;
- **cut**: the clip starts on a keyframe and ends where the file ends or the next keyframe starts,
  so no frame inside it refers to one outside.

Otherwise the frames are decoded and encoded again with the source's codec (``libx264`` for H.264,
``libsvtav1`` for AV1, ``libx265`` for HEVC) and the result says so (``reencoded``). Every output is
checked by counting its frames.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any

from ..errors import DecodeError
from .video import import_av, scheduling_kept

__all__ = ["Clip", "VideoInfo", "probe", "write_clips", "ENCODERS"]

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
    cuttable = all(_whole_gops(c, i) for c, i in zip(clips, infos, strict=True))
    if same and cuttable:
        _remux(clips, out)
        reencoded = False
    else:
        _reencode(clips, first, out, fps)
        reencoded = True
    want = sum(c.count for c in clips)
    with open(out, "rb") as f:
        got = probe(f, out).frames
    if got != want:
        raise DecodeError(f"wrote {got} frames where the clips have {want}", path=out)
    return reencoded


def _whole_gops(clip: Clip, info: VideoInfo) -> bool:
    end = clip.start + clip.count
    if info.leading and (clip.start, end) != (0, info.frames):
        return False  # a leading frame may refer across the cut
    return clip.start in info.keyframes and (end == info.frames or end in info.keyframes)


def _remux(clips: Sequence[Clip], out: str) -> None:
    """Copy the clips' packets into one file, shifting each clip's times to follow the last."""
    av = import_av()
    with av.open(out, "w", format="mp4") as dst:
        ostream = None
        offset = 0  # in the output's time base (set from the first input; all inputs share it)
        for clip in clips:
            with clip.open() as f, av.open(f, "r") as src:
                s = src.streams.video[0]
                if ostream is None:
                    ostream = dst.add_stream_from_template(s, opaque=True)
                packets = [p for p in src.demux(s) if p.size and p.pts is not None]
                pts_sorted = sorted(p.pts for p in packets)
                if clip.start + clip.count > len(pts_sorted):
                    raise DecodeError(
                        f"frames {clip.start}..{clip.start + clip.count} asked of a video of {len(pts_sorted)}",
                        path=clip.name,
                    )
                lo = pts_sorted[clip.start]
                end = clip.start + clip.count
                hi = pts_sorted[end] if end < len(pts_sorted) else None
                step = _frame_step(pts_sorted)
                shift = offset - lo
                for p in packets:
                    if p.pts < lo or (hi is not None and p.pts >= hi):
                        continue
                    p.pts += shift
                    if p.dts is not None:
                        p.dts += shift
                    p.stream = ostream
                    dst.mux(p)
                offset += _span(pts_sorted, clip.start, end, step)


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

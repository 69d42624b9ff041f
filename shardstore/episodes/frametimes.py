"""When each frame of a video is shown, read from its packets (nothing decoded): what a check needs
to say whether a video holds exactly the frames its episodes claim.

Per packet its presentation time, byte offset and size (from a plain mp4's sample tables,
``mp4index``, exactly as a demux gives them; any other file demuxed); the frames are
the packets' times sorted (every packet of a video stream is one frame). A packet that lies past the
file's end (a file cut short after its header) or that the demuxer flags corrupt is counted, since a
decoder would fail there; the demuxer stops at the first packet cut short, so frames after it are
missing from ``times``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any

import numpy as np

from ..errors import DecodeError
from .mp4index import sample_table
from .video import import_av

__all__ = ["FrameTimes", "frame_times"]


@dataclass(frozen=True, slots=True, eq=False)
class FrameTimes:
    """A video stream's header facts and its frames' times in seconds, in presentation order."""

    codec: str  # the codec's short name (av1, h264, hevc), not the decoder's (libdav1d)
    width: int
    height: int
    pix_fmt: str
    fps: float  # the stream's average rate
    time_base: Fraction
    times: np.ndarray  # float64 seconds, sorted
    keys: np.ndarray  # bool per frame of ``times``: a keyframe
    decoded: np.ndarray  # int per frame of ``times``: its place in decode order
    broken: int  # packets past the file's end or flagged corrupt
    first_broken: float | None  # the time of the first of them
    has_audio: bool

    @property
    def frames(self) -> int:
        return len(self.times)


def frame_times(open_file: Callable[[], IO[bytes]], name: str, size: int) -> FrameTimes:
    """The ``FrameTimes`` of the first video stream of the file ``open_file()`` gives (``size``
    bytes long); ``DecodeError`` naming ``name`` when it does not open or has no video stream.

    A plain mp4's packets come from its sample tables (``mp4index``: one read, no packet objects),
    the same packets a demux gives; any other file is demuxed."""
    av = import_av()
    try:  # FFmpeg's own log lines of a broken file are swallowed: the result counts what they say
        with av.logging.Capture(), open_file() as f:
            table = sample_table(f, size, name)
            f.seek(0)
            with av.open(f, "r") as c:
                if not c.streams.video:
                    raise DecodeError("no video stream", path=name)
                s = c.streams.video[0]
                tb = Fraction(s.time_base) if s.time_base else Fraction(1, 1)
                if table is not None and tb == Fraction(1, table.timescale):
                    rows = np.stack([table.pts, table.offsets, table.sizes, np.zeros_like(table.pts), table.keys], 1)
                    rows = rows[table.sizes > 0]
                else:
                    rows = np.array(  # pts, byte offset (-1: unknown), size, corrupt flag, keyframe flag
                        [
                            (p.pts, -1 if p.pos is None else p.pos, p.size, p.is_corrupt, p.is_keyframe)
                            for p in c.demux(s) if p.size and p.pts is not None
                        ],
                        np.int64,
                    ).reshape(-1, 5)
                return _frame_times(c, s, tb, rows, size)
    except (av.error.FFmpegError, ValueError, IndexError) as e:
        if isinstance(e, DecodeError):
            raise
        raise DecodeError(f"cannot read the video: {e}", path=name) from e


def _frame_times(c: Any, s: Any, tb: Fraction, rows: np.ndarray, size: int) -> FrameTimes:
    """``FrameTimes`` from the packets' rows (pts, byte offset or -1, size, corrupt, keyframe) in
    decode order, and the container ``c``'s video stream ``s`` for the header facts."""
    cc = s.codec_context
    pts = rows[:, 0]
    bad = ((rows[:, 1] >= 0) & (rows[:, 1] + rows[:, 2] > size)) | (rows[:, 3] != 0)
    broken = pts[bad]
    order = np.argsort(pts, kind="stable")
    return FrameTimes(
        codec={"libdav1d": "av1", "libaom-av1": "av1"}.get(cc.name, cc.name),
        width=cc.width,
        height=cc.height,
        pix_fmt=cc.pix_fmt or "",
        fps=float(s.average_rate or s.guessed_rate or 0),
        time_base=tb,
        times=pts[order].astype(np.float64) * float(tb),
        keys=(rows[:, 4] != 0)[order],
        decoded=order,
        broken=len(broken),
        first_broken=float(broken.min()) * float(tb) if len(broken) else None,
        has_audio=bool(c.streams.audio),
    )

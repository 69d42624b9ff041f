"""An mp4's packets from its sample tables (``episodes.mp4index``) against PyAV's demux of the same file.

Files are written with PyAV (H.264 with and without B-frames, AV1, HEVC, the moov before or after
the packets); ``frame_times`` is run twice, through the tables and with them turned off (the demux),
and every field of the two ``FrameTimes`` must agree, also for files cut short. Files the tables
do not read exactly (Matroska, fragmented mp4) must fall back to the demux; hostile tables must
give a one-line ``DecodeError`` under 1 GB of address space.
"""

from __future__ import annotations

import json
import resource
import struct
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")

from shardstore.episodes import frametimes  # noqa: E402
from shardstore.episodes.frametimes import FrameTimes, frame_times  # noqa: E402
from shardstore.episodes.mp4index import sample_table  # noqa: E402
from shardstore.episodes.video import scheduling_kept  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FRAMES = 40


def write(
    path: Path, codec: str, options: dict[str, str], container: dict[str, str] | None = None, audio: bool = False
) -> Path:
    with scheduling_kept(), av.open(str(path), "w", options=container or {}) as c:
        s = c.add_stream(codec, rate=Fraction(10))
        s.width = s.height = 32
        s.pix_fmt = "yuv420p"
        s.options = options
        a = c.add_stream("aac", rate=8000) if audio else None
        noise = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
        for i in range(FRAMES):  # a picture moving sideways: what x264 predicts with B-frames
            for p in s.encode(av.VideoFrame.from_ndarray(np.roll(noise, i, 1), format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
        if a is not None:  # a second track
            tone = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            tone.sample_rate, tone.pts, tone.time_base = 8000, 0, Fraction(1, 8000)
            for p in [*a.encode(tone), *a.encode()]:
                c.mux(p)
    return path


def times(path: Path, size: int | None = None) -> FrameTimes:
    size = path.stat().st_size if size is None else size
    return frame_times(lambda: open(path, "rb"), str(path), size)


def demuxed(path: Path, monkeypatch: pytest.MonkeyPatch, size: int | None = None) -> FrameTimes:
    with monkeypatch.context() as m:
        m.setattr(frametimes, "sample_table", lambda *a: None)
        return times(path, size)


def tables(path: Path, size: int) -> bool:
    with open(path, "rb") as f:
        return sample_table(f, size, str(path)) is not None


def assert_same(a: FrameTimes, b: FrameTimes) -> None:
    for field in FrameTimes.__dataclass_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), field
        else:
            assert x == y, (field, x, y)


KINDS = {
    "h264": ("libx264", {"g": "2", "bf": "0"}, {}),
    "h264_bframes": ("libx264", {"x264-params": "keyint=12:bframes=2:b-adapt=0:scenecut=0"}, {}),
    "h264_faststart": ("libx264", {"g": "4"}, {"movflags": "faststart"}),
    "av1": ("libsvtav1", {"g": "2"}, {}),
    "av1_faststart": ("libsvtav1", {"g": "2"}, {"movflags": "faststart"}),
    "hevc": ("libx265", {"g": "4"}, {}),  # a codec LeRobot's encoder offers too
}


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("mp4index")
    out = {}
    for kind, (codec, opts, cont) in KINDS.items():
        if codec not in av.codecs_available:
            continue
        out[kind] = write(d / f"{kind}.mp4", codec, opts, cont)
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_tables_give_the_demuxed_frame_times(videos: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind not in videos:
        pytest.skip(f"{KINDS[kind][0]} is not in this PyAV")
    path = videos[kind]
    assert tables(path, path.stat().st_size)
    ft = times(path)
    assert ft.frames == FRAMES and ft.broken == 0
    assert_same(ft, demuxed(path, monkeypatch))
    if kind == "h264_bframes":  # decode order differs from presentation order: the ctts and edit list were read
        assert not np.array_equal(ft.decoded, np.arange(FRAMES))


@pytest.mark.parametrize("kind", ["h264_faststart", "av1_faststart"])
def test_a_file_cut_short_breaks_where_the_demux_does(
    videos: dict[str, Path], kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind not in videos:
        pytest.skip(f"{KINDS[kind][0]} is not in this PyAV")
    data = videos[kind].read_bytes()
    with open(videos[kind], "rb") as f:
        table = sample_table(f, len(data), "")
    assert table is not None
    ends = table.offsets + table.sizes
    for cut in (int(ends[FRAMES // 2]), int(ends[-2])):  # at a packet's end: read from the tables
        path = tmp_path / f"cut{cut}.mp4"
        path.write_bytes(data[:cut])
        assert tables(path, cut)
        ft = times(path)
        assert ft.broken == 0 and ft.frames < FRAMES, (cut, ft.broken, ft.frames)
        assert_same(ft, demuxed(path, monkeypatch))
    for cut in (len(data) // 2, len(data) - 7):  # inside a packet: demuxed, one broken packet
        path = tmp_path / f"cut{cut}.mp4"
        path.write_bytes(data[:cut])
        assert not tables(path, cut)
        ft = times(path)
        assert ft.broken == 1 and ft.frames <= FRAMES, (cut, ft.broken, ft.frames)


def test_other_files_are_demuxed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matroska, a fragmented mp4 and one with an audio track are not read from tables; the result
    is the demux's."""
    mkv = write(tmp_path / "a.mkv", "libx264", {"g": "2"})
    frag = write(tmp_path / "frag.mp4", "libx264", {"g": "2"}, {"movflags": "frag_keyframe+empty_moov"})
    sound = write(tmp_path / "sound.mp4", "libx264", {"g": "2"}, audio=True)
    for path in (mkv, frag, sound):
        assert not tables(path, path.stat().st_size)
        ft = times(path)
        assert ft.frames == FRAMES and ft.has_audio == (path == sound)
        assert_same(ft, demuxed(path, monkeypatch))


def _patched(data: bytes, box: bytes, at: int, value: int, fmt: str = ">I") -> bytes:
    """``data`` with ``value`` written ``at`` bytes after the type of the first ``box`` box."""
    i = data.index(box) + 4 + at
    return data[:i] + struct.pack(fmt, value) + data[i + struct.calcsize(fmt):]


_HOSTILE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from shardstore.episodes.frametimes import frame_times
from shardstore.errors import DecodeError
out = {}
for path in sys.argv[1:]:
    size = len(open(path, "rb").read())
    try:
        ft = frame_times(lambda: open(path, "rb"), path, size)
        out[path] = f"read: {ft.frames} frames"
    except DecodeError as e:
        out[path] = str(e)
print(json.dumps(out))
"""


def test_hostile_tables_give_a_decode_error_in_bounded_memory(videos: dict[str, Path], tmp_path: Path) -> None:
    data = videos["h264_faststart"].read_bytes()
    assert data.index(b"moov") < data.index(b"mdat")  # the patches below land in the moov
    hostile = {  # name: (bytes, what the error says)
        "stsz_count_lies": (_patched(data, b"stsz", 8, 1 << 30), "entries in"),
        "stts_count_huge": (_patched(data, b"stts", 8, 0xFFFFFFFF), "stts counts"),
        "stsc_per_chunk_huge": (_patched(data, b"stsc", 12, 0xFFFFFFFF), "stsc"),
        "stss_past_the_samples": (_patched(data, b"stss", 8, 10**6), "sync sample"),
        "trak_box_too_big": (_patched(data, b"trak", -8, 1 << 31), "does not fit"),
    }
    paths = []
    for name, (bad, _) in hostile.items():
        (tmp_path / f"{name}.mp4").write_bytes(bad)
        paths.append(str(tmp_path / f"{name}.mp4"))
    # one size for every sample and a sample count of 2**32 - 1: left to the demuxer, which must
    # refuse or read it within the limit too
    huge = _patched(_patched(data, b"stsz", 4, 1000), b"stsz", 8, 0xFFFFFFFF)
    (tmp_path / "stsz_constant_huge.mp4").write_bytes(huge)
    paths.append(str(tmp_path / "stsz_constant_huge.mp4"))
    res = subprocess.run(
        [sys.executable, "-c", _HOSTILE, *paths], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    for name, (_, said) in hostile.items():
        message = out[str(tmp_path / f"{name}.mp4")]
        assert message.startswith(str(tmp_path / f"{name}.mp4")) and said in message, (name, message)
        assert "\n" not in message
    assert out[str(tmp_path / "stsz_constant_huge.mp4")]  # an answer, not a MemoryError


"""The remux of indexed clips written without PyAV (``episodes/mp4write.py``) against FFmpeg's muxer
through PyAV (``mp4._remux``) on the same clips: the same packets (times, keyframe flags, bytes), the
same stream (time base, frame count, duration) and the same decoded frames, read back by PyAV's
demuxer; H.264 with a decode delay, AV1, H.264 with B-frames (frames reordered), cuts and joins.
And the start-up discipline that keeps ``shardstore edit`` and ``export lerobot`` cheap: which
heavy modules each command imports (a subprocess, as the command runs).

Sources: tools/make_lerobot.py (32x32, a keyframe every 4 frames) and PyAV's libx264 with B-frames.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

av = pytest.importorskip("av")
pytest.importorskip("pyarrow")

from shardstore.convert.lerobot import import_lerobot  # noqa: E402
from shardstore.episodes import mp4  # noqa: E402
from shardstore.episodes.mp4index import sample_table  # noqa: E402
from shardstore.episodes.packets import PacketSource, index_packets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import make_lerobot  # noqa: E402
from test_video_packets import bframe_h264  # noqa: E402

FRONT, WRIST = "observation.images.front", "observation.images.wrist"  # h264, av1


@pytest.fixture(scope="module")
def v30(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 episodes x 12 frames, 3 per file: two files per camera."""
    root = tmp_path_factory.mktemp("mp4write")
    return Path(make_lerobot(str(root / "v30"), version="v3.0", episodes=6, frames=12, episodes_per_file=3,
                             image=False))


def clip(path: Path, start: int, count: int) -> mp4.Clip:
    """Frames ``start .. start + count`` of the file, with its packet index (as a store's)."""
    index = index_packets(lambda: open(path, "rb"), str(path))  # noqa: SIM115
    assert index is not None

    def read(offset: int, size: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    return mp4.Clip(lambda: open(path, "rb"), str(path), start, count, PacketSource(index, read))  # noqa: SIM115


def demuxed(path: Path) -> tuple[tuple[Any, ...], list[tuple[Any, ...]], list[tuple[int, str]]]:
    """The stream's numbers, every packet (pts, dts, keyframe, bytes) and every frame (pts, digest)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        meta = (s.time_base, s.frames, s.duration, s.start_time, s.codec_context.name, s.average_rate, c.duration)
        packets = [(p.pts, p.dts, p.is_keyframe, bytes(p)) for p in c.demux(s) if p.size]
    with av.open(str(path)) as c:
        frames = [(f.pts, hashlib.sha256(f.to_ndarray(format="rgb24").tobytes()).hexdigest()) for f in c.decode(video=0)]
    return meta, packets, frames


def cases(v30: Path, tmp: Path) -> dict[str, list[mp4.Clip]]:
    front0 = v30 / f"videos/{FRONT}/chunk-000/file-000.mp4"
    front1 = v30 / f"videos/{FRONT}/chunk-000/file-001.mp4"
    wrist0 = v30 / f"videos/{WRIST}/chunk-000/file-000.mp4"
    reordered = tmp / "bframes.mp4"
    bframe_h264(reordered, 0, 14)  # shown in another order than decoded, closed GOPs of 4
    return {
        "h264 cut and joined": [clip(front0, 0, 12), clip(front0, 24, 12), clip(front1, 8, 16)],
        "av1 cut": [clip(wrist0, 4, 20), clip(wrist0, 32, 4)],
        "h264 b-frames": [clip(reordered, 0, 4), clip(reordered, 8, 6)],
    }


def test_indexed_write_equals_ffmpegs_remux(v30: Path, tmp_path: Path) -> None:
    for name, clips in cases(v30, tmp_path).items():
        infos = [mp4.indexed_info(c.packets.index) for c in clips if c.packets is not None]
        assert all(mp4.whole_gops(c, i) for c, i in zip(clips, infos, strict=True)), name
        ours, ffmpeg = tmp_path / f"{name}-ours.mp4", tmp_path / f"{name}-ffmpeg.mp4"
        assert mp4._write_indexed(clips, str(ours)), name
        mp4._remux(clips, str(ffmpeg))
        a, b = demuxed(ours), demuxed(ffmpeg)
        assert a == b, name  # stream numbers, packets and frames
        assert len(a[2]) == sum(c.count for c in clips), name
        if name == "h264 b-frames":
            assert any(p[0] != p[1] for p in a[1]), "no decode delay: the case tests nothing"
            assert [p[0] for p in a[1]] != sorted(p[0] for p in a[1]), "frames not reordered"
        with open(ours, "rb") as f:  # the project's own reader of the tables agrees
            table = sample_table(f, ours.stat().st_size, str(ours))
        assert table is not None and table.pts.tolist() == [p[0] for p in a[1]]
        assert table.keys.tolist() == [p[2] for p in a[1]]


def test_sources_with_other_sample_descriptions_are_left_to_ffmpeg(v30: Path, tmp_path: Path) -> None:
    """An H.264 clip joined to an AV1 one: two sample descriptions, nothing written (the caller
    re-encodes such a join; write_clips never asks this writer)."""
    front = v30 / f"videos/{FRONT}/chunk-000/file-000.mp4"
    wrist = v30 / f"videos/{WRIST}/chunk-000/file-000.mp4"
    out = tmp_path / "mixed.mp4"
    assert not mp4._write_indexed([clip(front, 0, 12), clip(wrist, 0, 12)], str(out))
    assert not out.exists()


HEAVY = ("pyarrow", "pyarrow.compute", "numpy.ma", "av", "torch", "fsspec", "s3fs", "dask", "sqlite_utils")
SPY = """
import sys
from shardstore.cli import main
try:
    main(sys.argv[1:], prog_name="shardstore")
except SystemExit as e:
    if e.code:
        raise
print("imported:", *(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def imported_by(*args: str) -> set[str]:
    """The heavy modules a ``shardstore`` command has imported when it ends."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", SPY.format(heavy=HEAVY), *args], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return set(res.stderr.splitlines()[-1].split()[1:])


def test_commands_import_only_what_they_use(v30: Path, tmp_path: Path) -> None:
    """``--help`` and an edit import none of the heavy libraries; an export of a cut to LeRobot
    imports pyarrow (its parquet files) but neither PyAV (no frame decoded or muxed) nor
    pyarrow.compute nor numpy.ma (which ``pa.array`` and ``np.unique`` of numpy arrays import);
    the export's videos hold the clips' frames."""
    store = tmp_path / "store"
    import_lerobot(str(v30), str(store))
    assert imported_by("--help") == set()
    assert imported_by("edit", "delete-episodes", str(store), str(tmp_path / "d"), "--episodes", "1,3-4", "-q") == set()
    assert imported_by("export", "lerobot", str(tmp_path / "d"), str(tmp_path / "lr"), "-q") == {"pyarrow"}
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert info["total_frames"] == 3 * 12
    for cam in (FRONT, WRIST):
        frames = demuxed(tmp_path / "lr" / info["video_path"].format(video_key=cam, chunk_index=0, file_index=0))[2]
        assert len(frames) >= 3 * 12 and len({f[0] for f in frames}) == len(frames)

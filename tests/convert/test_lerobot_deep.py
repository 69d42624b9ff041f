"""``check lerobot --deep``: each fault users publish, seeded into a dataset LeRobot's own recorder
wrote (lerobot 0.6.1 in ``.venv-lerobot``; ``SHARDSTORE_LEROBOT_VENV`` names another), is caught
with its file, episode, frame or field; the clean dataset passes with no error and no warning.
Skips when that venv is missing, except in CI, where it fails. v2.1 (which LeRobot 0.6 no longer
writes) uses tools/make_lerobot.py's layout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ci import in_ci

from shardstore.convert.lerobot.deep import check_deep
from shardstore.episodes.problems import Problem

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import make_lerobot  # noqa: E402

LEROBOT_PYTHON = Path(os.environ.get("SHARDSTORE_LEROBOT_VENV", ROOT / ".venv-lerobot")) / "bin" / "python"
DATA = "data/chunk-000/file-000.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
CAM = "observation.images.front"
VIDEO = f"videos/{CAM}/chunk-000/file-000.mp4"


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes x 20 frames at 10 fps, written by LeRobot 0.6.1's recorder."""
    if not LEROBOT_PYTHON.exists():
        why = f"no LeRobot venv at {LEROBOT_PYTHON}"
        if in_ci():
            pytest.fail(why + "; CI must run the LeRobot writer tests")
        pytest.skip(why)
    out = tmp_path_factory.mktemp("lerobot") / "clean"
    subprocess.run(
        [str(LEROBOT_PYTHON), str(ROOT / "tests/convert/lerobot_own_writer.py"), str(out), "3", "20"],
        check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    return out


def _edit_table(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a parquet file with ``edit`` applied to its columns as Python lists."""
    table = pq.read_table(path)
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    edit(cols)
    new = pa.table({k: pa.array(v, type=table.schema.field(k).type) for k, v in cols.items()})
    pq.write_table(new.replace_schema_metadata(table.schema.metadata), path)


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj, indent=4))


def _rows_of(ep: int) -> slice:
    return slice(20 * ep, 20 * ep + 20)


def _set(col: str, ep: int, frame: int, value: Any) -> Callable[[Path], None]:
    def seed(ds: Path) -> None:
        def edit(cols: dict[str, Any]) -> None:
            cols[col][20 * ep + frame] = value

        _edit_table(ds / DATA, edit)

    return seed


def _timestamp_jump(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        for i in range(25, 40):
            cols["timestamp"][i] += 0.5

    _edit_table(ds / DATA, edit)


def _index_gap(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols["index"][40:] = [i + 1 for i in cols["index"][40:]]

    _edit_table(ds / DATA, edit)


def _stats_json_mean(ds: Path) -> None:
    _edit_json(ds / "meta/stats.json", lambda s: s["action"]["mean"].__setitem__(0, s["action"]["mean"][0] + 0.5))


def _stats_json_quantile(ds: Path) -> None:
    _edit_json(ds / "meta/stats.json", lambda s: s["observation.state"]["q99"].__setitem__(2, 9.0))


def _episode_stats(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols["stats/observation.state/std"][1] = [v * 2 for v in cols["stats/observation.state/std"][1]]

    _edit_table(ds / EPISODES, edit)


def _info(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda ds: _edit_json(ds / "meta/info.json", edit)


def _cut_video(ds: Path) -> None:
    path = ds / VIDEO
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _overlap(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols[f"videos/{CAM}/from_timestamp"][2] -= 0.5

    _edit_table(ds / EPISODES, edit)


def _appended_take(ds: Path) -> None:
    """Episode 1's camera holds 5 more frames (a discarded take) before episode 2 starts: the file
    is re-encoded with them and the later episode's time range moved, as a careless merge does."""
    import av

    path = ds / VIDEO
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    frames = frames[:40] + [np.zeros_like(frames[0])] * 5 + frames[40:]
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=Fraction(10))
        s.width, s.height, s.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for i, img in enumerate(frames):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    _edit_json(ds / "meta/info.json", lambda i: i["features"][CAM]["info"].__setitem__("video.codec", "h264"))

    def edit(cols: dict[str, Any]) -> None:
        for key in ("from_timestamp", "to_timestamp"):
            cols[f"videos/{CAM}/{key}"][2] += 0.5

    _edit_table(ds / EPISODES, edit)


#: fault -> (seed it, the check that must catch it, where: field / episode / frame it must name)
FAULTS: dict[str, tuple[Callable[[Path], None], str, dict[str, Any]]] = {
    "nan_action": (_set("action", 1, 5, [float("nan")] * 6), "finite", {"field": "action", "episode": 1, "frame": 5}),
    "inf_state": (_set("observation.state", 2, 0, [float("inf")] * 6), "finite", {"field": "observation.state", "episode": 2}),
    "timestamp_jump": (_timestamp_jump, "timestamps", {"episode": 1, "frame": 5}),
    "repeated_frame_index": (_set("frame_index", 0, 3, 2), "rows", {"field": "frame_index", "episode": 0, "frame": 3}),
    "task_index_names_no_task": (_set("task_index", 2, 7, 5), "tasks", {"field": "task_index", "episode": 2, "frame": 7}),
    "task_index_other_task": (_set("task_index", 0, 0, 1), "tasks", {"field": "task_index", "episode": 0}),
    "global_index_gap": (_index_gap, "rows", {"field": "index", "episode": 2, "frame": 0}),
    "episode_index_wrong": (_set("episode_index", 1, 4, 0), "rows", {"field": "episode_index", "episode": 1, "frame": 4}),
    "stats_json_mean": (_stats_json_mean, "stats", {"field": "action"}),
    "stats_json_quantile": (_stats_json_quantile, "stats", {"field": "observation.state"}),
    "episode_stats_std": (_episode_stats, "stats", {"field": "observation.state", "episode": 1}),
    "total_frames_lies": (_info(lambda i: i.__setitem__("total_frames", 61)), "info", {"field": "total_frames"}),
    "total_episodes_lies": (_info(lambda i: i.__setitem__("total_episodes", 4)), "info", {"field": "total_episodes"}),
    "shape_lies": (_info(lambda i: i["features"]["action"].__setitem__("shape", [7])), "features", {"field": "action"}),
    "dtype_lies": (_info(lambda i: i["features"]["action"].__setitem__("dtype", "float64")), "features", {"field": "action"}),
    "names_lie": (_info(lambda i: i["features"]["action"]["names"].append("j6")), "features", {"field": "action"}),
    "resolution_lies": (_info(lambda i: i["features"][CAM]["info"].__setitem__("video.height", 64)), "video", {"field": "video.height"}),
    "codec_lies": (_info(lambda i: i["features"][CAM]["info"].__setitem__("video.codec", "h264")), "video", {"field": "video.codec"}),
    "pix_fmt_lies": (_info(lambda i: i["features"][CAM]["info"].__setitem__("video.pix_fmt", "yuv444p")), "video", {"field": "video.pix_fmt"}),
    "mp4_cut_in_half": (_cut_video, "video", {"camera": CAM}),
    "ranges_overlap": (_overlap, "video_ranges", {"episode": 2, "camera": CAM}),
    "appended_take": (_appended_take, "appended_frames", {"camera": CAM, "frame": 40}),
}


def _deep(ds: Path) -> tuple[list[Problem], Any]:
    report = check_deep(str(ds))
    return report.problems, report


def test_clean_lerobot_dataset_passes_with_no_problem(clean: Path) -> None:
    problems, report = _deep(clean)
    assert problems == [] and report.ok, [str(p) for p in problems]
    assert (report.version, report.episodes, report.frames, report.videos) == ("v3.0", 3, 60, 1)
    for name in ("info", "episodes", "features", "rows", "finite", "stats", "video", "video_ranges", "appended_frames"):
        assert name in report.checks
    assert json.loads(report.to_json())["deep"] is True


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_seeded_fault_is_caught(clean: Path, tmp_path: Path, fault: str) -> None:
    seed, check, where = FAULTS[fault]
    ds = tmp_path / "ds"
    shutil.copytree(clean, ds)
    seed(ds)
    problems, report = _deep(ds)
    assert not report.ok
    hits = [p for p in problems if p.check == check and p.severity == "error"]
    assert any(all(getattr(p, k) == v for k, v in where.items()) for p in hits), [str(p) for p in problems]
    assert all(p.expected for p in hits)  # each says what was expected


def test_stats_are_recomputed_as_lerobot_computes_them(clean: Path) -> None:
    """Pinned against lerobot 0.6.1: our recomputation of an episode's stats (quantiles from its
    histogram included) equals what its writer stored, to the tolerance the check states."""
    from shardstore.convert.lerobot import stats as lstats

    table = pq.read_table(clean / DATA)
    episodes = pq.read_table(clean / EPISODES).to_pylist()
    for ep in (0, 2):
        values = np.stack(table.column("observation.state").to_pylist()[_rows_of(ep)]).astype(np.float32)
        mine = lstats.vector_stats(values)
        said = {s: np.asarray(episodes[ep][f"stats/observation.state/{s}"]) for s in mine}
        assert lstats.compare(said, mine) == []
        assert np.allclose(said["q50"], mine["q50"], atol=1e-6)  # the histogram quantile, not np.quantile's
        assert not np.allclose(said["q50"], np.quantile(values, 0.5, axis=0), atol=1e-6)


def test_no_av1_warning_on_v30_and_one_on_v21(tmp_path: Path) -> None:
    """AV1 is LeRobot v3.0's own default (no warning there); the v2.1 document names H.264."""
    for version in ("v2.1", "v3.0"):
        ds = make_lerobot(str(tmp_path / version), version=version, episodes=2, frames=6)
        report = check_deep(ds)
        codec = [p for p in report.problems if p.check == "codec"]
        assert report.ok, [str(p) for p in report.problems if p.severity == "error"]
        assert (len(codec) > 0) == (version == "v2.1")
        assert all(p.severity == "warning" and "'av1'" in p.message for p in codec)


def test_v21_faults(tmp_path: Path) -> None:
    """v2.1's per-episode files: a timestamp jump, an index gap and a video longer than its rows."""
    ds = Path(make_lerobot(str(tmp_path / "v21"), version="v2.1", episodes=3, frames=[8, 8, 10], image=False))
    data = ds / "data/chunk-000/episode_000001.parquet"

    def edit(cols: dict[str, Any]) -> None:
        cols["timestamp"][3] += 0.25
        cols["index"] = [i + 2 for i in cols["index"]]

    _edit_table(data, edit)
    cam = "observation.images.front"
    shutil.copy(ds / f"videos/chunk-001/{cam}/episode_000002.mp4", ds / f"videos/chunk-000/{cam}/episode_000000.mp4")
    _edit_json(ds / "meta/info.json", lambda i: i.__setitem__("total_frames", 27))
    problems, report = _deep(ds)
    found = {(p.check, p.episode, p.field) for p in problems if p.severity == "error"}
    assert ("timestamps", 1, "timestamp") in found
    assert ("rows", 1, "index") in found
    assert ("info", None, "total_frames") in found
    assert any(p.check == "video" and p.episode == 0 and p.camera == cam for p in problems), [str(p) for p in problems]

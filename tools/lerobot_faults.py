"""Seed the faults users publish into a copy of a LeRobot v3.0 dataset, one at a time: what
``check lerobot --deep`` must catch (tests/convert/test_lerobot_deep.py) and what tools/bench/check.py
compares with lerobot-doctor on. The dataset is the one tests/convert/lerobot_own_writer.py writes
with LeRobot's own recorder (3 episodes x 20 frames at 10 fps, one video camera, one image column).

    python tools/lerobot_faults.py CLEAN OUT FAULT     (FAULT: one of FAULTS, or "list")
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA = "data/chunk-000/file-000.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
CAM = "observation.images.front"
VIDEO = f"videos/{CAM}/chunk-000/file-000.mp4"
#: Frames per episode of the dataset the seeds assume.
FRAMES = 20


def edit_table(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a parquet file with ``edit`` applied to its columns as Python lists."""
    table = pq.read_table(path)
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    edit(cols)
    new = pa.table({k: pa.array(v, type=table.schema.field(k).type) for k, v in cols.items()})
    pq.write_table(new.replace_schema_metadata(table.schema.metadata), path)


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj, indent=4))


def rows_of(ep: int) -> slice:
    return slice(FRAMES * ep, FRAMES * ep + 20)


def _set(col: str, ep: int, frame: int, value: Any) -> Callable[[Path], None]:
    def seed(ds: Path) -> None:
        def edit(cols: dict[str, Any]) -> None:
            cols[col][FRAMES * ep + frame] = value

        edit_table(ds / DATA, edit)

    return seed


def _timestamp_jump(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        for i in range(25, 40):
            cols["timestamp"][i] += 0.5

    edit_table(ds / DATA, edit)


def _index_gap(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols["index"][40:] = [i + 1 for i in cols["index"][40:]]

    edit_table(ds / DATA, edit)


def _stats_json_mean(ds: Path) -> None:
    edit_json(ds / "meta/stats.json", lambda s: s["action"]["mean"].__setitem__(0, s["action"]["mean"][0] + 0.5))


def _stats_json_quantile(ds: Path) -> None:
    edit_json(ds / "meta/stats.json", lambda s: s["observation.state"]["q99"].__setitem__(2, 9.0))


def _episode_stats(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols["stats/observation.state/std"][1] = [v * 2 for v in cols["stats/observation.state/std"][1]]

    edit_table(ds / EPISODES, edit)


def _info(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda ds: edit_json(ds / "meta/info.json", edit)


def _cut_video(ds: Path) -> None:
    path = ds / VIDEO
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _shift_range(episode: int, key: str, seconds: float) -> Callable[[Path], None]:
    """Episode ``episode``'s camera time range with its ``key`` end moved by ``seconds``."""

    def edit(cols: dict[str, Any]) -> None:
        cols[f"videos/{CAM}/{key}"][episode] += seconds

    return lambda ds: edit_table(ds / EPISODES, edit)


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
    edit_json(ds / "meta/info.json", lambda i: i["features"][CAM]["info"].__setitem__("video.codec", "h264"))

    def edit(cols: dict[str, Any]) -> None:
        for key in ("from_timestamp", "to_timestamp"):
            cols[f"videos/{CAM}/{key}"][2] += 0.5

    edit_table(ds / EPISODES, edit)


def _stats_json_garbage(ds: Path) -> None:
    edit_json(ds / "meta/stats.json", lambda s: s["action"].__setitem__("mean", ["abc"] * 6))


def _length_lies(ds: Path) -> None:
    def edit(cols: dict[str, Any]) -> None:
        cols["length"][2] = 10**12

    edit_table(ds / EPISODES, edit)


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
    "ranges_overlap": (_shift_range(2, "from_timestamp", -0.5), "video_ranges", {"episode": 2, "camera": CAM}),
    "appended_take": (_appended_take, "appended_frames", {"camera": CAM, "frame": 40}),
    "fps_lies": (_info(lambda i: i["features"][CAM]["info"].__setitem__("video.fps", 15)), "video", {"field": "video.fps"}),
    "range_shorter_than_rows": (_shift_range(1, "to_timestamp", -0.5), "video", {"episode": 1, "camera": CAM}),
    "range_past_the_file": (_shift_range(2, "to_timestamp", 1.0), "video_ranges", {"episode": 2, "camera": CAM}),
    # hostile metadata: a one-line error, no traceback, nothing allocated by the length it claims
    "stats_json_garbage": (_stats_json_garbage, "stats", {"field": "action"}),
    "length_lies": (_length_lies, "rows", {"episode": 2}),
}


def seeded(clean: str | Path, out: str | Path, fault: str) -> Path:
    """A copy of ``clean`` at ``out`` with ``fault`` seeded into it."""
    shutil.copytree(clean, out)
    FAULTS[fault][0](Path(out))
    return Path(out)


def main() -> None:
    if sys.argv[1:] == ["list"]:
        print("\n".join(FAULTS))
        return
    clean, out, fault = sys.argv[1:4]
    print(seeded(clean, out, fault))


if __name__ == "__main__":
    main()

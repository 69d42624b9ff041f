"""LeRobot -> RLDS from a real LeRobot dataset (written with pyarrow and PyAV by tools/make_lerobot.py,
read by shardstore's LeRobot reader, imported into the store), exported with `export rlds`: video
frames extracted and checked, the mapping's keys and values, the report."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shardstore
from shardstore.convert.lerobot import import_lerobot
from shardstore.convert.rlds import export_rlds, read_rlds

LENGTHS = [5, 4, 6]


def make_source(tmp_path: Path, version: str) -> Path:
    from make_lerobot import make_lerobot  # tools/ is on sys.path (tests/conftest.py)

    src = tmp_path / "lerobot"
    make_lerobot(
        str(src),
        version=version,
        episodes=3,
        frames=LENGTHS,
        size=16,
        cameras={"observation.images.front": "h264"},
    )
    ds = tmp_path / "ds"
    import_lerobot(str(src), str(ds))
    return ds


def decode(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("version", ["v3.0", pytest.param("v2.1", marks=pytest.mark.slow)])
def test_export_of_a_lerobot_import(tmp_path: Path, version: str) -> None:
    ds = make_source(tmp_path, version)
    out = tmp_path / "rlds" / "1.0.0"
    info = export_rlds(str(ds), str(out))
    report = info["report"]
    assert report["source"] == {"format": "lerobot", "version": version}
    assert report["totals"] == {
        "episodes_in": 3,
        "episodes_out": 3,
        "episodes_failed": 0,
        "steps_in": 15,
        "steps_out": 15,
    }
    assert report["validation"]["ok"], report["validation"]["problems"]
    assert report["main_camera"] == "observation.image"  # no observation.images.top: the image feature
    assert {d["key"] for d in report["defaults"]} == {"reward", "discount"}
    view = shardstore.episodes(str(ds))
    got = list(read_rlds(str(out)).episodes)
    assert [len(e.steps["action"]) for e in got] == LENGTHS
    for e, ep in enumerate(got):
        src = view[e]
        meta = ep.metadata["episode_metadata"]
        assert meta["source_dataset_version"] == version and meta["source_episode_index"] == e
        assert json.loads(meta["tasks"]) == src.metadata["tasks"]
        assert meta["file_path"].endswith(".parquet") and (tmp_path / "lerobot" / meta["file_path"]).is_file()
        np.testing.assert_array_equal(ep.steps["observation.state"], src.steps["observation.state"])
        np.testing.assert_array_equal(ep.steps["action"], src.steps["action"])
        assert ep.steps["observation.image"] == src.steps["observation.image"]  # png bytes kept
        assert ep.terminal == bool(np.asarray(src.steps["next.done"]).reshape(-1)[-1])
        assert ep.steps["language_instruction"] == [src.metadata["tasks"][0]] * len(ep.steps["action"])
        for t in range(len(ep.steps["action"])):  # frames: the store's decode of the same video frame
            want = view.step(e, t)["observation.images.front"]
            np.testing.assert_array_equal(decode(ep.steps["observation.image_front"][t]), want)

"""LeRobot -> RLDS per the user's mapping spec (lerobot-to-rlds.md): keys, transformations,
defaults, error handling and the validation report, on a LeRobot-shaped episode stream."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot_shaped import LENGTHS, TASKS, VIDEO_FRAMES, lerobot_stream
from PIL import Image

from shardstore.convert.rlds import read_rlds
from shardstore.convert.rlds.check import check_rlds
from shardstore.convert.rlds.lerobot_mapping import chw_to_hwc, lerobot_to_rlds, write_lerobot_rlds
from shardstore.errors import EpisodeFormatError


def decode(b: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(b)))


def spec_chw_to_hwc(image: np.ndarray) -> np.ndarray:
    """The spec's function, verbatim in effect: transpose CHW -> HWC, clip(x * 255).astype(uint8)."""
    return np.clip(np.transpose(image, (1, 2, 0)) * 255, 0, 255).astype(np.uint8)


def source_episodes(**kw: Any) -> list[Any]:
    return list(lerobot_stream(**kw).episodes)


def test_mapping_values(tmp_path: Path) -> None:
    out = tmp_path / "rlds" / "1.0.0"
    result = write_lerobot_rlds(lerobot_stream(), str(out))
    src = source_episodes()
    stream = read_rlds(str(out))
    names = {f.name: f for f in stream.schema.fields}
    assert set(names) == {
        "observation.image",
        "observation.image_wrist",
        "observation.state",
        "action",
        "reward",
        "discount",
        "language_instruction",
    }
    assert names["observation.image"].shape == (6, 8, 3) and names["observation.state"].shape == (4,)
    got = list(stream.episodes)
    assert len(got) == len(LENGTHS)
    for ep, s in zip(got, src, strict=True):
        n = len(s.steps["action"])
        assert len(ep.steps["action"]) == n
        top = np.nan_to_num(s.steps["observation.images.top"], nan=0.0)
        for t in range(n):
            np.testing.assert_array_equal(decode(ep.steps["observation.image"][t]), spec_chw_to_hwc(top[t]))
        assert ep.steps["observation.image_wrist"] == s.steps["observation.images.wrist"]  # png bytes kept
        state = np.concatenate(
            [s.steps["observation.state"], s.steps["observation.state.gripper"].astype(np.float32)], axis=1
        )
        np.testing.assert_array_equal(ep.steps["observation.state"], np.nan_to_num(state, nan=0.0))
        assert ep.steps["observation.state"].dtype == np.float32
        np.testing.assert_array_equal(ep.steps["action"], s.steps["action"])
        np.testing.assert_array_equal(ep.steps["reward"], s.steps["next.reward"][:, 0])
        np.testing.assert_array_equal(ep.steps["discount"], np.ones(n, np.float32))
        assert ep.terminal == bool(s.steps["next.done"][-1, 0])
        assert ep.steps["language_instruction"] == [TASKS[s.index % 2]] * n
        meta = ep.metadata["episode_metadata"]
        assert meta["episode_id"] == s.index and meta["source_episode_index"] == s.index
        assert meta["source_dataset_version"] == "v2.1"
        assert (
            json.loads(meta["tasks"]) == [TASKS[s.index % 2]]
            and meta["language_instruction"] == TASKS[s.index % 2]
        )
        assert meta["file_path"] == f"data/chunk-000/episode_{s.index:06d}.parquet"
    assert result["validation"]["ok"], result["validation"]["problems"]


def test_report(tmp_path: Path) -> None:
    out = tmp_path / "rlds" / "1.0.0"
    write_lerobot_rlds(lerobot_stream(reward=False), str(out))
    report = json.loads(Path(f"{out}.report.json").read_text())
    text = Path(f"{out}.report.txt").read_text()
    assert report["main_camera"] == "observation.images.top"
    assert {(m["from"], m["to"]) for m in report["mapping"]} >= {
        ("observation.images.top", "observation/image"),
        ("observation.images.wrist", "observation/image_wrist"),
        ("observation.state", "observation/state"),
        ("observation.state.gripper", "observation/state"),
        ("action", "action"),
        ("next.done", "is_terminal"),
    }
    defaults = {d["key"]: d["value"] for d in report["defaults"]}
    assert defaults == {"reward": 0.0, "discount": 1.0}
    assert report["conversions"] == [
        {
            "field": "observation.state.gripper",
            "from": "float64",
            "to": "float32",
            "detail": "safe: every value unchanged",
        }
    ]
    warnings = [(w["episode"], w["field"], w["detail"]) for w in report["warnings"]]
    assert (1, "observation.state", "1 NaN/Inf values replaced by 0.0") in warnings
    assert (1, "observation.images.top", "2 values outside [0, 1] clipped") in warnings
    assert [
        (e["source_episode_index"], e["steps_in"], e["steps_out"], e["status"]) for e in report["episodes"]
    ] == [(i, n, n, "ok") for i, n in enumerate(LENGTHS)]
    assert report["totals"] == {
        "episodes_in": 3,
        "episodes_out": 3,
        "episodes_failed": 0,
        "steps_in": 12,
        "steps_out": 12,
    }
    v = report["validation"]
    assert v["ok"] and v["rules"]["cross.step_counts"] == "pass" and v["rules"]["cross.total_steps"] == "pass"
    assert "reward = 0.0: no next.reward or reward in the source" in text and "RLDS check of" in text
    mapping = Path(f"{out}.mapping.md").read_text()
    assert "| `observation.state.gripper` | float64 | float32 | safe: every value unchanged |" in mapping
    assert "| `observation.images.top` | `observation/image` | CHW float [0,1] -> HWC uint8" in mapping
    # the reward the default gave
    for ep in read_rlds(str(out)).episodes:
        assert not ep.steps["reward"].any()


def test_main_camera_option(tmp_path: Path) -> None:
    stream, report = lerobot_to_rlds(lerobot_stream(), main_camera="observation.images.wrist")
    assert {f.name for f in stream.schema.fields} >= {"observation.image", "observation.image_top"}
    assert report.main_camera == "observation.images.wrist"
    with pytest.raises(EpisodeFormatError, match="main camera 'observation.images.side' is not a camera"):
        lerobot_to_rlds(lerobot_stream(), main_camera="observation.images.side")


def test_video_missing_frames_fail_one_episode(tmp_path: Path) -> None:
    def frames(ep: Any, field: Any, n: int) -> list[np.ndarray]:
        got = VIDEO_FRAMES[ep.index]
        return got[:-1] if ep.index == 1 else got  # episode 1's video is one frame short

    out = tmp_path / "v" / "1.0.0"
    result = write_lerobot_rlds(lerobot_stream(video=True), str(out), frames=frames)
    statuses = [(e["source_episode_index"], e["status"]) for e in result["episodes"]]
    assert statuses == [(0, "ok"), (1, "failed"), (2, "ok")]
    assert (
        result["episodes"][1]["error"]
        == f"observation.images.wrist: expected {LENGTHS[1]} frames, got {LENGTHS[1] - 1}"
    )
    got = list(read_rlds(str(out)).episodes)
    assert [e.metadata["episode_metadata"]["source_episode_index"] for e in got] == [0, 2]
    assert [e.metadata["episode_metadata"]["episode_id"] for e in got] == [0, 1]
    for ep in got:  # frames extracted, encoded lossless
        src = VIDEO_FRAMES[int(ep.metadata["episode_metadata"]["source_episode_index"])]
        for t, b in enumerate(ep.steps["observation.image_wrist"]):
            np.testing.assert_array_equal(decode(b), src[t])
    assert result["validation"]["ok"] and result["totals"]["episodes_failed"] == 1


def test_lossy_conversion_fails(tmp_path: Path) -> None:
    stream = lerobot_stream()
    eps = list(stream.episodes)
    eps[0].steps["observation.state.gripper"] = eps[0].steps["observation.state.gripper"] + 1e-12
    stream.episodes = iter(eps)
    with pytest.raises(
        EpisodeFormatError,
        match=r"episode 0, field 'observation.state.gripper'.*float64 -> float32 would change values",
    ):
        write_lerobot_rlds(stream, str(tmp_path / "x" / "1.0.0"))
    assert not (tmp_path / "x" / "1.0.0").exists()


def test_chw_to_hwc_is_the_spec_function() -> None:
    img = np.random.default_rng(0).random((3, 4, 5), dtype=np.float32) * 1.2 - 0.1
    np.testing.assert_array_equal(chw_to_hwc(img), spec_chw_to_hwc(img))
    with pytest.raises(ValueError, match="Expected 3D array, got 2D"):
        chw_to_hwc(img[0])


def test_check_reports_cross_validation_mismatch(tmp_path: Path) -> None:
    out = tmp_path / "rlds" / "1.0.0"
    write_lerobot_rlds(lerobot_stream(), str(out))
    rp = Path(f"{out}.report.json")
    report = json.loads(rp.read_text())
    report["episodes"][0]["steps_in"] += 1
    rp.write_text(json.dumps(report))
    check = check_rlds(str(out))
    assert not check.ok
    assert check.rules["cross.step_counts"] == "fail" and check.rules["cross.total_steps"] == "fail"
    assert any(
        "episode 0 (source episode 0): 4 steps where the input had 5" in p["detail"] for p in check.problems
    )

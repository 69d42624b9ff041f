"""An edited dataset exported to LeRobot v3.0 loads in the real ``LeRobotDataset`` (lerobot 0.6.1 in
``.venv-lerobot``; ``SHARDSTORE_LEROBOT_VENV`` names another) with the expected episodes, tasks and
frames: the frames LeRobot decodes are the source's, bit for bit; ``check --deep`` finds no error in
it. Skips when that venv is missing, except in CI, where it fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from lerobot_venv import PEERS, run_lerobot

import shardstore
from shardstore.convert.lerobot import export_lerobot, import_lerobot
from shardstore.convert.lerobot.deep import check_deep

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import TASKS, make_lerobot  # noqa: E402

PEER = PEERS / "lerobot_dataset_peer.py"  # lerobot's own loader, items to .npz
CAMERAS = ("observation.images.front", "observation.images.wrist")
LENGTH = 8


def lerobot_load(root: Path, dest: Path, indices: list[int]) -> dict[str, np.ndarray]:
    """LeRobotDataset's items ``indices`` of the dataset at ``root`` (``{i}/{key}``) and its length."""
    spec = json.dumps([{"delta_timestamps": None, "episodes": None, "indices": indices}])
    run_lerobot(PEER, root, dest, spec, timeout=300)
    with np.load(dest) as z:
        return {k.split("/", 1)[1]: z[k] for k in z.files}


def test_lerobot_dataset_reads_an_edited_export(tmp_path: Path) -> None:
    src = make_lerobot(str(tmp_path / "src"), version="v3.0", episodes=5, frames=LENGTH, episodes_per_file=5, gop=3,
                       align_keyframes=False)
    import_lerobot(src, str(tmp_path / "store"))
    shardstore.edit.delete_episodes(str(tmp_path / "store"), str(tmp_path / "d"), episodes="1,3")
    shardstore.edit.set_task(str(tmp_path / "d"), str(tmp_path / "t"), task="wave", episodes="4")  # numbers kept: 0, 2, 4
    report = export_lerobot(str(tmp_path / "t"), str(tmp_path / "lr"))
    assert report.reencoded == []
    deep = check_deep(str(tmp_path / "lr"))  # the exact stats and whole-GOP padding check clean
    assert deep.ok, [str(p) for p in deep.problems if p.severity == "error"]
    got = lerobot_load(tmp_path / "lr", tmp_path / "lr.npz", list(range(3 * LENGTH)))
    assert int(got["len"]) == 3 * LENGTH
    kept = [0, 2, 4]  # source episodes in result order
    want_tasks = [TASKS[0], TASKS[0], "wave"]
    assert [str(got[f"{i}/task"]) for i in range(3 * LENGTH)] == [t for t in want_tasks for _ in range(LENGTH)]
    store = shardstore.episodes(str(tmp_path / "store"))
    for new, old in enumerate(kept):
        ep = store[store.position(old)]
        for cam in CAMERAS:
            frames = store.video.decoder.frames(ep.steps[cam])  # type: ignore[arg-type]
            for i in range(LENGTH):
                item = new * LENGTH + i
                assert int(got[f"{item}/episode_index"]) == new
                lerobot = np.rint(got[f"{item}/{cam}"] * 255).astype(np.uint8).transpose(1, 2, 0)
                assert np.array_equal(lerobot, frames[i]), (new, cam, i)
        np.testing.assert_array_equal(
            np.stack([got[f"{new * LENGTH + i}/action"] for i in range(LENGTH)]), ep.steps["action"]
        )

"""The drop-in ``shardstore.lerobot_dataset.LeRobotDataset`` against lerobot 0.6.1's own
``LeRobotDataset`` (PyAV backend, in ``.venv-lerobot`` or ``SHARDSTORE_LEROBOT_VENV``; see
lerobot_dataset_peer.py) on the same v3.0 source, and the frames its windows and batches decode.

Items must agree key for key: shapes, dtypes and values of every column, ``*_is_pad``, the
indices, and the decoded frames (the same frames through the same RGB conversion: exactly).
Decoded-frame counts come from the decoder's own counter (``FrameDecoder.decoded``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")
torch = pytest.importorskip("torch")

from lerobot_venv import PEERS, run_lerobot  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.lerobot import import_lerobot  # noqa: E402
from shardstore.episodes.view import Episodes  # noqa: E402
from shardstore.lerobot_dataset import LeRobotDataset  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import make_lerobot  # noqa: E402

PEER = PEERS / "lerobot_dataset_peer.py"
CAMERAS = {"observation.images.front": "h264"}
FPS = 10
POLICY = {  # a policy's window: camera and state at t-1 and t, an 8-step action chunk
    "observation.images.front": [-0.1, 0.0],
    "observation.state": [-0.1, 0.0],
    "action": [k / FPS for k in range(8)],
}
SPECS = [
    {"delta_timestamps": None, "episodes": None, "indices": [0, 7, 13, 14, 30, 40]},
    {"delta_timestamps": POLICY, "episodes": None, "indices": [0, 1, 12, 13, 14, 26, 40]},
    {"delta_timestamps": POLICY, "episodes": [2, 0], "indices": [0, 5, 13, 14, 27]},
]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("lerobot_dataset")
    src = Path(make_lerobot(str(tmp / "src"), version="v3.0", episodes=3, frames=[14, 12, 15], cameras=CAMERAS,
                            image=False, fps=FPS, gop=4))
    return src, Path(import_lerobot(str(src), str(tmp / "ds")).out)


def peer_items(src: Path, tmp: Path) -> dict[str, np.ndarray]:
    dest = tmp / "peer.npz"
    run_lerobot(PEER, src, dest, json.dumps(SPECS), timeout=300)
    with np.load(dest) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.slow
def test_items_equal_lerobot_datasets(imported: tuple[Path, Path], tmp_path: Path) -> None:
    src, ds = imported
    theirs = peer_items(src, tmp_path)
    for s, spec in enumerate(SPECS):
        ours = LeRobotDataset(ds, delta_timestamps=spec["delta_timestamps"], episodes=spec["episodes"])
        assert len(ours) == int(theirs[f"{s}/len"])
        for i in spec["indices"]:
            item = ours[i]
            want = {k.split("/", 2)[2]: v for k, v in theirs.items() if k.startswith(f"{s}/{i}/")}
            assert set(item) == set(want), (s, i)
            for key, value in want.items():
                got = item[key]
                if key == "task":
                    if value.dtype.kind == "U":  # a source whose tasks.parquet LeRobot parses
                        assert got == str(value), (s, i)
                    else:  # LeRobot reads make_lerobot's tasks.parquet as task indices (issue 22)
                        assert got == ours.tasks[int(item["task_index"])]
                    continue
                assert got.is_contiguous(), (s, i, key)  # as LeRobot's: collating views costs 2.5-4x
                got = got.numpy()
                assert got.dtype == value.dtype and got.shape == value.shape, (s, i, key)
                np.testing.assert_array_equal(got, value, err_msg=f"spec {s} item {i} {key}")


def test_delta_timestamps_off_the_frame_rate_are_refused(imported: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="multiples of 1/fps"):
        LeRobotDataset(imported[1], delta_timestamps={"action": [0.0, 0.05]})
    with pytest.raises(KeyError):
        LeRobotDataset(imported[1], delta_timestamps={"no.such": [0.0]})


def test_image_transforms_apply_to_cameras(imported: tuple[Path, Path]) -> None:
    plain = LeRobotDataset(imported[1])[3]
    flipped = LeRobotDataset(imported[1], image_transforms=lambda x: x.flip(-1))[3]
    cam = "observation.images.front"
    assert torch.equal(flipped[cam], plain[cam].flip(-1))
    assert torch.equal(flipped["observation.state"], plain["observation.state"])


def decoded(view: Episodes) -> int:
    """Frames (packets) this view's decoder sent to decoding, over all files."""
    dec = view.video.decoder
    return sum(dec.decoded(n) for n in view.video.names)


def fresh(imported: tuple[Path, Path]) -> Episodes:
    return shardstore.episodes(str(imported[1]))


def test_sparse_window_decodes_only_its_frames(imported: tuple[Path, Path]) -> None:
    """Two frames and a 12-step action chunk decode what the two frames read one by one decode,
    fewer than the 13-frame range; the window's frames equal the one-by-one steps'."""
    cam = "observation.images.front"
    t = 5
    view = fresh(imported)
    item = view.sample(0, t, {cam: [-1, 0], "action": list(range(12))})
    sparse = decoded(view)
    one_by_one = fresh(imported)
    steps = [one_by_one.step(0, k)[cam] for k in (t - 1, t)]
    dense = fresh(imported)
    dense.window(0, t, 1, 11)
    assert 0 < sparse <= decoded(one_by_one) < decoded(dense), (sparse, decoded(one_by_one), decoded(dense))
    assert item[cam].shape == (2, 32, 32, 3)
    assert item["action"].shape == (12, 6) and int(item["action_is_pad"].sum()) == 12 - (14 - t)
    for k in range(2):
        np.testing.assert_array_equal(item[cam][k], steps[k])


def test_batch_decodes_together_in_file_order(imported: tuple[Path, Path]) -> None:
    """A batch's frames decode together: one keyframe start per group of pictures touched, no
    more frames than the items one by one; every value equals the one-by-one path's."""
    cam = "observation.images.front"
    steps = [(0, 9), (0, 2), (0, 3), (0, 10), (1, 1), (0, 9)]
    view = fresh(imported)
    batch = view.get_many(steps, {cam: [-1, 0]})
    dec = view.video.decoder
    keyframes: set[tuple[str, int]] = set()
    for e, t in steps:
        for ref in fresh(imported).sample(e, t, {cam: [-1, 0]}, decode=False)[cam]:
            index = view.video.source(ref.file).index  # type: ignore[union-attr]
            keyframes.add((ref.file, index.keyframe_before(index.frames_at([ref.timestamp], ref.file)[0])))
    assert sum(dec.seeks(n) for n in view.video.names) <= len(keyframes)
    alone = 0
    for (e, t), item in zip(steps, batch, strict=True):
        one_view = fresh(imported)
        one = one_view.sample(e, t, {cam: [-1, 0]})
        alone += decoded(one_view)
        assert set(item) == set(one)
        for key in one:
            np.testing.assert_array_equal(item[key], one[key], err_msg=f"{(e, t)} {key}")
    assert decoded(view) < alone


def test_dataloader_batches_equal_items(imported: tuple[Path, Path]) -> None:
    ds = LeRobotDataset(imported[1], delta_timestamps=POLICY)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)
    batch = next(iter(loader))
    for k in range(4):
        item = LeRobotDataset(imported[1], delta_timestamps=POLICY)[k]
        for key, value in item.items():
            if key == "task":
                assert batch[key][k] == value
            else:
                assert torch.equal(batch[key][k], value), key
                assert value.is_contiguous(), key  # cameras as LeRobot's: CHW in memory, not a view


def test_delta_window_decodes_only_the_cameras_asked(imported: tuple[Path, Path]) -> None:
    from shardstore.convert.lerobot import delta_window

    view = fresh(imported)
    got = delta_window(view, 0, 6, {"action": [0.0, 0.1]})
    assert set(got) == {"action", "action_is_pad"} and decoded(view) == 0
    got = delta_window(view, 0, 6, {"observation.images.front": [-0.1, 0.0]})
    assert got["observation.images.front"].shape == (2, 32, 32, 3) and decoded(view) > 0

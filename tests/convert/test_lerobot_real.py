"""LeRobot outputs against the real LeRobot: datasets made with LeRobot's own recorder
(``create``/``add_frame``/``save_episode``/``finalize``: two AV1 cameras, an image feature, state,
action, a reward, three tasks, episodes of 12, 7 and 9 frames), imported and exported by every path,
and each output loaded with ``LeRobotDataset(repo_id, root=OUT)`` (PyAV backend) with a
``delta_timestamps`` window on a camera and the action: every item, decoded frame, ``*_is_pad``,
``task``, the tasks, episodes and stats must equal what LeRobot gives for the original.

lerobot 0.6.1 (v3.0) runs in ``.venv-lerobot`` (``SHARDSTORE_LEROBOT_VENV``), lerobot 0.3.3 (v2.1,
the last release that reads it) in ``.venv-lerobot03`` (``SHARDSTORE_LEROBOT03_VENV``); ``make
lerobot`` installs both. ``lerobot_peer.py`` is what runs there. Skips when a venv is missing,
except in CI, where it fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot_venv import PEERS, run_lerobot

from shardstore.convert.lerobot import check, export_lerobot, import_lerobot, read_lerobot, write_lerobot
from shardstore.convert.lerobot.meta import column_numpy
from shardstore.convert.lerobot.stats import QUANTILES, vector_stats
from shardstore.convert.lerobot.write import WriteOptions
from shardstore.episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from shardstore.errors import LeRobotFormatError

ROOT = Path(__file__).resolve().parents[2]
PEER = PEERS / "lerobot_peer.py"
VERSIONS = ("v3.0", "v2.1")
#: A window on one camera and the action (padded at the episodes' ends); the rest plain.
DELTA = {"observation.images.front": [-0.1, 0.0], "action": [0.0, 0.1, 0.2, 0.3, 0.4]}
BASE = ("min", "max", "mean", "std", "count")

# each LeRobot load starts torch and decodes every frame: ~10 s of CPU, minutes on a loaded machine.
# `make test` runs one path per direction (v3.0 kept, v3.0 -> v2.1, v2.1 -> v3.0 with LeRobot's append,
# shardstore inside LeRobot's venv, the drop-in loader); the other paths are marked slow (`make test-all`).
pytestmark = [pytest.mark.timeout(1800)]


def lerobot_load(version: str, folder: Path) -> dict[str, Any]:
    """Everything LeRobot's loader gives for ``folder`` (see lerobot_peer.py)."""
    dest = folder.with_name(folder.name + ".npz")
    run_lerobot(PEER, "load", folder, dest, json.dumps(DELTA), version=version)
    with np.load(dest) as z:
        out: dict[str, Any] = {k: z[k] for k in z.files if k != "__meta__"}
        out["meta"] = json.loads(str(z["__meta__"]))
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sources, made by LeRobot itself: v3.0 by lerobot 0.6.1, v2.1 by lerobot 0.3.3."""
    root = tmp_path_factory.mktemp("made")
    out = {}
    for version in VERSIONS:
        out[version] = root / version / "src"
        run_lerobot(PEER, "make", out[version], version=version)
    return out


@pytest.fixture(scope="module")
def want(made: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """What LeRobot loads from each source."""
    return {version: lerobot_load(version, src) for version, src in made.items()}


@pytest.fixture(scope="module")
def imported(made: dict[str, Path]) -> dict[str, Path]:
    return {v: Path(import_lerobot(str(src), str(src.parent / "ds")).out) for v, src in made.items()}


def assert_items_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Every item, frame, window and ``*_is_pad`` equal, and each item's task text."""
    assert got["meta"]["len"] == want["meta"]["len"]
    assert got["meta"]["item_tasks"] == want["meta"]["item_tasks"]
    items = sorted(k for k in want if k.startswith("item/"))
    assert items == sorted(k for k in got if k.startswith("item/"))
    assert any(k.endswith("_is_pad") for k in items) and any(
        k.endswith("observation.images.front") for k in items
    )
    for k in items:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def assert_meta_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Tasks (text -> index), the episodes' lengths and tasks, and every stat both versions have."""
    assert got["meta"]["tasks"] == want["meta"]["tasks"]
    for a, b in zip(got["meta"]["episodes"], want["meta"]["episodes"], strict=True):
        assert (a["episode_index"], a["length"], a["tasks"]) == (b["episode_index"], b["length"], b["tasks"])
    stats = sorted(k for k in want if k.startswith("stats/") and k.rsplit("/", 1)[1] in BASE)
    assert stats and stats == sorted(k for k in got if k.startswith("stats/") and k.rsplit("/", 1)[1] in BASE)
    for k in stats:  # lerobot 0.6 aggregates its stats.json in float32 (std to ~1e-8), 0.3 in float64
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
    info_got, info_want = got["meta"]["info"], want["meta"]["info"]
    for key in ("fps", "total_episodes", "total_frames", "total_tasks", "robot_type"):
        assert info_got[key] == info_want[key], key
    assert set(info_got["features"]) == set(info_want["features"])


def assert_quantiles_exact(got: dict[str, Any], folder: Path) -> None:
    """``stats.json``'s quantiles (as LeRobot loads them) for each numeric feature are lerobot 0.6's
    histogram quantiles (``stats.vector_stats``, pinned against lerobot's ``get_feature_stats`` by
    test_lerobot_deep.py) over every row of the values."""
    table = pq.read_table(folder / "data")
    for feature in ("observation.state", "action", "next.reward"):
        expect = vector_stats(column_numpy(table.column(feature), table.num_rows))
        for q in QUANTILES:
            np.testing.assert_allclose(got[f"stats/{feature}/{q}"].reshape(-1), expect[q].reshape(-1), rtol=1e-6)


def test_v30_kept_metadata_loads_equal(
    made: dict[str, Path], want: dict, imported: dict, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    report = export_lerobot(str(imported["v3.0"]), str(out))
    assert report.version == "v3.0" and report.metadata == "source"
    got = lerobot_load("v3.0", out)
    assert_items_equal(got, want["v3.0"])
    assert_meta_equal(got, want["v3.0"])
    assert {k for k in got if k.startswith("stats/")} == {k for k in want["v3.0"] if k.startswith("stats/")}


def test_v30_to_v21_loads_in_lerobot_03(want: dict, imported: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = export_lerobot(str(imported["v3.0"]), str(out), version="2.1")
    assert report.version == "v2.1" and not report.reencoded
    hf = json.loads(pq.read_schema(next((out / "data").rglob("*.parquet"))).metadata[b"huggingface"])
    assert "List" not in json.dumps(hf)  # datasets 3 (lerobot 0.3) has no List
    got = lerobot_load("v2.1", out)
    assert_items_equal(got, want["v3.0"])
    assert_meta_equal(got, want["v3.0"])


def test_v21_to_v30_loads_and_lerobot_appends(made: dict, want: dict, imported: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = export_lerobot(str(imported["v2.1"]), str(out), version="3.0")
    assert report.version == "v3.0" and report.metadata == "rewritten"
    assert check(str(out)).ok
    info = json.loads((out / "meta/info.json").read_text())
    assert info["video_files_size_in_mb"] == 200 and info["data_files_size_in_mb"] == 100
    got = lerobot_load("v3.0", out)
    assert_items_equal(got, want["v2.1"])
    assert_meta_equal(got, want["v2.1"])
    assert_quantiles_exact(got, out)
    # LeRobot's own writer appends an episode to the export, and reads it back
    run_lerobot(PEER, "append", out)
    after = lerobot_load("v3.0", out)
    assert after["meta"]["len"] == got["meta"]["len"] + 5
    assert after["meta"]["item_tasks"][-1] == "a task appended by LeRobot"
    assert after["meta"]["tasks"]["a task appended by LeRobot"] == len(got["meta"]["tasks"])


@pytest.mark.slow
def test_v21_kept_and_v30_through_v21_back(want: dict, imported: dict, tmp_path: Path) -> None:
    out = tmp_path / "v21"
    assert export_lerobot(str(imported["v2.1"]), str(out)).metadata == "source"
    got = lerobot_load("v2.1", out)
    assert_items_equal(got, want["v2.1"])
    assert_meta_equal(got, want["v2.1"])
    # v3.0 -> v2.1 -> v3.0: shardstore writes every piece of v3.0 metadata
    there = tmp_path / "there"
    export_lerobot(str(imported["v3.0"]), str(there), version="2.1")
    back = tmp_path / "back"
    export_lerobot(str(import_lerobot(str(there), str(tmp_path / "there_ds")).out), str(back), version="3.0")
    got = lerobot_load("v3.0", back)
    assert_items_equal(got, want["v3.0"])
    assert_meta_equal(got, want["v3.0"])
    assert_quantiles_exact(got, back)


# ----- a source from another format ----------------------------------------------------------------
def _other_stream(with_tasks: bool = True, fps: float | None = 15.0) -> tuple[EpisodeStream, list[Episode]]:
    """Episodes as another format's reader gives them: a state array, an RGB array camera, a
    per-step ``language_instruction`` (RLDS's name), no LeRobot columns."""
    fields = [
        FieldSpec("state", "array", "<f4", (3,)),
        FieldSpec("camera", "array", "|u1", (32, 32, 3)),
        FieldSpec("reward", "array", "<f8", ()),
    ]
    if with_tasks:
        fields.append(FieldSpec("language_instruction", "text"))
    schema = Schema(
        tuple(fields), source_format="rlds", source_version="1.0.0", attrs={"fps": fps} if fps else {}
    )
    episodes = []
    for e, n in enumerate((6, 4)):
        y, x = np.mgrid[0:32, 0:32]  # smooth, as a camera's picture mostly is (crf 30 is lossy)
        cam = np.stack([np.stack([x * 4 + t * 10, y * 4 + 60, x + y + e * 40], -1) for t in range(n)]).astype(
            np.uint8
        )
        steps: dict[str, Any] = {
            "state": np.arange(n * 3, dtype=np.float32).reshape(n, 3) + e,
            "camera": cam,
            "reward": np.linspace(0, 1, n),
        }
        if with_tasks:
            steps["language_instruction"] = ["stack the blocks"] * (n - 2) + [f"wave {e}"] * 2
        episodes.append(Episode(e, steps))
    return EpisodeStream(schema, episodes, count=2), episodes


@pytest.mark.slow
def test_a_source_from_another_format_loads_in_lerobot(tmp_path: Path) -> None:
    stream, episodes = _other_stream()
    out = tmp_path / "other"
    report = write_lerobot(stream, str(out))  # no version: v3.0 (not the source's "1.0.0")
    assert report.version == "v3.0"
    assert check(str(out)).ok
    got = lerobot_load("v3.0", out)
    info = got["meta"]["info"]
    assert info["fps"] == 15 and info["features"]["camera"]["dtype"] == "video"
    assert info["features"]["camera"]["info"]["video.codec"] == "av1"
    assert got["meta"]["tasks"] == {"stack the blocks": 0, "wave 0": 1, "wave 1": 2}
    i = 0
    for ep in episodes:
        n = len(ep.steps["state"])
        for t in range(n):
            assert got[f"item/{i}/episode_index"] == ep.index and got[f"item/{i}/frame_index"] == t
            assert got[f"item/{i}/index"] == i
            np.testing.assert_allclose(got[f"item/{i}/timestamp"], t / 15, rtol=1e-6)
            np.testing.assert_array_equal(got[f"item/{i}/state"], ep.steps["state"][t])
            # float64 in the parquet; LeRobot's items turn it into float32
            np.testing.assert_array_equal(got[f"item/{i}/reward"], np.float32(ep.steps["reward"][t]))
            assert got["meta"]["item_tasks"][i] == ep.steps["language_instruction"][t]
            frame = np.round(got[f"item/{i}/camera"].transpose(1, 2, 0) * 255)
            mse = np.mean((frame - ep.steps["camera"][t].astype(np.float64)) ** 2)
            assert 10 * np.log10(255**2 / max(mse, 1e-9)) >= 40, (ep.index, t)
            i += 1
    assert got["meta"]["len"] == i
    for q in QUANTILES:
        assert f"stats/state/{q}" in got


@pytest.mark.slow
def test_another_format_as_image_features(tmp_path: Path) -> None:
    stream, episodes = _other_stream()
    out = tmp_path / "images"
    write_lerobot(stream, str(out), options=WriteOptions(images="image"))
    got = lerobot_load("v3.0", out)
    assert got["meta"]["info"]["features"]["camera"]["dtype"] == "image"
    frame = np.round(got["item/7/camera"].transpose(1, 2, 0) * 255).astype(np.uint8)
    np.testing.assert_array_equal(frame, episodes[1].steps["camera"][1])  # PNG: lossless


@pytest.mark.slow
def test_what_another_format_must_decide(tmp_path: Path) -> None:
    with pytest.raises(LeRobotFormatError, match="--fps"):
        write_lerobot(_other_stream(fps=None)[0], str(tmp_path / "a"))
    with pytest.raises(LeRobotFormatError, match="--task"):
        write_lerobot(_other_stream(with_tasks=False)[0], str(tmp_path / "b"))
    write_lerobot(
        _other_stream(with_tasks=False, fps=None)[0],
        str(tmp_path / "c"),
        options=WriteOptions(fps=10, task="reach"),
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert json.loads((tmp_path / "c/meta/info.json").read_text())["total_tasks"] == 1


@pytest.mark.slow
def test_check_fails_what_lerobot_rejects(tmp_path: Path) -> None:
    """A v3.0 dataset without LeRobot's default columns: LeRobotDataset cannot load it, and
    ``check`` says so."""
    stream, _ = _other_stream()
    out = tmp_path / "broken"
    write_lerobot(stream, str(out))
    data = next((out / "data").rglob("*.parquet"))
    pq.write_table(pq.read_table(data).drop_columns(["episode_index"]), data)
    assert not check(str(out)).ok
    with pytest.raises(AssertionError):
        lerobot_load("v3.0", out)


def test_shardstore_works_inside_the_lerobot_venv(made: dict, want: dict, tmp_path: Path) -> None:
    """lerobot 0.6.1's environment (PyAV 15, its numpy and pyarrow) runs shardstore's import and
    frame decoding: the frames are LeRobot's."""
    script = (
        "import sys, numpy as np, shardstore\n"
        "from shardstore.convert.lerobot import import_lerobot\n"
        "ds = import_lerobot(sys.argv[1], sys.argv[2]).out\n"
        "view = shardstore.episodes(ds)\n"
        "np.save(sys.argv[3], np.stack([view.step(1, t)['observation.images.wrist'] for t in range(7)]))\n"
    )
    dest = tmp_path / "frames.npy"
    run_lerobot("-c", script, made["v3.0"], tmp_path / "ds", dest, pythonpath=str(ROOT))
    frames = np.load(dest)
    for t in range(7):  # episode 1 starts at item 12
        lerobot = want["v3.0"][f"item/{12 + t}/observation.images.wrist"]
        np.testing.assert_array_equal(frames[t], np.round(lerobot.transpose(1, 2, 0) * 255).astype(np.uint8))


def _minari_like() -> EpisodeStream:
    """Minari's shape: observations with one row more than the actions (the final observation)."""
    schema = Schema(
        (
            FieldSpec("observations", "array", "<f4", (2,), rows="steps+1"),
            FieldSpec("actions", "array", "<f4", (1,)),
        ),
        source_format="minari",
        source_version="0.5",
    )
    episodes = [
        Episode(
            e,
            {
                "observations": np.arange((n + 1) * 2, dtype=np.float32).reshape(n + 1, 2) + e,
                "actions": np.arange(n, dtype=np.float32).reshape(n, 1) - e,
            },
        )
        for e, n in enumerate((3, 5))
    ]
    return EpisodeStream(schema, episodes, count=2)


@pytest.mark.slow
def test_final_observation_kept_or_dropped(tmp_path: Path) -> None:
    options = {"fps": 10.0, "task": "reach"}
    with pytest.raises(LeRobotFormatError, match="--final-observation"):
        write_lerobot(_minari_like(), str(tmp_path / "none"), options=WriteOptions(**options))
    drop = tmp_path / "drop"
    write_lerobot(_minari_like(), str(drop), options=WriteOptions(**options, final_observation="drop"))
    back = list(read_lerobot(str(drop)).episodes)
    assert [len(e.steps["observations"]) for e in back] == [3, 5]
    keep = tmp_path / "keep"
    write_lerobot(_minari_like(), str(keep), options=WriteOptions(**options, final_observation="keep"))
    stream = read_lerobot(str(keep))
    assert stream.schema["observations"].rows == "steps+1"
    for got, want in zip(stream.episodes, _minari_like().episodes, strict=True):
        np.testing.assert_array_equal(got.steps["observations"], want.steps["observations"])
        # a (1,) field is a scalar column in LeRobot (its convention for shape [1]): it reads back as ()
        np.testing.assert_array_equal(got.steps["actions"], want.steps["actions"][:, 0])
    got = lerobot_load("v3.0", keep)  # one frame more per episode, which LeRobot reads
    assert got["meta"]["len"] == 4 + 6
    np.testing.assert_array_equal(got["item/3/observations"], np.array([6, 7], np.float32))


@pytest.mark.parametrize("version", ["v3.0", pytest.param("v2.1", marks=pytest.mark.slow)])
def test_drop_in_dataset_gives_lerobots_items(want: dict, imported: dict, version: str) -> None:
    """``shardstore.lerobot_dataset.LeRobotDataset`` over the import of a source LeRobot's recorder
    made, with LeRobot's arguments, gives LeRobotDataset's items: the same keys, tensors (dtype,
    shape, values; frames as LeRobot decodes them), windows, ``*_is_pad`` and task texts."""
    from shardstore.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(str(imported[version]), delta_timestamps=DELTA)
    lerobot = want[version]
    assert len(ds) == lerobot["meta"]["len"]
    for i in range(len(ds)):
        item = ds[i]
        assert item.pop("task") == lerobot["meta"]["item_tasks"][i]
        keys = sorted(k[len(f"item/{i}/") :] for k in lerobot if k.startswith(f"item/{i}/"))
        assert sorted(item) == keys
        for k, v in item.items():
            want_k = lerobot[f"item/{i}/{k}"]
            assert (v.numpy().dtype, v.numpy().shape) == (want_k.dtype, want_k.shape), k
            np.testing.assert_array_equal(v.numpy(), want_k, err_msg=f"item {i} {k}")

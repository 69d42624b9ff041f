"""``shardstore convert``: detection, the user's decisions named by their flag, nothing left behind
but OUT (or what --keep names), the field mapping report; and ``check minari|rlds`` held against the
formats' own loaders on a good and a broken dataset."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ci import in_ci
from rlds_source import write_rlds_source

import shardstore
from shardstore.convert.any_to_any import detect_format
from shardstore.errors import ConfigError, PickleNotAllowedError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_episode_wds import rollouts, write_shard  # noqa: E402
from make_minari import make_minari  # noqa: E402

TFDS_PYTHON = Path(os.environ.get("SHARDSTORE_TFDS_VENV", ROOT / ".venv-tfds")) / "bin" / "python"


def cli(*args: object) -> Any:
    from click.testing import CliRunner

    from shardstore.cli import main

    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def rlds(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "robo" / "1.0.0"
    write_rlds_source(root)
    return root


@pytest.fixture
def minari_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return make_minari(tmp_path / "minari", "tiny/h5-v0", 3, 4, image=(8, 8, 3))


@pytest.fixture
def frames(tmp_path: Path) -> Path:
    task = tmp_path / "il" / "demos" / "bench" / "reach"
    write_shard(task / "shard-000000.tar", {"task_name": "reach"}, rollouts(np.random.default_rng(0), [2, 3], (4, 4, 3)))
    return task


def beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir())


def test_detect_each_format(rlds: Path, minari_src: Path, frames: Path, tmp_path: Path) -> None:
    assert detect_format(rlds) == "rlds"
    assert detect_format(minari_src) == "minari"
    assert detect_format("tiny/h5-v0") == "minari"  # a dataset id under MINARI_DATASETS_PATH
    assert detect_format(frames) == "episode-wds"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="--from"):
        detect_format(tmp_path / "empty")


def test_convert_leaves_only_out_and_its_report(minari_src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "tiny" / "1.0.0"
    res = cli("convert", minari_src, out, "--to", "rlds", "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["source_format"], report["target_format"]) == ("minari", "rlds")
    assert beside(out) == ["1.0.0", "1.0.0.report.json", "1.0.0.report.txt"]
    on_disk = json.loads(Path(f"{out}.report.json").read_text())
    mapping = on_disk["conversion"]
    assert {"source": "observations.image", "target": "steps/observation/image", "cast": "", "encoding": ""} \
        in mapping["mapped"]
    assert any(d["target"] == "last step's observation.image" for d in mapping["derived"])
    assert any(d["source"] == "terminations" for d in mapping["dropped"])
    assert on_disk["imported"]["episodes"] == 3 and on_disk["exported"]["splits"][0]["shardLengths"] == ["3"]
    assert "conversion minari -> rlds" in Path(f"{out}.report.txt").read_text()


def test_keep_keeps_the_imported_dataset(rlds: Path, tmp_path: Path) -> None:
    out, kept = tmp_path / "m", tmp_path / "kept"
    report = shardstore.convert(rlds, out, to="minari", keep=kept)
    assert report.kept == str(kept)
    view = shardstore.episodes(str(kept))
    assert len(view) == 7 and view.schema.source_format == "rlds"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "m", "m.report.json", "m.report.txt", "src"]


def test_a_decision_is_asked_by_its_flag_and_nothing_is_written(frames: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "r" / "1.0.0"
    res = cli("convert", frames, out, "--to", "rlds")
    assert res.exit_code == 1
    assert "--allow-pickle" in res.output and "Traceback" not in res.output
    assert not out.exists() and beside(out) == []
    with pytest.raises(PickleNotAllowedError, match="--allow-pickle"):
        shardstore.convert(frames, out, to="minari")
    assert cli("convert", frames, out, "--to", "rlds", "--allow-pickle", "-q").exit_code == 0
    assert (out / "dataset_info.json").exists()


def test_pickled_steps_into_lerobot_ask_for_allow_pickle_then_decode(frames: Path, tmp_path: Path) -> None:
    """Export and convert to LeRobot refuse pickled steps in one line naming the fields and the
    flag, writing nothing; with it they are decoded (restricted unpickler) and ``obs``/``next_obs``
    become one observation whose final row ``--final-observation`` keeps."""
    import pyarrow.parquet as pq

    ds = tmp_path / "ds"
    assert cli("import", "episode-wds", frames, ds, "-q").exit_code == 0  # kept as pickle bytes
    for args in (("export", "lerobot", ds), ("convert", frames)):
        out = tmp_path / f"{args[0]}-lerobot"
        res = cli(*args, out, *(("--to", "lerobot") if args[0] == "convert" else ()), "--fps", "10",
                  "--final-observation", "keep")
        assert res.exit_code == 1 and "Traceback" not in res.output
        assert len(res.output.strip().splitlines()) == 1
        assert "--allow-pickle" in res.output and "obs" in res.output and "acts" in res.output
        assert not out.exists() and not [p for p in tmp_path.iterdir() if ".shardstore-scratch-" in p.name]
        res = cli(*args, out, *(("--to", "lerobot") if args[0] == "convert" else ()), "--fps", "10",
                  "--final-observation", "keep", "--images", "image", "--allow-pickle", "-q")
        assert res.exit_code == 0, res.output
        info = json.loads((out / "meta" / "info.json").read_text())
        assert info["features"]["obs"]["dtype"] == "image" and "next_obs" not in info["features"]
        assert "infos" not in info["features"]  # a dict per step: no array form, dropped (reported)
        table = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").to_pydict()
        assert table["episode_index"] == [0, 0, 0, 1, 1, 1, 1]  # 2 + 1 and 3 + 1 frames: the final observation
        want = [r["acts"] for r in rollouts(np.random.default_rng(0), [2, 3], (4, 4, 3))]
        got = [np.asarray(a) for a in table["acts"]]
        np.testing.assert_array_equal(got[:2] + got[3:6], want)  # the kept frame repeats the last action
        mapping = json.loads(Path(f"{out}.report.json").read_text())["conversion"]
        assert {"source": "obs", "target": "obs", "cast": "", "encoding": "pickle -> array (restricted unpickler)"} \
            in mapping["mapped"]
        assert {d["target"] for d in mapping["derived"]} >= {"timestamp", "frame_index", "episode_index", "index"}
        assert {d["source"] for d in mapping["dropped"]} >= {"infos", "next_obs"}


def test_convert_to_lerobot_encodes_images_with_the_codec_asked(minari_src: Path, tmp_path: Path) -> None:
    av = pytest.importorskip("av")
    out = tmp_path / "lr"
    res = cli("convert", minari_src, out, "--to", "lerobot", "--fps", "10", "--task", "reach",
              "--final-observation", "drop", "--images", "video", "--video-codec", "h264", "-q")
    assert res.exit_code == 0, res.output
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    videos = {k: f["info"]["video.codec"] for k, f in features.items() if f["dtype"] == "video"}
    assert videos == {"observations.image": "h264"}
    [mp4] = (out / "videos").rglob("*.mp4")
    with av.open(str(mp4)) as c:
        assert c.streams.video[0].codec_context.name == "h264"
        decoded = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    # the report's PSNR is the lowest episode's, measured as a reader decodes the file
    from minari.dataset.minari_dataset import MinariDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = [ep.observations["image"][:-1] for ep in MinariDataset(str(minari_src / "data")).iterate_episodes()]
    at, dbs = 0, []
    for frames in source:
        got = decoded[at:at + len(frames)].astype(np.float64)
        dbs.append(10 * np.log10(255.0**2 / np.mean((got - frames) ** 2)))
        at += len(frames)
    assert at == len(decoded)
    [approx] = json.loads(Path(f"{out}.report.json").read_text())["conversion"]["approximated"]
    assert approx["source"] == "observations.image" and approx["psnr_db"] == pytest.approx(min(dbs), abs=0.01)


def test_the_task_folder_becomes_the_language_instruction(frames: Path, tmp_path: Path) -> None:
    from shardstore.convert.rlds import read_rlds

    out = tmp_path / "r" / "1.0.0"
    shardstore.convert(frames, out, to="rlds", allow_pickle=True)
    episodes = list(read_rlds(str(out)).episodes)
    assert [set(ep.steps["language_instruction"]) for ep in episodes] == [{"reach"}, {"reach"}]
    # the final observation is the last step (next_obs's last row), its action zero
    assert [len(ep.steps["action"]) for ep in episodes] == [3, 4]
    assert not episodes[0].steps["action"][-1].any()


def test_rlds_language_becomes_minari_episode_tasks_and_back(rlds: Path, tmp_path: Path) -> None:
    from minari.dataset.minari_dataset import MinariDataset

    out = tmp_path / "m"
    shardstore.convert(rlds, out, to="minari")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = MinariDataset(str(out / "data"))
        meta = list(ds.storage.get_episode_metadata(range(ds.total_episodes)))
    assert all(list(m["tasks"]) for m in meta)
    back = tmp_path / "r" / "1.0.0"
    shardstore.convert(out, back, to="rlds")
    from shardstore.convert.rlds import read_rlds

    ep = next(iter(read_rlds(str(back)).episodes))
    assert "language_instruction" in ep.steps and ep.steps["language_instruction"][0]


# ----- check against the loaders ---------------------------------------------------------------------
def minari_loads(path: Path) -> bool:
    from minari.dataset.minari_dataset import MinariDataset

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            list(MinariDataset(str(path / "data")).iterate_episodes())
        return True
    except Exception:  # noqa: BLE001  (any failure of the loader is a "no")
        return False


def _broken_minari(good: Path, tmp_path: Path) -> dict[str, Path]:
    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(good, dest)
        return dest

    cases = {}
    p = copy("space-as-dict")
    meta = json.loads((p / "data" / "metadata.json").read_text())
    meta["observation_space"] = json.loads(meta["observation_space"])
    (p / "data" / "metadata.json").write_text(json.dumps(meta))
    cases["meta.spaces"] = p
    p = copy("old-version")
    meta = json.loads((p / "data" / "metadata.json").read_text())
    meta["minari_version"] = "0.3.0"
    (p / "data" / "metadata.json").write_text(json.dumps(meta))
    cases["meta.ids"] = p
    p = copy("no-rewards")
    import h5py

    with h5py.File(p / "data" / "main_data.hdf5", "a") as f:
        del f["episode_1/rewards"]
    cases["episode.groups"] = p
    p = copy("extra-key")
    with h5py.File(p / "data" / "main_data.hdf5", "a") as f:
        f["episode_0/observations/extra"] = np.zeros((5, 1), np.float32)
    cases["episode.space"] = p
    p = copy("missing-episode")
    with h5py.File(p / "data" / "main_data.hdf5", "a") as f:
        del f["episode_2"]
    cases["episode.present"] = p
    return cases


@pytest.mark.parametrize("backend", ["hdf5", "arrow"])
def test_minari_outputs_carry_episode_ids_and_steps_not_lerobot_bookkeeping(backend: str, tmp_path: Path) -> None:
    """minari sums the episodes' ``total_steps`` for a filtered dataset (a KeyError when an export
    left them out), and LeRobot's per-episode rows and stats have no place in a Minari file."""
    pytest.importorskip("av")
    from make_lerobot import make_lerobot
    from minari.dataset.minari_dataset import MinariDataset

    src = make_lerobot(str(tmp_path / "lr"), version="v3.0", episodes=3, frames=5, size=16,
                       cameras={"observation.images.front": "h264"}, chunks_size=2, episodes_per_file=2)
    out = tmp_path / "m"
    shardstore.convert(src, out, to="minari", backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = MinariDataset(str(out / "data"))
        subset = ds.filter_episodes(lambda ep: ep.id != 1)
        assert subset.total_steps == ds.total_steps - len(ds[1].actions)
        metadata = list(ds.storage.get_episode_metadata(range(3)))
    assert [m["id"] for m in metadata] == [0, 1, 2]
    assert sum(m["total_steps"] for m in metadata) == ds.total_steps
    assert not {k for m in metadata for k in m} & {"source_row", "stats", "image_paths", "length"}
    dropped = json.loads(Path(f"{out}.report.json").read_text())["conversion"]["dropped"]
    assert any("source_row" in d["source"] for d in dropped)


def test_a_minari_output_under_minaris_root_is_listed_by_its_id(rlds: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """minari.list_local_datasets skips (with a warning) a dataset whose metadata id is not its
    folder under the root: an export there takes that id."""
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "root"))
    shardstore.convert(rlds, tmp_path / "root" / "conv" / "robo-v0", to="minari")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(minari.list_local_datasets()) == ["conv/robo-v0"]
        loaded = minari.load_dataset("conv/robo-v0")
    from shardstore.convert.rlds import read_rlds

    lengths = [len(ep.steps["action"]) for ep in read_rlds(str(rlds)).episodes]
    assert loaded.total_episodes == sum(n > 1 for n in lengths)  # an episode of one step is only a final observation
    assert loaded.total_steps == sum(n - 1 for n in lengths if n > 1)


def test_check_minari_agrees_with_minari(minari_src: Path, rlds: Path, tmp_path: Path) -> None:
    from shardstore.convert.minari.check import check_minari

    converted = tmp_path / "from-rlds"
    shardstore.convert(rlds, converted, to="minari", backend="arrow")
    for good in (minari_src, converted):
        for deep in (False, True):
            assert check_minari(str(good), deep=deep).ok, check_minari(str(good), deep=deep).problems
        assert minari_loads(good)
    for what, bad in _broken_minari(minari_src, tmp_path).items():
        assert not minari_loads(bad), what
        assert not check_minari(str(bad), deep=True).ok, what
    res = cli("check", "minari", tmp_path / "no-rewards")
    assert res.exit_code == 1 and "rewards" in res.output


def test_check_rlds_agrees_with_tfds(minari_src: Path, tmp_path: Path) -> None:
    from shardstore.convert.rlds.check import check_rlds

    if not TFDS_PYTHON.exists():
        if in_ci():
            pytest.fail(f"{TFDS_PYTHON} is missing; CI must run the TFDS reader tests")
        pytest.skip(f"{TFDS_PYTHON} is missing (run `make tfds`)")
    good = tmp_path / "good" / "tiny" / "1.0.0"
    shardstore.convert(minari_src, good, to="rlds")
    bad = tmp_path / "bad" / "tiny" / "1.0.0"
    shutil.copytree(good, bad)
    shard = next(bad.glob("*.tfrecord-*"))
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF  # inside the first record's payload: its CRC no longer matches
    shard.write_bytes(bytes(data))
    assert check_rlds(str(good)).ok, check_rlds(str(good)).text()
    assert not check_rlds(str(bad)).ok
    code = ("import sys, tensorflow_datasets as tfds\n"
            "for d in sys.argv[1:]:\n"
            "    try:\n"
            "        b = tfds.builder_from_directory(d); [list(tfds.as_numpy(b.as_dataset(split=s))) for s in b.info.splits]\n"
            "        print('ok')\n"
            "    except Exception as e:\n"
            "        print('fail', type(e).__name__)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    res = subprocess.run([str(TFDS_PYTHON), "-c", code, str(good), str(bad)], capture_output=True, text=True,
                         timeout=300, env=env)
    verdicts = [line.split()[0] for line in res.stdout.splitlines() if line.split()[:1] in (["ok"], ["fail"])]
    assert verdicts == ["ok", "fail"], res.stdout + res.stderr[-2000:]

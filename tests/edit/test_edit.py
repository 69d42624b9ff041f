"""``shardstore edit`` on episode datasets imported from LeRobot (v3.0 files whose episodes start off
keyframes, two codecs) and Minari: every operation, frames bitwise equal to the source's, exact
stats, the expression language refusing what it must, exports, and LeRobotDataset reading an export.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import shardstore
from shardstore.convert.lerobot import export_lerobot, import_lerobot
from shardstore.convert.lerobot.stats import QUANTILES, vector_stats
from shardstore.episodes.video import FrameDecoder
from shardstore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import TASKS, make_lerobot  # noqa: E402
from tree_digest import tree_digest  # noqa: E402

CAMERAS = ("observation.images.front", "observation.images.wrist")
FPS = 10
LENGTH = 12


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An import of a LeRobot v3.0 dataset of 6 episodes x 12 frames, 3 per file, GOP 5 with no
    keyframe at episode starts (so every cut but the first is off a keyframe)."""
    root = tmp_path_factory.mktemp("edit")
    src = make_lerobot(
        str(root / "src"), version="v3.0", episodes=6, frames=LENGTH, fps=FPS, episodes_per_file=3, gop=5,
        align_keyframes=False,
    )
    import_lerobot(src, str(root / "store"))
    return root / "store"


def frames_of(view: shardstore.episodes.Episodes, e: int) -> dict[str, list[np.ndarray]]:
    ep = view[e]
    return {cam: view.video.decoder.frames(ep.steps[cam]) for cam in CAMERAS}  # type: ignore[arg-type]


# ----- operations --------------------------------------------------------------------------------------
def test_delete_renumbers_keeps_values_and_frames(store: Path, tmp_path: Path) -> None:
    before = tree_digest(store)
    report = shardstore.edit.delete_episodes(str(store), str(tmp_path / "out"), episodes="1,3-4")
    assert tree_digest(store) == before  # the source is only read
    assert report.numbers == [[0, 0, 0], [0, 2, 2], [0, 5, 5]] and report.removed == 3  # numbers kept
    assert report.copied and not report.remuxed and not report.reencoded
    src, out = shardstore.episodes(str(store)), shardstore.episodes(str(tmp_path / "out"))
    assert len(out) == 3 and [out.number(e) for e in range(3)] == [0, 2, 5]
    for new, old in enumerate([0, 2, 5]):
        a, b = src[src.position(old)], out[new]
        for name in ("action", "observation.state", "episode_index", "index"):  # the samples copied as they were
            np.testing.assert_array_equal(a.steps[name], b.steps[name])
        assert b.metadata["tasks"] == a.metadata["tasks"]
        assert b.metadata["stats"]["action"] == {}  # value stats: recomputed exactly on export
        fa, fb = frames_of(src, src.position(old)), frames_of(out, new)
        for cam in CAMERAS:  # decoded frames of every kept episode bitwise equal
            assert all(np.array_equal(x, y) for x, y in zip(fa[cam], fb[cam], strict=True))


def test_keep_filter_split_set_task(store: Path, tmp_path: Path) -> None:
    kept = shardstore.edit.keep_episodes(str(store), str(tmp_path / "keep"), episodes=[4, 1])
    assert [n[1] for n in kept.numbers] == [1, 4]
    f = shardstore.edit.filter_episodes(str(store), str(tmp_path / "f"), where=f'task == "{TASKS[1]}" and episode > 1')
    assert [n[1] for n in f.numbers] == [3, 5] and f.tasks == TASKS  # the task list kept whole
    s = shardstore.edit.split(str(store), str(tmp_path / "s"), ratio="4,1,1", seed=3)
    assert s.splits == {"train": 4, "val": 1, "test": 1}
    view = shardstore.episodes(str(tmp_path / "s"))
    assert [view.split(view.position(n)) for n in range(6)] == ["train"] * 4 + ["val", "test"]
    info = json.loads(view.source_file("meta/info.json"))
    assert info["splits"] == {"train": "0:4", "val": "4:5", "test": "5:6"}
    by_list = shardstore.edit.split(str(store), str(tmp_path / "s2"), episodes={"val": "2", "test": "0"})
    assert [n[1] for n in by_list.numbers] == [1, 3, 4, 5, 2, 0]
    t = shardstore.edit.set_task(str(store), str(tmp_path / "t"), task="wave", where="episode < 2")
    assert t.tasks == [*TASKS, "wave"]
    view = shardstore.episodes(str(tmp_path / "t"))
    for e in range(6):
        want = "wave" if e < 2 else TASKS[e % 2]
        assert view.metadata(view.position(e))["tasks"] == [want]
        np.testing.assert_array_equal(view[view.position(e)].steps["task_index"], [t.tasks.index(want)] * LENGTH)


def test_merge_rename_drop(store: Path, tmp_path: Path) -> None:
    shardstore.edit.set_task(str(store), str(tmp_path / "b"), task="wave", episodes="0-5")
    m = shardstore.edit.merge(str(tmp_path / "m"), [str(store), str(tmp_path / "b")])
    assert m.episodes == 12 and m.tasks == [*TASKS, "wave"]
    assert any(name.startswith("input-001/") for name in m.copied)  # same file names: the second renamed
    view = shardstore.episodes(str(tmp_path / "m"))
    src = shardstore.episodes(str(store))
    for new in (0, 6, 11):
        old = new % 6
        fa, fb = frames_of(src, src.position(old)), frames_of(view, view.position(new))
        assert all(np.array_equal(x, y) for cam in CAMERAS for x, y in zip(fa[cam], fb[cam], strict=True))
    r = shardstore.edit.rename_field(str(store), str(tmp_path / "r"), old="action", new="act")
    assert r.fields == {"action": "act"}
    rv = shardstore.episodes(str(tmp_path / "r"))
    assert "act" in rv.schema.names and "action" not in rv.schema.names
    assert "act" in rv[0].steps
    assert "act" in json.loads(rv.source_file("meta/info.json"))["features"]
    d = shardstore.edit.drop_field(str(store), str(tmp_path / "d"), field="observation.image")
    assert "observation.image" not in shardstore.episodes(str(tmp_path / "d")).schema.names
    assert d.fields == {"observation.image": ""}


def test_refusals(store: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="episode 9 is not in the dataset"):
        shardstore.edit.delete_episodes(str(store), str(tmp_path / "x"), episodes="9")
    with pytest.raises(ConfigError, match="keeps no episode"):
        shardstore.edit.delete_episodes(str(store), str(tmp_path / "x"), episodes="0-5")
    with pytest.raises(ConfigError, match="pass --in-place"):
        shardstore.edit.delete_episodes(str(store), str(store), episodes="0")
    with pytest.raises(ConfigError, match="no field"):
        shardstore.edit.rename_field(str(store), str(tmp_path / "x"), old="nope", new="b")
    with pytest.raises(ConfigError, match="exists already"):
        shardstore.edit.rename_field(str(store), str(tmp_path / "x"), old="action", new="observation.state")
    shardstore.edit.drop_field(str(store), str(tmp_path / "less"), field="action")
    with pytest.raises(ConfigError, match="fields differ"):
        shardstore.edit.merge(str(tmp_path / "x"), [str(store), str(tmp_path / "less")])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('__import__("os").system("true")', "Call is not allowed"),
        ("episode.__class__", "only meta.NAME may use a dot"),
        ("(lambda: 1)()", "not allowed"),
        ("[x for x in tasks]", "ListComp is not allowed"),
        ("length ** 2 > 1", "BinOp is not allowed"),
        ("foo > 1", "unknown name 'foo'"),
        ("length >", "column"),
        ("1 if length else 2", "IfExp is not allowed"),
    ],
)
def test_expression_refuses(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        shardstore.edit.parse_expression(text)


def test_expression_evaluates() -> None:
    values = {"episode": 3, "length": 50, "task": "pick the cube", "tasks": ["pick the cube"], "split": "train",
              "meta": {"success": True}}
    e = shardstore.edit.parse_expression
    assert e('"cube" in task and length // 10 == 5 and meta.success and meta["success"]').matches(values)
    assert not e("episode in [1, 2] or not split == 'train'").matches(values)
    with pytest.raises(ConfigError, match="numbers only"):  # no gigabyte strings
        e('task * 1000000000 == ""').evaluate(values)
    with pytest.raises(ConfigError, match="division by zero"):
        e("length / (episode - 3) > 1").evaluate(values)


# ----- exports --------------------------------------------------------------------------------------
def test_export_v30_remuxes_off_keyframe_cuts_with_exact_stats(store: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    shardstore.edit.delete_episodes(str(store), str(tmp_path / "d"), episodes="1,4")
    report = export_lerobot(str(tmp_path / "d"), str(tmp_path / "lr"))
    assert report.reencoded == [] and report.remuxed_videos == len(CAMERAS)
    lr = tmp_path / "lr"
    info = json.loads((lr / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"]) == (4, 4 * LENGTH)
    rows = pq.read_table(lr / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    data = pq.read_table(lr / "data/chunk-000/file-000.parquet")
    src_rows = pq.read_table(store.parent / "src/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    decoder = FrameDecoder(lambda name: open(name, "rb"))  # noqa: SIM115
    for new, old in enumerate([0, 2, 3, 5]):
        for cam in CAMERAS:  # the kept frames decoded from the export equal the source's, bit for bit
            out_file = lr / info["video_path"].format(
                video_key=cam, chunk_index=rows[new][f"videos/{cam}/chunk_index"],
                file_index=rows[new][f"videos/{cam}/file_index"])
            src_file = store.parent / "src" / info["video_path"].format(
                video_key=cam, chunk_index=src_rows[old][f"videos/{cam}/chunk_index"],
                file_index=src_rows[old][f"videos/{cam}/file_index"])
            t_out, t_src = rows[new][f"videos/{cam}/from_timestamp"], src_rows[old][f"videos/{cam}/from_timestamp"]
            for i in range(LENGTH):
                a = decoder.frame(str(out_file), t_out + i / FPS)
                b = decoder.frame(str(src_file), t_src + i / FPS)
                assert np.array_equal(a, b), (new, cam, i)
    stats = json.loads((lr / "meta/stats.json").read_text())
    for key in ("observation.state", "action"):  # dataset stats: a recomputation over every row (not a merge)
        values = np.asarray(data.column(key).to_pylist(), np.float32)  # the column as stored
        want = vector_stats(values)
        assert set(QUANTILES) <= set(stats[key])
        for name, value in want.items():
            np.testing.assert_array_equal(np.asarray(stats[key][name]), value, err_msg=f"{key} {name}")
        for e, row in enumerate(rows):  # per-episode stats too
            ep = values[data.column("episode_index").to_numpy() == e]
            for name, value in vector_stats(ep).items():
                np.testing.assert_array_equal(np.asarray(row[f"stats/{key}/{name}"]), value)


def test_minari_edit_exports(tmp_path: Path) -> None:
    from make_minari import make_minari

    from shardstore.convert.episode_wds import export_episode_wds
    from shardstore.convert.minari import export_minari, import_minari

    src = make_minari(tmp_path / "m", "robot/random-v0", 5, 8)
    import_minari(str(src), str(tmp_path / "store"))
    shardstore.edit.filter_episodes(str(tmp_path / "store"), str(tmp_path / "f"), where="episode % 2 == 0")
    out = shardstore.episodes(str(tmp_path / "f"))
    assert len(out) == 3
    export_minari(str(tmp_path / "f"), str(tmp_path / "minari"))
    export_episode_wds(str(tmp_path / "f"), str(tmp_path / "wds"))
    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path)
    import minari

    ds = minari.load_dataset(str(tmp_path / "minari"))
    assert ds.total_episodes == 3
    src_view = shardstore.episodes(str(tmp_path / "store"))
    for new, ep in enumerate(ds.iterate_episodes()):
        old = src_view[src_view.position(2 * new)]
        np.testing.assert_array_equal(ep.actions, old.steps["actions"])


EDITS = {  # operation -> a call that writes its result at OUT
    "delete": lambda s, o: shardstore.edit.delete_episodes(s, o, episodes="1,4"),
    "keep": lambda s, o: shardstore.edit.keep_episodes(s, o, episodes="2-4"),
    "filter": lambda s, o: shardstore.edit.filter_episodes(s, o, where="episode % 2 == 1"),
    "split": lambda s, o: shardstore.edit.split(s, o, ratio="4,1,1", seed=1),
    "merge": lambda s, o: shardstore.edit.merge(o, [s, s]),
    "rename": lambda s, o: shardstore.edit.rename_field(s, o, old="action", new="act"),
    "drop": lambda s, o: shardstore.edit.drop_field(s, o, field="observation.image"),
    "set-task": lambda s, o: shardstore.edit.set_task(s, o, task="wave", where="episode > 3"),
}


@pytest.mark.parametrize("operation", list(EDITS))
def test_every_edit_exports_and_deep_checks_clean(store: Path, tmp_path: Path, operation: str) -> None:
    """``check lerobot --deep`` finds no error in an export of any edit, v3.0 and v2.1: its exact
    stats.json quantiles (the data's own, not LeRobot's average of the episodes') included."""
    from shardstore.convert.lerobot.deep import check_deep

    EDITS[operation](str(store), str(tmp_path / "e"))
    for version in ("v3.0", "v2.1"):
        out = tmp_path / f"lr-{version}"
        export_lerobot(str(tmp_path / "e"), str(out), version=version)
        report = check_deep(str(out))
        assert [p for p in report.problems if p.severity == "error"] == [], (operation, version)


def test_deep_check_still_catches_stats_json_quantiles_off_the_data(store: Path, tmp_path: Path) -> None:
    """The exact quantiles are accepted, not any: one outside every episode's range is an error."""
    from shardstore.convert.lerobot.deep import check_deep

    shardstore.edit.delete_episodes(str(store), str(tmp_path / "d"), episodes="0")
    export_lerobot(str(tmp_path / "d"), str(tmp_path / "lr"))
    path = tmp_path / "lr/meta/stats.json"
    stats = json.loads(path.read_text())
    assert check_deep(str(tmp_path / "lr")).ok
    stats["action"]["q50"][0] = stats["action"]["max"][0]  # inside [min, max], outside the episodes' medians
    path.write_text(json.dumps(stats))
    bad = [p for p in check_deep(str(tmp_path / "lr")).problems if p.severity == "error"]
    assert [(p.check, p.field) for p in bad] == [("stats", "action")] and "q50" in bad[0].message


@pytest.mark.slow
def test_rlds_export_of_an_edit_loads_in_tfds(store: Path, tmp_path: Path) -> None:
    """The last format: an edit exported to RLDS reads in the real tensorflow_datasets, the kept
    episodes' values those of the source, in order."""
    from shardstore.convert.rlds import export_rlds

    sys.path.insert(0, str(ROOT / "tests/convert"))
    from test_rlds_tfds import tfds_load

    shardstore.edit.delete_episodes(str(store), str(tmp_path / "d"), episodes="1,4")
    out = tmp_path / "rlds/robo/1.0.0"
    export_rlds(str(tmp_path / "d"), str(out))
    got = tfds_load(out, tmp_path)
    src = shardstore.episodes(str(store))
    for new, old in enumerate([0, 2, 3, 5]):
        assert int(got[f"train/{new}/__len__"]) == LENGTH
        np.testing.assert_array_equal(got[f"train/{new}/steps/action"], src[src.position(old)].steps["action"])
    assert "train/4/__len__" not in got


def test_cli_edit_to_a_format_in_one_process(store: Path, tmp_path: Path) -> None:
    """``edit ... --to lerobot``: the edit's result exported at OUT, nothing else left beside it, the
    same LeRobot dataset as ``edit`` then ``export lerobot``; ``--to`` without OUT or with
    ``--in-place`` is refused before anything is written."""
    from click.testing import CliRunner

    from shardstore.cli import main

    out = tmp_path / "to" / "lr"
    res = CliRunner().invoke(main, ["edit", "delete-episodes", str(store), str(out), "--episodes", "1,3", "--to",
                                    "lerobot", "--json"])
    assert res.exit_code == 0, res.output
    said = json.loads(res.output)
    assert said["to"] == "lerobot" and said["out"] == os.path.abspath(out) and said["episodes"] == 4
    assert sorted(os.listdir(out.parent)) == ["lr"]  # the scratch dataset is gone
    shardstore.edit.delete_episodes(str(store), str(tmp_path / "two"), episodes="1,3")
    export_lerobot(str(tmp_path / "two"), str(tmp_path / "two-lr"))
    for name in ("meta/info.json", "meta/stats.json"):
        assert json.loads((out / name).read_text()) == json.loads((tmp_path / "two-lr" / name).read_text())
    for args in (["--in-place"], []):
        res = CliRunner().invoke(main, ["edit", "delete-episodes", str(store), *args, "--episodes", "1", "--to", "rlds"])
        assert res.exit_code == 1 and "--to writes a new dataset at OUT" in res.output, res.output

"""One report shape for every import and export (issue 26, point 5): the same keys with --json,
one summary line without, and with --json an error is JSON on stdout too. Sources are written with
the formats' own tools (minari's DataCollector, tools/make_lerobot.py, the RLDS writer of
tests/convert/rlds_source.py) and every count is checked against them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import test_minari
from click.testing import CliRunner
from rlds_source import write_rlds_source

import shardstore
from shardstore.cli import main

COMMON = ["path", "source", "format", "version", "episodes", "steps", "bytes", "seconds", "warnings", "extras"]


def cli(*args: object) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def report(*args: object) -> dict[str, Any]:
    res = cli(*args, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert list(data) == COMMON, args
    assert isinstance(data["seconds"], float) and isinstance(data["warnings"], list) and data["bytes"] > 0
    return data


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def summary_line(*args: object) -> str:
    res = cli(*args)
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()[0]


minari_root = test_minari.minari_root  # the fixture: MINARI_DATASETS_PATH with the sources of test_minari


def test_rlds_and_episode_wds(tmp_path: Path) -> None:
    src = tmp_path / "robo" / "1.0.0"
    values = write_rlds_source(src)
    steps = sum(len(ep["steps"]) if "steps" in ep else 0 for split in values.values() for ep in split)
    imported = report("import", "rlds", src, tmp_path / "ds")
    assert (imported["format"], imported["source"], imported["path"]) == ("rlds", str(src), str(tmp_path / "ds"))
    assert imported["episodes"] == sum(len(v) for v in values.values()) == 7 and imported["steps"] == 20
    assert steps in (0, 20)
    assert imported["version"] == shardstore.episodes(str(tmp_path / "ds")).schema.source_version
    exported = report("export", "rlds", tmp_path / "ds", tmp_path / "back" / "1.0.0")
    assert (exported["episodes"], exported["steps"], exported["version"]) == (7, 20, "1.0.0")
    assert exported["bytes"] == tree_bytes(tmp_path / "back" / "1.0.0")
    wds = report("export", "episode-wds", tmp_path / "ds", tmp_path / "wds")
    assert (wds["format"], wds["episodes"], wds["steps"]) == ("episode-wds", 7, 20)
    assert wds["bytes"] == tree_bytes(tmp_path / "wds") and wds["extras"]["shards"]
    again = report("import", "episode-wds", tmp_path / "wds", tmp_path / "ds2")
    assert (again["episodes"], again["steps"], again["path"]) == (7, 20, str(tmp_path / "ds2"))
    line = summary_line("export", "rlds", tmp_path / "ds", tmp_path / "back2" / "1.0.0")
    assert line.startswith("Exported 7 episodes, 20 steps (") and line.endswith(" s") and "(RLDS 1.0.0)" in line


def test_lerobot(tmp_path: Path) -> None:
    from make_lerobot import make_lerobot

    src = Path(make_lerobot(str(tmp_path / "lr"), version="v2.1", episodes=2, frames=[4, 3], size=16,
                            cameras={"observation.images.front": "h264"}))
    imported = report("import", "lerobot", src, tmp_path / "ds")
    assert (imported["format"], imported["version"], imported["episodes"], imported["steps"]) == ("lerobot", "v2.1", 2, 7)
    assert imported["extras"]["video_files"] == 2
    exported = report("export", "lerobot", tmp_path / "ds", tmp_path / "v30", "--version", "3.0")
    assert (exported["format"], exported["version"], exported["episodes"], exported["steps"]) == ("lerobot", "v3.0", 2, 7)
    assert exported["bytes"] == tree_bytes(tmp_path / "v30") and exported["path"] == str(tmp_path / "v30")
    line = summary_line("export", "lerobot", tmp_path / "ds", tmp_path / "v30", "--force")
    assert line.startswith("Exported 2 episodes, 7 steps (") and "(LeRobot v2.1)" in line


def test_minari(tmp_path: Path, minari_root: Path) -> None:
    import minari

    total = minari.load_dataset("cartpole/hdf5-v0").total_steps
    imported = report("import", "minari", "cartpole/hdf5-v0", tmp_path / "ds")
    assert (imported["format"], imported["episodes"], imported["steps"]) == ("minari", 5, total)
    assert imported["version"] and imported["extras"]["splits"] == {"train": 5}
    exported = report("export", "minari", tmp_path / "ds", minari_root / "copy-v0")
    assert (exported["episodes"], exported["steps"], exported["format"]) == (5, total, "minari")
    assert minari.load_dataset("copy-v0").total_steps == total
    line = summary_line("import", "minari", "cartpole/hdf5-v0", tmp_path / "ds", "--force")
    assert line.startswith(f"Imported 5 episodes, {total} steps (") and "(Minari " in line


@pytest.mark.parametrize(
    "args",
    [
        ["import", "minari", "{tmp}/nothing", "{tmp}/out"],
        ["import", "lerobot", "{tmp}/nothing", "{tmp}/out"],
        ["import", "rlds", "{tmp}/nothing", "{tmp}/out"],
        ["import", "episode-wds", "{tmp}/nothing", "{tmp}/out"],
        ["export", "lerobot", "{tmp}/nothing", "{tmp}/out"],
        ["export", "rlds", "{tmp}/nothing", "{tmp}/out"],
        ["info", "{tmp}/nothing"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_a_missing_source_is_exit_1_and_with_json_an_error_object(tmp_path: Path, args: list[str]) -> None:
    argv = [a.format(tmp=tmp_path) for a in args]
    res = cli(*argv)
    assert res.exit_code == 1 and res.stderr.startswith("shardstore: error: ") and res.stderr.count("\n") == 1
    assert str(tmp_path / "nothing") in res.stderr
    res = cli(*argv, "--json")
    assert res.exit_code == 1 and res.stderr == ""
    error = json.loads(res.stdout)["error"]
    assert str(tmp_path / "nothing") in error["message"] and error["type"].endswith("Error")
    assert not (tmp_path / "out").exists()

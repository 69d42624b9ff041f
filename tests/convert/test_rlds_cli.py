"""`shardstore import rlds`, `export rlds`, `check rlds`: RLDS into the store (random steps equal
the source), back out byte for byte, LeRobot-imported datasets through the mapping, bad input as a
one-line error with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from rlds_source import STEP_SPECS, write_rlds_source

import shardstore
from shardstore.cli import main


def run(*args: str, code: int = 0) -> Any:
    res = CliRunner().invoke(main, list(args))
    assert res.exit_code == code, (res.output, res.exception)
    return res


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, Path, dict[str, list[dict[str, Any]]]]:
    src = tmp_path / "robo" / "1.0.0"
    values = write_rlds_source(src)
    ds = tmp_path / "ds"
    res = run("import", "rlds", str(src), str(ds), "--json")
    report = json.loads(res.output)
    assert report["episodes"] == 7 and report["steps"] == 20
    return src, ds, values


def test_import_random_steps(imported: tuple[Path, Path, dict[str, list[dict[str, Any]]]]) -> None:
    src, ds, values = imported
    view = shardstore.episodes(str(ds))
    flat = [v for split in ("train", "val") for v in values[split]]
    assert len(view) == len(flat)
    rng = np.random.default_rng(5)
    for _ in range(25):
        e = int(rng.integers(len(flat)))
        want = flat[e]
        t = int(rng.integers(len(want["steps/is_first"])))
        step = view.step(e, t)
        for s in STEP_SPECS:
            name = s.path.split("/", 1)[1].replace("/", ".")
            got = step[name]
            w = want[s.path][t]
            if s.kind == "tensor":
                np.testing.assert_array_equal(got, w, err_msg=f"{e} {t} {name}")
                if name not in ("is_first", "is_last", "is_terminal"):
                    assert np.asarray(got).dtype == np.dtype(s.dtype), name
            else:
                assert got == w, (e, t, name)
    # the source files and where each episode came from
    assert view.source_file("features.json") == (src / "features.json").read_bytes()
    assert view.source_file("dataset_info.json") == (src / "dataset_info.json").read_bytes()
    assert view.source(6) == {
        "split": "val",
        "shard": "robo-val.tfrecord-00001-of-00002",
        "shard_index": 1,
        "record": 0,
    }
    assert len(shardstore.episodes(str(ds), "val")) == 2


def test_export_is_byte_identical(imported: tuple[Path, Path, Any], tmp_path: Path) -> None:
    src, ds, _ = imported
    out = tmp_path / "export" / "robo" / "1.0.0"
    res = run("export", "rlds", str(ds), str(out), "--json")
    report = json.loads(res.output)  # the one report shape of every import and export (issue 26)
    assert (report["path"], report["format"], report["version"]) == (str(out), "rlds", "1.0.0")
    assert (report["episodes"], report["steps"], report["source"]) == (7, 20, str(ds))
    assert report["bytes"] == sum(p.stat().st_size for p in out.iterdir())
    assert report["extras"]["splits"] == [
        {"name": "train", "episodes": 5, "shards": 3}, {"name": "val", "episodes": 2, "shards": 2},
    ]
    for p in src.iterdir():
        if p.name == "dataset_info.json":
            assert json.loads((out / p.name).read_text()) == json.loads(p.read_text())
        else:
            assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    res = run("check", "rlds", str(out), "--json")
    assert json.loads(res.output)["ok"] is True
    res = run("check", "rlds", str(out))
    assert "RLDS check of" in res.output and ": OK" in res.output


def test_import_one_split_by_episode(tmp_path: Path) -> None:
    """--split, and --granularity episode (one sample per episode) exports the same records."""
    src = tmp_path / "robo" / "1.0.0"
    write_rlds_source(src)
    run("import", "rlds", str(src), str(tmp_path / "ds"), "--split", "val", "-q", "--granularity", "episode")
    assert len(shardstore.episodes(str(tmp_path / "ds"))) == 2
    out = tmp_path / "out" / "1.0.0"
    run("export", "rlds", str(tmp_path / "ds"), str(out), "-q")
    for name in ("robo-val.tfrecord-00000-of-00002", "robo-val.tfrecord-00001-of-00002"):
        assert (out / name).read_bytes() == (src / name).read_bytes()
    assert not (out / "robo-train.tfrecord-00000-of-00003").exists()


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "robo" / "1.0.0"
    write_rlds_source(src)
    shard = src / "robo-val.tfrecord-00001-of-00002"
    data = bytearray(shard.read_bytes())
    data[20] ^= 1
    shard.write_bytes(bytes(data))
    res = run("import", "rlds", str(src), str(tmp_path / "ds"), code=1)
    lines = [ln for ln in res.output.splitlines() if ln]
    assert len(lines) == 1 and "robo-val.tfrecord-00001-of-00002" in lines[0] and "record 0" in lines[0]
    assert "payload CRC mismatch" in lines[0]
    assert not (tmp_path / "ds").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".ds")]
    res = run("check", "rlds", str(src), code=1)
    assert "FAILED" in res.output and "payload CRC mismatch" in res.output


def test_export_lerobot_dataset(tmp_path: Path) -> None:
    from lerobot_shaped import lerobot_stream

    from shardstore.episodes import EpisodeWriter

    ds = tmp_path / "lr"
    EpisodeWriter(ds).write_stream(lerobot_stream())
    out = tmp_path / "rl" / "1.0.0"
    res = run("export", "rlds", str(ds), str(out), "--main-camera", "observation.images.wrist")
    assert "LeRobot -> RLDS: 3 of 3 episodes (0 failed)" in res.output and "output valid" in res.output
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["main_camera"] == "observation.images.wrist"
    run("check", "rlds", str(out))

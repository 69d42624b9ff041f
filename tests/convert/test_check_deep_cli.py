"""``shardstore check FORMAT PATH --deep`` for every format: one JSON shape (severity, check, file,
episode, frame, field, expected), exit 1 on an error and 0 on a clean source."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from click.testing import CliRunner

from shardstore.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).parent))
from make_episode_wds import rollouts, write_shard  # noqa: E402
from make_lerobot import make_lerobot  # noqa: E402
from rlds_source import write_rlds_source  # noqa: E402


def check(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["check", *map(str, args), "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_lerobot_deep_cli(tmp_path: Path) -> None:
    ds = Path(make_lerobot(str(tmp_path / "v21"), version="v2.1", episodes=2, frames=6, image=False))
    code, report = check("lerobot", ds, "--deep")
    assert code == 0 and report["ok"] and report["deep"] and report["format"] == "LeRobot"
    data = ds / "data/chunk-000/episode_000001.parquet"
    table = pq.read_table(data)
    action = np.stack(table.column("action").to_pylist())
    action[4, 2] = np.nan
    import pyarrow as pa

    cols = {n: table.column(n) for n in table.column_names}
    cols["action"] = pa.FixedSizeListArray.from_arrays(pa.array(action.ravel().astype(np.float32)), 6)
    pq.write_table(pa.table(cols).replace_schema_metadata(table.schema.metadata), data)
    code, report = check("lerobot", ds, "--deep")
    assert code == 1 and not report["ok"]
    (nan,) = [p for p in report["problems"] if p["check"] == "finite"]
    assert (nan["severity"], nan["episode"], nan["frame"], nan["field"]) == ("error", 1, 4, "action")
    assert nan["file"].endswith("episode_000001.parquet") and nan["expected"] == "finite values"
    code, fast = check("lerobot", ds)  # the structural pass does not read values
    assert code == 0 and "problems" in fast


def test_rlds_deep_cli_catches_a_crc(tmp_path: Path) -> None:
    root = tmp_path / "robo" / "1.0.0"
    write_rlds_source(root)
    code, report = check("rlds", root, "--deep")
    assert code == 0 and report["ok"] and report["episodes"] == 7
    shard = root / "robo-train.tfrecord-00000-of-00003"
    data = bytearray(shard.read_bytes())
    data[40] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, report = check("rlds", root, "--deep")
    assert code == 1
    assert any(p["check"] == "format.tfrecord" and p["file"] == shard.name for p in report["problems"])


def test_episode_wds_cli_counts_frames_and_flags_a_cut_trajectory(tmp_path: Path) -> None:
    folder = tmp_path / "src" / "demos" / "magical" / "MoveToCorner"
    rng = np.random.default_rng(0)
    frames = rollouts(rng, [4, 3])
    write_shard(folder / "shard-000000.tar", {"env": "MoveToCorner"}, frames)
    code, report = check("episode-wds", tmp_path / "src", "--deep")
    assert code == 0 and report["episodes"] == 2 and report["frames"] == 7 and report["problems"] == []
    write_shard(folder / "shard-000000.tar", {"env": "MoveToCorner"}, frames[:-1])  # the last take cut
    code, report = check("episode-wds", tmp_path / "src", "--deep")
    assert code == 0  # a warning, not an error
    (cut,) = report["problems"]
    assert (cut["severity"], cut["check"], cut["episode"], cut["field"]) == ("warning", "dones", 1, "dones")


def test_episode_wds_cli_finds_a_lost_frame(tmp_path: Path) -> None:
    import tarfile

    folder = tmp_path / "src" / "demos" / "magical" / "MoveToCorner"
    write_shard(folder / "full.tar", {"env": "MoveToCorner"}, rollouts(np.random.default_rng(1), [4, 3]))
    with tarfile.open(folder / "full.tar") as src, tarfile.open(folder / "shard-000000.tar", "w") as dst:
        for m in src.getmembers():
            if not m.name.startswith("frame_002."):  # a step lost from the middle of a trajectory
                dst.addfile(m, src.extractfile(m))
    (folder / "full.tar").unlink()
    code, report = check("episode-wds", tmp_path / "src", "--deep")
    assert code == 1 and report["parts"] == {"demos/magical/MoveToCorner": {"episodes": 2, "frames": 6}}
    (lost,) = [p for p in report["problems"] if p["check"] == "frames"]
    assert (lost["episode"], lost["frame"], lost["expected"][:9]) == (0, 2, "frame_002")


def test_every_deep_check_draws_a_progress_bar(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """Asked for one (the CLI asks on a terminal, without --quiet or --json), each format's deep
    check draws a bar on stderr, and none without."""
    import importlib

    from minari_sources import cartpole

    from shardstore.cli import DEEP_CHECKS

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    cartpole("test/cartpole/bar-v0", episodes=3)

    write_rlds_source(tmp_path / "robo" / "1.0.0")
    folder = tmp_path / "ewds" / "demos" / "magical" / "MoveToCorner"
    write_shard(folder / "shard-000000.tar", {"env": "MoveToCorner"}, rollouts(np.random.default_rng(0), [4, 3]))
    sources = {
        "lerobot": (make_lerobot(str(tmp_path / "v30"), version="v3.0", episodes=2, frames=6, image=False), "Checking LeRobot"),
        "rlds": (str(tmp_path / "robo" / "1.0.0"), "Checking RLDS"),
        "episode-wds": (str(tmp_path / "ewds"), "Checking episode-wds"),
        "minari": (str(tmp_path / "minari/test/cartpole/bar-v0"), "Checking Minari"),
    }
    for fmt, (src, bar) in sources.items():
        module, name = DEEP_CHECKS[fmt]
        check_fn = getattr(importlib.import_module(module), name)
        kwargs = {"deep": True} if fmt in ("episode-wds", "minari") else {}
        assert check_fn(src, progress=True, **kwargs).ok, fmt
        err = capsys.readouterr().err
        assert bar in err and "100%" in err, (fmt, err)
        assert check_fn(src, progress=False, **kwargs).ok
        assert bar not in capsys.readouterr().err

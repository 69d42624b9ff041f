"""Layout 1 (a tar member per field and step) and layout 2 (the columns layout, the default) hold
the same episodes: for each format, an import in each layout of the same source exports to the
same bytes, the columns import is the smaller one, and ``check`` and ``info`` name each one's layout. Sources
are written with the formats' own tools (h5py, pyarrow and PyAV, TFRecord framing as TFDS writes
it, the research code's tar shards)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def shard_bytes(ds: Path) -> int:
    return sum(p.stat().st_size for p in ds.glob("*.tar"))


def both_layouts(tmp_path: Path, do_import: Callable[[Path, str], object], export: Callable[[Path, Path], object]) -> None:
    """Import in each layout, export each; the exports are identical, layout 2 is the smaller."""
    exports = {}
    for granularity in ("step", "columns"):
        ds = tmp_path / f"ds-{granularity}"
        do_import(ds, granularity)
        layout = json.loads((ds / ".nv-meta/schema.json").read_text())["layout"]
        assert layout == {"version": 2 if granularity == "columns" else 1, "granularity": granularity}
        res = subprocess.run([sys.executable, "-m", "shardstore.cli", "check", str(ds)], capture_output=True, text=True)
        assert res.returncode == 0 and f"episodes: layout {layout['version']} ({granularity}:" in res.stdout, res.stdout
        info = CliRunner().invoke(main, ["info", str(ds)], catch_exceptions=False)
        per = "step" if granularity == "step" else "episode"
        assert info.exit_code == 0 and f"layout {layout['version']}, one sample per {per}" in info.output, info.output
        back = tmp_path / f"back-{granularity}"
        export(ds, back)
        exports[granularity] = tree(back)
    assert exports["step"].keys() == exports["columns"].keys() and len(exports["step"]) > 0
    for name, data in exports["step"].items():
        assert exports["columns"][name] == data, name
    assert shard_bytes(tmp_path / "ds-columns") < shard_bytes(tmp_path / "ds-step") / 2


def test_minari(tmp_path: Path) -> None:
    pytest.importorskip("h5py")
    import minari_sources

    from shardstore.convert.minari import export_minari, import_minari

    src = minari_sources.legacy_hdf5(tmp_path / "legacy-v0", "0.4", episodes=5)  # arrays and a text field
    both_layouts(tmp_path, lambda ds, g: import_minari(src, ds, granularity=g), export_minari)


@pytest.mark.parametrize("frames", [None, "jpg"])
def test_lerobot(tmp_path: Path, frames: str | None) -> None:
    """With the videos kept (frame references) and with the frames decoded into JPEG media."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    from make_lerobot import make_lerobot

    from shardstore.convert.lerobot import export_lerobot, import_lerobot

    src = make_lerobot(str(tmp_path / "src"), version="v3.0", episodes=3, frames=[7, 5, 6])
    both_layouts(tmp_path, lambda ds, g: import_lerobot(src, str(ds), frames=frames, granularity=g),  # type: ignore[arg-type]
                 lambda ds, back: export_lerobot(str(ds), str(back)))


def test_rlds(tmp_path: Path) -> None:
    from rlds_source import write_rlds_source

    from shardstore.convert.rlds import export_rlds, import_rlds

    src = tmp_path / "robo" / "1.0.0"
    write_rlds_source(src)  # images, state, text, flags, two splits
    both_layouts(tmp_path, lambda ds, g: import_rlds(str(src), str(ds), granularity=g),
                 lambda ds, back: export_rlds(str(ds), str(back / "1.0.0")))


def test_episode_wds(tmp_path: Path) -> None:
    from make_episode_wds import rollouts, write_shard

    from shardstore.convert.episode_wds import export_episode_wds, import_episode_wds

    folder = tmp_path / "src" / "demos" / "magical" / "MoveToCorner"
    rng = np.random.default_rng(0)
    write_shard(folder / "shard-000000.tar", {"benchmark": "magical"}, rollouts(rng, [4, 1, 6]))
    both_layouts(tmp_path, lambda ds, g: import_episode_wds(folder, ds, granularity=g), export_episode_wds)


def test_a_layout_newer_than_this_version_is_refused(tmp_path: Path) -> None:
    from shardstore.episodes import Episode, EpisodeWriter
    from shardstore.errors import IndexVersionError

    with EpisodeWriter(tmp_path / "ds") as w:
        w.write(Episode(0, {"obs": np.zeros((3, 2), np.float32)}))
    schema = tmp_path / "ds/.nv-meta/schema.json"
    obj = json.loads(schema.read_text())
    obj["layout"]["version"] = 3
    schema.write_text(json.dumps(obj))
    with pytest.raises(IndexVersionError, match="layout 3"):
        shardstore.episodes(str(tmp_path / "ds"))


def test_a_dataset_written_before_layouts_had_numbers_reads_as_layout_1(tmp_path: Path) -> None:
    """A ``schema.json`` without ``"layout"`` (the writers before layout 2) is layout 1: it reads the
    same, and ``check`` names it."""
    from shardstore.episodes import Episode, EpisodeWriter

    rng = np.random.default_rng(3)
    eps = [Episode(i, {"obs": rng.random((5 + i, 2), dtype=np.float32), "act": rng.integers(0, 4, 5 + i)}) for i in range(3)]
    with EpisodeWriter(tmp_path / "ds", granularity="step") as w:
        for ep in eps:
            w.write(ep)
    schema = tmp_path / "ds/.nv-meta/schema.json"
    obj = json.loads(schema.read_text())
    del obj["layout"]
    schema.write_text(json.dumps(obj))
    view = shardstore.episodes(str(tmp_path / "ds"))
    assert view.layout == 1 and view.granularity == "step"
    for ep in eps:
        got = view[view.position(ep.index)]
        assert all(np.array_equal(got.steps[k], v) for k, v in ep.steps.items())
        assert np.array_equal(view.step(view.position(ep.index), 2)["obs"], ep.steps["obs"][2])
    res = CliRunner().invoke(main, ["check", str(tmp_path / "ds")], catch_exceptions=False)
    assert res.exit_code == 0 and "episodes: layout 1 (step:" in res.output, res.output

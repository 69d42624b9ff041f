"""``check lerobot --deep``: each fault users publish, seeded into a dataset LeRobot's own recorder
wrote (lerobot 0.6.1 in ``.venv-lerobot``; ``SHARDSTORE_LEROBOT_VENV`` names another), is caught
with its file, episode, frame or field; the clean dataset passes with no error and no warning.
Skips when that venv is missing, except in CI, where it fails. v2.1 (which LeRobot 0.6 no longer
writes) uses tools/make_lerobot.py's layout."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot_venv import PEERS, run_lerobot

from shardstore.convert.lerobot.deep import check_deep
from shardstore.episodes.problems import Problem

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from lerobot_faults import DATA, EPISODES, FAULTS, edit_json, edit_table, rows_of, seeded  # noqa: E402
from make_lerobot import make_lerobot  # noqa: E402


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 episodes x 20 frames at 10 fps, written by LeRobot 0.6.1's recorder."""
    out = tmp_path_factory.mktemp("lerobot") / "clean"
    run_lerobot(PEERS / "lerobot_own_writer.py", out, "3", "20")
    return out


def _deep(ds: Path) -> tuple[list[Problem], Any]:
    report = check_deep(str(ds))
    return report.problems, report


def test_clean_lerobot_dataset_passes_with_no_problem(clean: Path) -> None:
    problems, report = _deep(clean)
    assert problems == [] and report.ok, [str(p) for p in problems]
    assert (report.version, report.episodes, report.frames, report.videos) == ("v3.0", 3, 60, 1)
    for name in ("info", "episodes", "features", "rows", "finite", "stats", "video", "video_ranges", "appended_frames"):
        assert name in report.checks
    assert json.loads(report.to_json())["deep"] is True


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_seeded_fault_is_caught(clean: Path, tmp_path: Path, fault: str) -> None:
    _, check, where = FAULTS[fault]
    problems, report = _deep(seeded(clean, tmp_path / "ds", fault))
    assert not report.ok
    hits = [p for p in problems if p.check == check and p.severity == "error"]
    assert any(all(getattr(p, k) == v for k, v in where.items()) for p in hits), [str(p) for p in problems]
    assert all(p.expected for p in hits)  # each says what was expected


def test_stats_are_recomputed_as_lerobot_computes_them(clean: Path) -> None:
    """Pinned against lerobot 0.6.1: our recomputation of an episode's stats (quantiles from its
    histogram included) equals what its writer stored, to the tolerance the check states."""
    from shardstore.convert.lerobot import stats as lstats

    table = pq.read_table(clean / DATA)
    episodes = pq.read_table(clean / EPISODES).to_pylist()
    for ep in (0, 2):
        values = np.stack(table.column("observation.state").to_pylist()[rows_of(ep)]).astype(np.float32)
        mine = lstats.vector_stats(values)
        said = {s: np.asarray(episodes[ep][f"stats/observation.state/{s}"]) for s in mine}
        assert lstats.compare(said, mine) == []
        assert np.allclose(said["q50"], mine["q50"], atol=1e-6)  # the histogram quantile, not np.quantile's
        assert not np.allclose(said["q50"], np.quantile(values, 0.5, axis=0), atol=1e-6)


def test_no_av1_warning_on_v30_and_one_on_v21(tmp_path: Path) -> None:
    """AV1 is LeRobot v3.0's own default (no warning there); the v2.1 document names H.264."""
    for version in ("v2.1", "v3.0"):
        ds = make_lerobot(str(tmp_path / version), version=version, episodes=2, frames=6)
        report = check_deep(ds)
        codec = [p for p in report.problems if p.check == "codec"]
        assert report.ok, [str(p) for p in report.problems if p.severity == "error"]
        assert (len(codec) > 0) == (version == "v2.1")
        assert all(p.severity == "warning" and "'av1'" in p.message for p in codec)


def test_v21_faults(tmp_path: Path) -> None:
    """v2.1's per-episode files: a timestamp jump, an index gap and a video longer than its rows."""
    ds = Path(make_lerobot(str(tmp_path / "v21"), version="v2.1", episodes=3, frames=[8, 8, 10], image=False))
    data = ds / "data/chunk-000/episode_000001.parquet"

    def edit(cols: dict[str, Any]) -> None:
        cols["timestamp"][3] += 0.25
        cols["index"] = [i + 2 for i in cols["index"]]

    edit_table(data, edit)
    cam = "observation.images.front"
    shutil.copy(ds / f"videos/chunk-001/{cam}/episode_000002.mp4", ds / f"videos/chunk-000/{cam}/episode_000000.mp4")
    edit_json(ds / "meta/info.json", lambda i: i.__setitem__("total_frames", 27))
    problems, report = _deep(ds)
    found = {(p.check, p.episode, p.field) for p in problems if p.severity == "error"}
    assert ("timestamps", 1, "timestamp") in found
    assert ("rows", 1, "index") in found
    assert ("info", None, "total_frames") in found
    assert any(p.check == "video" and p.episode == 0 and p.camera == cam for p in problems), [str(p) for p in problems]


def test_segment_stats_equal_each_episodes_own() -> None:
    """A data file's stats computed for all its episodes at once (``stats.segment_stats``, what the
    check does) equal each episode's computed alone, bit for bit: episodes of one row and of none,
    constant columns, integers, float32 values far from 0 (bunched histogram edges)."""
    from shardstore.convert.lerobot import stats as lstats

    rng = np.random.default_rng(2)
    for t in range(40):
        lengths = rng.integers(0 if t % 3 else 1, 200, size=int(rng.integers(1, 7)))
        x = rng.normal(size=(int(lengths.sum()), int(rng.integers(1, 5)))) * rng.uniform(0.01, 50)
        x = (x + [0.0, 1e6, -3.0][t % 3]).astype([np.float32, np.float64, np.int64][t % 3])
        if t % 4 == 0:
            x[:, 0] = 2
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        together = lstats.segment_stats(x, bounds)
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            alone = lstats.vector_stats(x[a:b]) if b > a else {}
            assert set(together[k]) == set(alone), (t, k)
            for stat, value in alone.items():
                assert np.array_equal(together[k][stat], value), (t, k, stat)


def test_stats_equal_lerobots_own_on_random_arrays(tmp_path: Path) -> None:
    """``stats.vector_stats`` against lerobot 0.6.1's ``get_feature_stats`` itself (run in its venv)
    on arrays with ties, constant columns, float32 and float64: equal, quantiles included."""
    from shardstore.convert.lerobot import stats as lstats

    rng = np.random.default_rng(1)
    arrays = {}
    for t in range(60):
        x = rng.normal(size=(int(rng.integers(1, 400)), 5)) * rng.uniform(0.001, 100)
        x = x.astype(np.float32 if t % 2 else np.float64)
        if t % 5 == 0:
            x = np.round(x)
        if t % 7 == 0:
            x[:, 0] = 3.0
        if t % 9 == 0:  # far from 0: rounding bunches the float32 histogram edges
            x = x + np.asarray(1e6, x.dtype)
        arrays[f"a{t}"] = x
    np.savez(tmp_path / "in.npz", **arrays)
    script = (
        "import sys, numpy as np\n"
        "from lerobot.datasets.compute_stats import get_feature_stats\n"
        "z = np.load(sys.argv[1])\n"
        "np.savez(sys.argv[2], **{f'{k}/{s}': np.asarray(v) for k in z.files"
        " for s, v in get_feature_stats(z[k], axis=0, keepdims=False).items()})\n"
    )
    run_lerobot("-c", script, tmp_path / "in.npz", tmp_path / "out.npz")
    theirs = np.load(tmp_path / "out.npz")
    for key, x in arrays.items():
        for stat, value in lstats.vector_stats(x).items():
            assert np.array_equal(np.asarray(value, np.float64).ravel(), theirs[f"{key}/{stat}"].astype(np.float64).ravel()), (key, stat)


DOCTOR = Path(os.environ.get("SHARDSTORE_LEROBOT_DOCTOR", ROOT / ".venv-doctor" / "bin" / "lerobot-doctor"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_finds_every_fault_lerobot_doctor_finds(clean: Path) -> None:
    """Each seeded fault that lerobot-doctor (PyPI, in a venv of its own: ``pip install
    lerobot-doctor``; SHARDSTORE_LEROBOT_DOCTOR names its command) reports, shardstore reports as an
    error too: tools/bench/check.py's comparison, asserted."""
    import argparse
    import importlib.util

    if not DOCTOR.exists():
        pytest.skip(f"no lerobot-doctor at {DOCTOR}")
    spec = importlib.util.spec_from_file_location("bench_check", ROOT / "tools" / "bench" / "check.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    found = bench.faults(argparse.Namespace(doctor=str(DOCTOR), clean=str(clean)))
    assert set(found) == set(FAULTS)
    assert any(f["lerobot_doctor_found"] for f in found.values())  # the doctor ran and saw faults
    missed = {name: f["lerobot_doctor"] for name, f in found.items() if f["lerobot_doctor_found"] and not f["shardstore_found"]}
    assert not missed


@pytest.mark.parametrize(
    "kept", [{"min": "abc", "max": [9.0], "count": [4]}, 5, {"count": []}, {"count": "four"}],
    ids=["text-min", "not-an-object", "empty-count", "text-count"],
)
def test_an_exports_kept_stats_that_are_not_numbers_are_computed_again(kept: Any) -> None:
    """An export keeps an episode's stats from the store's metadata (the source's); one that is not
    numbers there (the metadata edited by hand) is computed again like a missing one, where it ended
    the export with ``ValueError: could not convert string to float`` (or an AttributeError)."""
    from shardstore.convert.lerobot import stats as lstats

    values = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = lstats.episode_stats({"action": kept}, {"action": lambda: values}, (), 4)["action"]
    fresh = lstats.vector_stats(values)
    assert np.array_equal(got["min"], fresh["min"]) and int(got["count"][0]) == 4
    if isinstance(kept, dict) and "max" in kept:  # a stat that is numbers is still the source's
        assert got["max"].tolist() == [9.0]

"""``check minari [--deep]``: faults seeded into a dataset minari's own DataCollector wrote (edited
with h5py and json afterwards) are caught with their episode, step and field; the clean one passes."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("minari", reason="the test extra (minari) is not installed")
pytest.importorskip("jax", reason="minari's DataCollector needs jax (minari[create])")
import h5py  # noqa: E402

from shardstore.convert.minari.check import check_minari  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from minari_sources import cartpole  # noqa: E402


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        cartpole("test/cartpole/deep-v0", episodes=4)
        yield root / "test/cartpole/deep-v0"
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def _h5(edit: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def seed(ds: Path) -> None:
        with h5py.File(ds / "data/main_data.hdf5", "r+") as f:
            edit(f)

    return seed


def _meta(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def seed(ds: Path) -> None:
        path = ds / "data/metadata.json"
        obj = json.loads(path.read_text())
        edit(obj)
        path.write_text(json.dumps(obj))

    return seed


def _set(field: str, ep: int, row: int, value: Any) -> Callable[[Path], None]:
    def edit(f: h5py.File) -> None:
        f[f"episode_{ep}/{field}"][row] = value

    return _h5(edit)


def _drop_observation_row(f: h5py.File) -> None:
    obs = f["episode_1/observations"][()]
    del f["episode_1/observations"]
    f["episode_1/observations"] = obs[:-1]


FAULTS: dict[str, tuple[Callable[[Path], None], str, dict[str, Any]]] = {
    "total_steps_lies": (_meta(lambda m: m.__setitem__("total_steps", m["total_steps"] + 3)), "totals", {"field": "total_steps"}),
    "total_episodes_lies": (_meta(lambda m: m.__setitem__("total_episodes", 9)), "totals", {"field": "total_episodes"}),
    "space_not_serialized": (_meta(lambda m: m.__setitem__("action_space", {"type": "Discrete"})), "metadata", {"field": "action_space"}),
    "space_not_json": (_meta(lambda m: m.__setitem__("observation_space", "[[[[")), "metadata", {"field": "observation_space"}),
    "termination_mid_episode": (_set("terminations", 2, 1, True), "terminal", {"episode": 2, "frame": 1}),
    "truncation_mid_episode": (_set("truncations", 0, 0, True), "terminal", {"episode": 0, "frame": 0, "field": "truncations"}),
    "action_outside_discrete": (_set("actions", 3, 2, 7), "spaces", {"episode": 3, "frame": 2, "field": "actions"}),
    "observation_outside_box": (_set("observations", 1, 2, [9.0, 0, 0, 0]), "spaces", {"episode": 1, "frame": 2}),
    "nan_observation": (_set("observations", 0, 3, [np.nan, 0, 0, 0]), "finite", {"episode": 0, "frame": 3}),
    "steps_not_steps_plus_one": (_h5(_drop_observation_row), "read", {}),
}


def test_clean_minari_dataset_passes(clean: Path) -> None:
    for deep in (False, True):
        report = check_minari(str(clean), deep=deep)
        assert report.ok and report.problems == [], [str(p) for p in report.problems]
        assert report.episodes == 4 and report.frames > 0 and report.version == "0.5"
    assert "spaces" in report.checks and "terminal" in report.checks


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_seeded_minari_fault_is_caught(clean: Path, tmp_path: Path, fault: str) -> None:
    seed, check, where = FAULTS[fault]
    ds = tmp_path / "ds"
    shutil.copytree(clean, ds)
    seed(ds)
    report = check_minari(str(ds), deep=True)
    assert not report.ok
    hits = [p for p in report.problems if p.check == check and p.severity == "error"]
    assert any(all(getattr(p, k) == v for k, v in where.items()) for p in hits), [str(p) for p in report.problems]


def test_minari_refuses_a_space_that_is_not_json(clean: Path, tmp_path: Path) -> None:
    """What ``space_not_json`` pins: minari's loader deserializes the spaces when it opens the dataset."""
    from minari.dataset.minari_dataset import MinariDataset

    ds = tmp_path / "ds"
    shutil.copytree(clean, ds)
    FAULTS["space_not_json"][0](ds)
    with pytest.raises(ValueError):  # json.JSONDecodeError
        MinariDataset(str(ds / "data"))

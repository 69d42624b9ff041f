"""Minari in and out, against the real ``minari`` package (0.5 layouts, written by its DataCollector)
and h5py (the 0.3/0.4 layouts): import, read every episode and step at random and compare every
array with the source, export, load the export with ``minari.load_dataset`` and compare again."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("minari", reason="the test extra (minari) is not installed")
pytest.importorskip("h5py")
pytest.importorskip("pyarrow")
pytest.importorskip("jax", reason="minari's DataCollector needs jax (minari[create])")

import h5py  # noqa: E402
import minari  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import minari_sources  # noqa: E402
from minari_sources import h5_tree  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.minari import export_minari, import_minari, read_minari  # noqa: E402
from shardstore.errors import ConfigError, EpisodeFormatError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
SOURCES = ["cartpole/hdf5-v0", "robot/hdf5-v0", "robot/arrow-v0", "robot/parquet-v0"]


@pytest.fixture(scope="module")
def minari_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """MINARI_DATASETS_PATH with the datasets of SOURCES, written by minari's DataCollector."""
    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    minari_sources.cartpole("cartpole/hdf5-v0", 5)
    for fmt in ("hdf5", "arrow", "parquet"):
        minari_sources.robot(f"robot/{fmt}-v0", 6, fmt)
    yield root
    if old is None:
        os.environ.pop("MINARI_DATASETS_PATH", None)
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


@pytest.fixture(scope="module")
def imported(minari_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each source imported once (by its dataset id), in the default layout; CartPole also per episode (layout 1)."""
    out = tmp_path_factory.mktemp("imported")
    done = {}
    for src in SOURCES:
        done[src] = out / src.replace("/", "_")
        report = import_minari(src, done[src], shard_size=40_000)
        assert report.episodes == minari.load_dataset(src).total_episodes
    done["cartpole/episode"] = out / "cartpole_episode"
    import_minari("cartpole/hdf5-v0", done["cartpole/episode"], granularity="episode")
    return done


def leaf(data: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in minari's EpisodeData (Tuple members by ``_index_<i>``)."""
    obj = getattr(data, path[0])
    for comp in path[1:]:
        obj = obj[int(comp.removeprefix("_index_"))] if isinstance(obj, tuple) else obj[comp]
    return obj


def jpeg_rows(frames: list[bytes]) -> np.ndarray:
    return np.stack([np.array(Image.open(io.BytesIO(b)), dtype=np.uint8) for b in frames])


def assert_field(spec: Any, got: Any, want: Any) -> None:
    if spec.kind == "media":
        want = np.asarray(want)
        assert jpeg_rows(got).tobytes() == want.tobytes(), spec.name
    elif spec.kind == "text":
        assert list(got) == list(want), spec.name
    else:
        want = np.asarray(want)
        assert (got.dtype, got.shape) == (want.dtype, want.shape), spec.name
        assert got.tobytes() == want.tobytes(), spec.name


def plain(value: Any) -> Any:
    """Minari's view of episode metadata: HDF5's flat ``options/x`` nested, numpy scalars as Python."""
    out: dict[str, Any] = {}
    for key, v in value.items():
        node = out
        *parents, last = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v.item() if isinstance(v, np.generic) else v
    return out


def deep_equal(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            deep_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, tuple | list) and not isinstance(a, np.ndarray):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            deep_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert a.tobytes() == b.tobytes(), where
    else:
        assert a == b, where


def assert_same_minari(got: Any, want: Any, differ: tuple[str, ...] = ()) -> None:
    """Two MinariDatasets hold the same episodes, episode metadata and dataset metadata (but for
    the keys in ``differ``, and the size on disk)."""
    assert (got.total_episodes, got.total_steps) == (want.total_episodes, want.total_steps)
    assert got.observation_space == want.observation_space and got.action_space == want.action_space
    g_meta, w_meta = dict(got.storage.metadata), dict(want.storage.metadata)
    for key in ("dataset_size", *differ):
        g_meta.pop(key, None)
        w_meta.pop(key, None)
    assert g_meta == w_meta
    n = want.total_episodes
    deep_equal(list(got.storage.get_episode_metadata(range(n))), list(want.storage.get_episode_metadata(range(n))))
    for g, w in zip(got.iterate_episodes(), want.iterate_episodes(), strict=True):
        for name in ("id", "observations", "actions", "rewards", "terminations", "truncations", "infos"):
            deep_equal(getattr(g, name), getattr(w, name), f"episode {w.id} {name}")


@pytest.mark.parametrize("src", SOURCES)
def test_every_episode_and_step_equals_the_source(src: str, imported: dict[str, Path]) -> None:
    source = minari.load_dataset(src)
    episodes = {ep.id: ep for ep in source.iterate_episodes()}
    metas = list(source.storage.get_episode_metadata(range(source.total_episodes)))
    for key in (src, "cartpole/episode") if src.startswith("cartpole") else (src,):
        view = shardstore.episodes(str(imported[key]))
        assert view.schema.source_format == "minari" and view.schema.source_version == "0.5"
        rng = np.random.default_rng(7)
        for e in rng.permutation(len(view)).tolist():
            got = view[e]
            want = episodes[got.index]
            assert got.terminal == bool(want.terminations[-1])
            assert plain(got.metadata) == {k: v for k, v in metas[got.index].items()}
            for spec in view.schema.fields:
                assert_field(spec, got.steps[spec.name], leaf(want, spec.source_path))
            n = len(want.rewards)
            for t in rng.permutation(n).tolist():  # every step, in random order
                step = view.step(e, t)
                for spec in view.schema.fields:
                    value = step[spec.name]
                    if spec.kind == "media":
                        assert value == got.steps[spec.name][t]
                    elif spec.kind == "text":
                        assert value == got.steps[spec.name][t]
                    else:
                        assert value.dtype == got.steps[spec.name].dtype
                        assert value.tobytes() == got.steps[spec.name][t, ...].tobytes()
            final = view.step(e, n)  # the observation after the last action
            assert bool(final["is_last"]) and bool(final["is_terminal"]) == got.terminal


def test_jpeg_images_keep_their_bytes(imported: dict[str, Path], minari_root: Path) -> None:
    view = shardstore.episodes(str(imported["robot/hdf5-v0"]))
    with h5py.File(minari_root / "robot/hdf5-v0/data/main_data.hdf5") as f:
        for e in range(len(view)):
            ep = view[e]
            raw = f[f"episode_{ep.index}/observations/pixels"][()]
            assert ep.steps["observations.pixels"] == [np.asarray(r, np.uint8).tobytes() for r in raw]
            assert ep.steps["observations.pixels"][0][:2] == b"\xff\xd8"


@pytest.mark.parametrize("src", SOURCES)
def test_export_loads_in_minari_and_equals_the_source(src: str, imported: dict[str, Path], minari_root: Path) -> None:
    dest_id = f"exported/{src.replace('/', '_')}"
    report = export_minari(imported[src], minari_root / dest_id)
    assert report.version == "0.5" and report.backend == src.split("/")[1].split("-")[0]
    assert_same_minari(minari.load_dataset(dest_id), minari.load_dataset(src))
    kept = (minari_root / src / "data/metadata.json").read_bytes()
    assert (minari_root / dest_id / "data/metadata.json").read_bytes() == kept  # byte for byte


@pytest.mark.parametrize(("src", "backend"), [("robot/hdf5-v0", "arrow"), ("robot/arrow-v0", "hdf5"), ("robot/parquet-v0", "hdf5")])
def test_export_to_another_backend(src: str, backend: str, imported: dict[str, Path], minari_root: Path) -> None:
    dest_id = f"converted/{src.split('/')[1].split('-')[0]}-to-{backend}-v0"
    export_minari(imported[src], minari_root / dest_id, backend=backend)
    assert json.loads((minari_root / dest_id / "data/metadata.json").read_bytes())["data_format"] == backend
    assert_same_minari(minari.load_dataset(dest_id), minari.load_dataset(src), differ=("data_format",))


@pytest.mark.parametrize("version", ["0.3", "0.4"])
def test_legacy_layouts_round_trip(version: str, tmp_path: Path) -> None:
    src = minari_sources.legacy_hdf5(tmp_path / f"legacy-{version}-v0", version)
    out = tmp_path / "ds"
    import_minari(src, out)
    view = shardstore.episodes(str(out))
    assert view.schema.source_version == version
    with h5py.File(src / "data/main_data.hdf5") as f:
        for e in range(len(view)):
            got = view[e]
            group = f[f"episode_{got.index}"]
            for spec in view.schema.fields:
                ds = group["/".join(spec.source_path)]
                if spec.kind == "text":
                    assert got.steps[spec.name] == ds.asstr()[()].tolist()
                else:
                    want = ds[()]
                    assert (got.steps[spec.name].dtype, got.steps[spec.name].shape) == (want.dtype, want.shape)
                    assert got.steps[spec.name].tobytes() == want.tobytes()
            assert {k: type(v) for k, v in got.metadata.items()} == {k: type(v) for k, v in group.attrs.items()}
    export_minari(out, tmp_path / "back")
    assert h5_tree(tmp_path / "back/data/main_data.hdf5") == h5_tree(src / "data/main_data.hdf5")
    if version == "0.4":  # into the 0.5 layout, which the installed minari reads
        os.environ["MINARI_DATASETS_PATH"], old = str(tmp_path), os.environ.get("MINARI_DATASETS_PATH", "")
        try:
            export_minari(out, tmp_path / "as05-v0", version="0.5")
            loaded = minari.load_dataset("as05-v0")
            with h5py.File(src / "data/main_data.hdf5") as f:
                for ep in loaded.iterate_episodes():
                    group = f[f"episode_{ep.id}"]
                    assert ep.actions[1].tobytes() == group["actions/_index_1"][()].tobytes()
                    assert ep.observations["mission"] == group["observations/mission"].asstr()[()].tolist()
        finally:
            os.environ["MINARI_DATASETS_PATH"] = old


def test_source_by_id_folder_or_data_folder(minari_root: Path) -> None:
    by_id = read_minari("robot/hdf5-v0")
    for src in (minari_root / "robot/hdf5-v0", minari_root / "robot/hdf5-v0/data"):
        stream = read_minari(src)
        assert stream.schema == by_id.schema and stream.count == by_id.count == 6
    assert by_id.source_files.keys() == {"data/metadata.json"}
    with pytest.raises(EpisodeFormatError, match="no Minari dataset folder or dataset id"):
        read_minari("robot/missing-v0")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardstore.cli", *args], capture_output=True, text=True, timeout=300)


def test_bad_input_names_file_episode_and_field(tmp_path: Path, minari_root: Path) -> None:
    out = tmp_path / "out"
    not_minari = tmp_path / "x" / "data"
    not_minari.mkdir(parents=True)
    with h5py.File(not_minari / "main_data.hdf5", "w") as f:
        f.create_group("foo").create_dataset("bar", data=[1, 2])
    src = minari_sources.legacy_hdf5(tmp_path / "short-v0", "0.4")
    with h5py.File(src / "data/main_data.hdf5", "a") as f:
        del f["episode_2/actions/_index_1"]
        f["episode_2/actions"].create_dataset("_index_1", data=np.zeros((1, 2), np.float32))
    no_meta = tmp_path / "nometa"
    shutil.copytree(minari_root / "robot/arrow-v0", no_meta)
    (no_meta / "data/metadata.json").unlink()
    cases = [
        (tmp_path / "x", "main_data.hdf5: not a Minari dataset"),
        (src, r"main_data.hdf5, episode 2, field 'actions._index_1': 1 rows where the episode has \d+ steps"),
        (no_meta, "metadata.json: missing"),
    ]
    for source, message in cases:
        with pytest.raises(EpisodeFormatError, match=message):
            import_minari(source, out)
        assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
        proc = run_cli("import", "minari", str(source), str(out))
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("shardstore: error: ") and not out.exists()


def test_cli_import_info_export_and_force(tmp_path: Path, minari_root: Path) -> None:
    env_src = "cartpole/hdf5-v0"
    out = tmp_path / "cp"
    proc = run_cli("import", "minari", env_src, str(out), "--split-ratio", "3,1,1", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["episodes"] == 5 and summary["steps"] == minari.load_dataset(env_src).total_steps
    assert set(summary) >= {"episodes", "steps", "bytes", "seconds"} and summary["extras"]["splits"] == {"train": 3, "val": 1, "test": 1}
    info = run_cli("info", str(out))
    assert "episodes     5 (" in info.stdout and "source: minari 0.5" in info.stdout
    exported = run_cli("export", "minari", str(out), str(minari_root / "cli/cp-v0"), "--json")  # from 3 splits
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["steps"] == summary["steps"]
    assert_same_minari(minari.load_dataset("cli/cp-v0"), minari.load_dataset(env_src))
    again = run_cli("import", "minari", env_src, str(out))
    assert again.returncode == 1 and "already holds a dataset" in again.stderr
    assert run_cli("import", "minari", env_src, str(out), "--force", "-q").returncode == 0
    assert [v.number(e) for v in [shardstore.episodes(str(out))] for e in range(len(v))] == list(range(5))
    refused = run_cli("export", "minari", str(out), str(minari_root / "cli/cp-v0"))
    assert refused.returncode == 1 and "already holds a Minari dataset" in refused.stderr


def test_interrupted_import_leaves_nothing_and_a_rerun_succeeds(tmp_path: Path, minari_root: Path) -> None:
    out = tmp_path / "ds"
    script = textwrap.dedent(f"""
        import os, signal
        from shardstore.convert import minari as m
        from shardstore.episodes import EpisodeWriter
        stream = m.read_minari({str(minari_root / 'robot/hdf5-v0')!r})
        def interrupted(episodes):
            for i, ep in enumerate(episodes):
                if i == 3:
                    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle
                yield ep
        stream.episodes = interrupted(stream.episodes)
        EpisodeWriter({str(out)!r}).write_stream(stream)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    import_minari(minari_root / "robot/hdf5-v0", out)
    assert len(shardstore.episodes(str(out))) == 6


def test_export_refuses_a_layout_that_cannot_hold_the_backend(imported: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="only the hdf5 backend"):
        export_minari(imported["robot/arrow-v0"], tmp_path / "x", version="0.4", backend="arrow")
    assert not (tmp_path / "x").exists()

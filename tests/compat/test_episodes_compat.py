"""An imported Minari dataset with the real megatron-energon, in either layout: Energon's loader
reads every sample (exact bytes; layout 2: one per episode, whose ``steps.npy`` its decoder turns
into the record array and whose ``blobs.bin`` it passes through; layout 1: one per step), and
``energon prepare`` of the same shards keeps the episode index, the schema and the source files,
so the episode view still reads after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from energon_peer import energon_samples, missing_peer

import shardstore
from shardstore.convert.minari import import_minari

pytestmark = pytest.mark.compat
try:
    import megatron.energon  # noqa: F401
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)
pytest.importorskip("h5py")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
import minari_sources  # noqa: E402

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module", params=["columns", "step"])
def imported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("compat-episodes")
    src = minari_sources.legacy_hdf5(base / "legacy-v0", "0.4", episodes=6)
    (src / "README.md").write_text("kept byte for byte under .nv-meta/source/\n")
    out = base / "ds"
    import_minari(src, out, split_ratio="4,1,1", shard_size=8_000, granularity=request.param)
    return out


def test_energon_loader_reads_every_sample(imported: Path) -> None:
    columns = shardstore.episodes(str(imported)).granularity == "columns"
    for split in ("train", "val", "test"):  # parts stay bytes, compared as such
        want = {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")} for s in shardstore.open(str(imported), split)}
        got = dict(energon_samples(imported, split))
        assert got == want and len(got) > 0
        view = shardstore.open(str(imported), split).episodes
        # layout 2: a sample per episode; layout 1: a sample per step, plus the final observation
        assert (len(view) if columns else sum(int(n) + 1 for n in view.lengths)) == len(got)


def test_energon_decoder_reads_the_step_records(imported: Path) -> None:
    """Energon's default decoder turns ``steps.npy`` into the records the view reads its arrays from."""
    if shardstore.episodes(str(imported)).granularity != "columns":
        pytest.skip("layout 2 only")
    view = shardstore.episodes(str(imported), "train")
    seen = 0
    for key, parts in energon_samples(imported, "train", decode=True):
        e = view.position(int(key[1:]))
        episode, records = view[e], parts["steps.npy"]
        n = int(view.lengths[e])
        assert isinstance(records, np.ndarray) and records["is_first"][0] and records["is_last"][-1]
        for f in view.schema.fields:
            if f.kind == "array":
                rows = n + 1 if f.rows == "steps+1" else n
                assert records[f.name][:rows].tobytes() == episode.steps[f.name].tobytes(), f.name
        assert isinstance(parts["blobs.bin"], bytes)  # the text field's values, passed through
        seen += 1
    assert seen == len(view)


def test_energon_prepare_keeps_the_episode_files(imported: Path, tmp_path: Path) -> None:
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(imported, ds)
    before = shardstore.episodes(str(ds))
    episodes = [before[e] for e in range(len(before))]
    cmd = [str(BIN / "energon"), "prepare", str(ds), "--non-interactive", "--no-progress", "--num-workers", "1",
           "--split-parts", "train:train-.*", "--split-parts", "val:val-.*", "--split-parts", "test:test-.*",
           "--force-overwrite"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, input="y\n")
    assert res.returncode == 0, res.stdout + res.stderr
    meta = ds / ".nv-meta"
    assert {"episodes.sqlite", "schema.json", "source"} <= {p.name for p in meta.iterdir()}
    after = shardstore.episodes(str(ds))
    assert len(after) == len(episodes)
    assert after.source_file("README.md") == (imported.parent / "legacy-v0/README.md").read_bytes()
    for e, want in enumerate(episodes):
        got = after[e]
        assert got.index == want.index and got.metadata.keys() == want.metadata.keys()
        for name, value in want.steps.items():
            assert np.asarray(got.steps[name]).tobytes() == np.asarray(value).tobytes(), name

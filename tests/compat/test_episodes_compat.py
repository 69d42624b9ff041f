"""An imported Minari dataset with the real megatron-energon: Energon's loader reads every step
sample (exact bytes), and ``energon prepare`` of the same shards keeps the episode index, the
schema and the source files, so the episode view still reads after it."""

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


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("compat-episodes")
    src = minari_sources.legacy_hdf5(base / "legacy-v0", "0.4", episodes=6)
    (src / "README.md").write_text("kept byte for byte under .nv-meta/source/\n")
    out = base / "ds"
    import_minari(src, out, split_ratio="4,1,1", shard_size=8_000)
    return out


def test_energon_loader_reads_every_step(imported: Path) -> None:
    for split in ("train", "val", "test"):  # .npy parts stay bytes, compared as such
        want = {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")} for s in shardstore.open(str(imported), split)}
        got = dict(energon_samples(imported, split))
        assert got == want and len(got) > 0
        view = shardstore.open(str(imported), split).episodes
        assert sum(int(n) + 1 for n in view.lengths) == len(got)  # a sample per step, plus the final observation


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

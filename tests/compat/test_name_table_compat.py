"""Lookups by member name through the name table on a dataset the real megatron-energon 7.4 prepared
(no shardstore.json, no table from prepare: shardstore builds it from Energon's index.sqlite), checked
against tarfile's view of the shards and against Energon's own ``WebdatasetFileStore``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ci import in_ci

import shardstore
from shardstore.errors import SampleNotFoundError
from shardstore.filestores import IndexedTarStore
from shardstore.index import names as name_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_dataset import expected, extra_shard  # noqa: E402  (tests/test_dataset.py)

pytestmark = pytest.mark.compat

ENERGON7 = Path(sys.executable).parent / "energon"


def test_name_table_on_an_energon_prepared_dataset(
    make_shards: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not ENERGON7.exists():
        if in_ci():
            pytest.fail(f"{ENERGON7} is missing; CI must run the compatibility tests")
        pytest.skip(f"{ENERGON7} is missing (install the `compat` extra)")
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    monkeypatch.setenv("SHARDSTORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SHARDSTORE_NAME_TABLE_AFTER", "0")
    root = make_shards(shards=3, samples=5, min_kb=1, max_kb=2)
    extra_shard(root / "parts" / "extra.tar")  # folder keys with dots, multi-dot parts, a GNU long name
    res = subprocess.run(
        [str(ENERGON7), "prepare", str(root), "--non-interactive", "--no-progress", "--num-workers", "1",
         "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert not (root / ".nv-meta" / "shardstore.json").exists()
    meta = sorted((root / ".nv-meta").iterdir())

    members = {f"{key}.{part}": data for _, key, parts in expected(root, None) for part, data in parts.items()}
    assert "dir.with.dots/k1.seg.png" in members and len(members) > 40
    store = IndexedTarStore(str(root))
    ds = shardstore.open(str(root), split=None)
    theirs = WebdatasetFileStore(EPath(str(root)))
    assert {n: store[n] for n in members} == members
    assert {n: ds.read_file(n) for n in members} == members
    assert all(theirs[n][0] == data for n, data in members.items())
    assert store.dataset.index._find is not None and ds.index._find is not None  # the table answered
    assert sorted((root / ".nv-meta").iterdir()) == meta  # the table went to the cache
    assert len(list((tmp_path / "cache" / "names").glob(f"*.v{name_tables._VERSION}"))) == 1
    for missing in ("dir.with.dots/k1.nope", "__meta__/info.json", "noextension", "s00000_000000"):
        assert missing not in store
        with pytest.raises(SampleNotFoundError):
            ds.read_file(missing)

"""shardstore reads datasets that the real megatron-energon prepared: 7.4 (in .venv) and 6.0 (its own
venv, ``.venv-energon6``, made by ``make test`` from ``energon6-requirements.txt``).

Every sample is read by position, key and member name and compared with ``tarfile``'s view of the
shards; with excludes in split.yaml, shardstore's positions are compared with Energon's own reader
(``ShardInfosITarReader`` returns None for an excluded sample). Energon 6's format is checked to be
what the test means to cover: an ``id`` column, no ``sample_parts``, a WAL-mode database, ``.info.yaml``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from ci import in_ci

import shardstore
from shardstore.errors import SampleNotFoundError, StaleIndexError
from shardstore.samples import SAMPLE_CLASSES, own_fields

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_dataset import expected, extra_shard  # noqa: E402  (tests/test_dataset.py)

pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parents[2]
ENERGON7 = Path(sys.executable).parent / "energon"
ENERGON6 = Path(os.environ.get("SHARDSTORE_ENERGON6_VENV", ROOT / ".venv-energon6")) / "bin" / "energon"


def _need(tool: Path, how: str) -> None:
    if tool.exists():
        return
    why = f"{tool} is missing ({how})"
    if in_ci():
        pytest.fail(why + "; CI must run the read-compatibility tests")
    pytest.skip(why)


def _run(cmd: list[str], stdin: str | None = None) -> None:
    res = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{cmd}: {res.stdout[-2000:]}{res.stderr[-2000:]}"


def _dataset(make_shards: Callable[..., Path], **kw: object) -> Path:
    """5 generated shards x 5 samples and the hand-made shard (folder keys, a GNU long name, skipped members)."""
    root = make_shards(shards=5, samples=5, min_kb=1, max_kb=2, **kw)
    extra_shard(root / "parts" / "extra.tar")
    return root


#: Explicit splits (a 4,1,1 ratio over 6 shards leaves Energon's test split empty).
SPLIT_PARTS = [
    "--split-parts", r"train:parts/data-00000[0-3]\.tar",
    "--split-parts", r"val:parts/data-000004\.tar",
    "--split-parts", r"test:parts/extra\.tar",
]


def _set_excludes(root: Path, exclude: list[str]) -> None:
    path = root / ".nv-meta" / "split.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["exclude"] = exclude
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _read_everything(root: Path, split: str | None) -> int:
    """Every sample by position, key and member name equals tarfile's view; returns the count."""
    want = expected(root, split)
    ds = shardstore.open(str(root), split)
    assert len(ds) == len(want)
    for i, (shard, key, parts) in enumerate(want):
        sample = ds[i]
        assert (sample["__key__"], sample["__shard__"], sample["__index__"]) == (key, shard, i)
        assert {k: v for k, v in sample.items() if not k.startswith("__")} == parts
        assert ds.get(key) == sample and key in ds
        for part, data in parts.items():
            assert ds.read_file(f"{key}.{part}") == data
    assert list(ds.keys()) == [key for _, key, _ in want]
    return len(want)


def _energon_reader_view(root: Path, split: str) -> list[tuple[str, dict[str, bytes]] | None]:
    """What Energon 7's own training reader returns per position of a split (None: excluded)."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.flavors.webdataset.itar_reader import ShardInfosITarReader
    from megatron.energon.flavors.webdataset.metadata import WebdatasetMeta

    meta = WebdatasetMeta.from_config(EPath(str(root)), split_part=split)
    reader = ShardInfosITarReader(
        EPath(str(root)), meta.shards, sample_filter=lambda name: name not in meta.sample_excludes
    )
    out: list[tuple[str, dict[str, bytes]] | None] = []
    for i in range(len(reader)):
        sample = reader[i]
        out.append(None if sample is None else (sample["__key__"], {k: v for k, v in sample.items() if not k.startswith("__")}))
    return out


def _shardstore_view(root: Path, split: str) -> list[tuple[str, dict[str, bytes]] | None]:
    ds = shardstore.open(str(root), split)
    out: list[tuple[str, dict[str, bytes]] | None] = []
    for i in range(len(ds)):
        try:
            s = ds[i]
        except SampleNotFoundError:
            out.append(None)
            continue
        out.append((s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")}))
    return out


# ----- Energon 7 -------------------------------------------------------------------------------------


def test_energon7_prepared_dataset(make_shards: Callable[..., Path]) -> None:
    _need(ENERGON7, "install the `compat` extra")
    root = _dataset(make_shards, real_images=True)
    _run([
        str(ENERGON7), "prepare", str(root), "--non-interactive", "--no-progress", "--num-workers", "1",
        *SPLIT_PARTS, "--sample-type", "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}',
    ])
    assert not (root / ".nv-meta" / "shardstore.json").exists()
    assert sum(_read_everything(root, split) for split in ("train", "val", "test")) == _read_everything(root, None)
    # Energon's dataset.yaml drives typed samples
    typed = shardstore.open(str(root), "train", field_map=True)[3]
    assert type(typed).__name__ == "CaptioningSample" and typed.caption == shardstore.open(str(root))[3]["txt"].decode()
    # excludes: a whole shard, and samples (one with a folder key) that keep their slot
    _set_excludes(root, ["parts/data-000001.tar", "parts/data-000002.tar/s00002_000003", "parts/extra.tar/dir.with.dots/k2"])
    for split in ("train", "test"):
        ours, theirs = _shardstore_view(root, split), _energon_reader_view(root, split)
        assert ours == theirs and None in ours, split
        assert [s["__key__"] for s in shardstore.open(str(root), split).iter()] == [x[0] for x in theirs if x]


def test_typed_samples_have_energons_fields() -> None:
    import megatron.energon as energon

    for name, cls in SAMPLE_CLASSES.items():
        theirs = getattr(energon, name)
        fields = [(f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) for f in dataclasses.fields(theirs)]
        base = {f.name for f in dataclasses.fields(energon.Sample)}
        assert [f for f in fields if f[0] not in base] == own_fields(cls), name
        assert base == {f.name for f in dataclasses.fields(cls)} - {f for f, _ in own_fields(cls)}, name


# ----- Energon 6 -------------------------------------------------------------------------------------


def test_energon6_prepared_dataset(make_shards: Callable[..., Path]) -> None:
    _need(ENERGON6, "run `make energon6`")
    root = _dataset(make_shards)
    # Energon 6's prepare is interactive: it asks whether to write a dataset.yaml
    _run([str(ENERGON6), "prepare", str(root), "--no-progress", "--num-workers", "1", *SPLIT_PARTS], stdin="n\n")
    meta = root / ".nv-meta"
    assert (meta / ".info.yaml").exists() and not (meta / ".info.json").exists()
    assert (meta / "index.sqlite").read_bytes()[18:20] == b"\x02\x02", "a WAL-mode database"
    db = sqlite3.connect(f"file:{meta / 'index.sqlite'}?mode=ro&immutable=1", uri=True)
    columns = [r[1] for r in db.execute("PRAGMA table_info(samples)")]
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert columns[0] == "id" and "sample_parts" not in tables
    total = sum(_read_everything(root, split) for split in ("train", "val", "test"))
    assert total == _read_everything(root, None) == 5 * 5 + 3
    # member names resolve through the sample's own headers (no sample_parts): also multi-dot parts
    ds = shardstore.open(str(root), "test")
    assert ds.read_file("dir.with.dots/k1.seg.png") == b"\x89PNG fake"
    with pytest.raises(SampleNotFoundError):
        ds.read_file("dir.with.dots/k1.nope")
    # excludes, as Energon applies them
    _set_excludes(root, ["parts/data-000000.tar/s00000_000001"])
    train = shardstore.open(str(root), "train")
    assert train.excluded_positions() == [1]
    assert [s["__key__"] for s in train.iter()] == [k for k in train.keys()] and "s00000_000001" not in train
    # a shard truncated after an Energon prepare (no shardstore.json): the .tar.idx end tells
    shard = root / "parts" / "data-000000.tar"
    os.truncate(shard, shard.stat().st_size // 2)
    with pytest.raises(StaleIndexError, match="data-000000.tar"):
        shardstore.open(str(root), "train")[0]
    info = yaml.safe_load((meta / ".info.yaml").read_text())
    assert json.loads(json.dumps(info))["shard_counts"]["parts/extra.tar"] == 3

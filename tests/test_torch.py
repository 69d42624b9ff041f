"""``shardstore.torch`` with a real ``DataLoader(num_workers=8)`` under fork and spawn: each worker
sees a disjoint part, together they see every sample once; map-style and iterable."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
from torch.utils.data import DataLoader, get_worker_info  # noqa: E402

import shardstore  # noqa: E402
from shardstore import nvmeta  # noqa: E402
from shardstore.storage import LocalStorage  # noqa: E402
from shardstore.torch import IterableDataset, MapDataset  # noqa: E402

WORKERS = 8
# 8 workers on a 2-core machine is the point of these tests, not a mistake
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def tag_worker(sample: dict[str, object]) -> tuple[int, str, int]:
    """(worker id, key, position): module-level so spawned workers can unpickle it."""
    info = get_worker_info()
    return (info.id if info is not None else -1, str(sample["__key__"]), int(sample["__index__"]))  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 shards x 11 tiny samples, all in train; one sample excluded by split.yaml."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    from make_dataset import make_dataset

    path = tmp_path_factory.mktemp("torchds") / "ds"
    make_dataset(str(path), shards=3, samples=11, min_kb=1, max_kb=1)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    storage = LocalStorage(str(path))
    splits = nvmeta.read_splits(storage)
    parts = {k: nvmeta.brace_expand(v) for k, v in splits.split_parts.items()}
    storage.write_atomic(
        ".nv-meta/split.yaml", nvmeta.splits_bytes(nvmeta.Splits(parts, ["parts/data-000001.tar/s00001_000005"]))
    )
    return path


def _all_keys(root: Path) -> list[str]:
    return list(shardstore.open(str(root)).keys())


def _by_worker(rows: list[tuple[int, str, int]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for worker, key, _ in rows:
        out.setdefault(worker, []).append(key)
    return out


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_iterable_dataset_workers_are_disjoint_and_complete(root: Path, context: str) -> None:
    """(Spawn: every worker imports torch afresh, seconds each on a loaded 2-core machine.)"""
    data = IterableDataset(str(root), transform=tag_worker)
    loader = DataLoader(data, batch_size=None, num_workers=WORKERS, multiprocessing_context=context)
    rows = list(loader)
    shares = _by_worker(rows)
    assert sorted(shares) == list(range(WORKERS)), "every worker read its own share"
    flat = [k for share in shares.values() for k in share]
    assert len(flat) == len(set(flat)) and sorted(flat) == sorted(_all_keys(root))
    # unshuffled shares are contiguous runs: worker w's keys are one slice of the position order
    everything = _all_keys(root)
    for w, share in shares.items():
        i = everything.index(share[0])
        assert everything[i : i + len(share)] == share, w


def test_iterable_dataset_shuffles_per_epoch_and_splits_ranks(root: Path) -> None:
    """Each epoch, the ranks together read every sample once; the order (and so which rank reads
    which sample) changes with the epoch, as with a shuffling DistributedSampler."""
    everything = sorted(_all_keys(root))
    datasets = [
        IterableDataset(str(root), shuffle=True, seed=3, rank=rank, world_size=2, transform=tag_worker) for rank in range(2)
    ]
    orders = []
    for epoch in range(2):
        by_rank = []
        for data in datasets:
            data.set_epoch(epoch)
            rows = list(DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork"))
            assert {w for w, _, _ in rows} == {0, 1}
            by_rank.append([key for _, key, _ in rows])
        assert not set(by_rank[0]) & set(by_rank[1])
        assert sorted(by_rank[0] + by_rank[1]) == everything
        orders.append(by_rank)
    assert orders[0] != orders[1]


@pytest.mark.parametrize("context,workers", [("fork", WORKERS), ("spawn", 2)])
def test_map_dataset_with_workers(root: Path, context: str, workers: int) -> None:
    """(Spawn with 2 workers here: each spawned worker imports torch, seconds each on 2 cores; the
    8-worker spawn case is covered by the iterable test.)"""
    data = MapDataset(str(root), transform=tag_worker)
    assert len(data) == 3 * 11 - 1
    loader = DataLoader(data, batch_size=2, num_workers=workers, multiprocessing_context=context, collate_fn=list)
    rows = [row for batch in loader for row in batch]
    shares = _by_worker(rows)
    assert len(shares) == workers
    seen = [set(s) for s in shares.values()]
    assert sum(len(s) for s in seen) == len(set().union(*seen)), "no sample in two workers"
    assert [key for _, key, _ in rows] == _all_keys(root), "the sampler's order, excluded sample skipped"
    assert all(pos != 11 + 5 for _, _, pos in rows)


def test_map_dataset_default_collate_and_indexing(root: Path) -> None:
    ds = shardstore.open(str(root))
    data = MapDataset(ds)
    assert data[11 + 5]["__key__"] == "s00001_000006"  # one past the excluded slot
    assert data[-1]["__key__"] == "s00002_000010"
    with pytest.raises(IndexError):
        data[len(data)]
    batch = next(iter(DataLoader(data, batch_size=4)))
    assert batch["__key__"] == ["s00000_000000", "s00000_000001", "s00000_000002", "s00000_000003"]
    assert batch["__index__"].tolist() == [0, 1, 2, 3] and isinstance(batch["txt"][0], bytes)
    with pytest.raises(TypeError):
        MapDataset(ds, decode=True)
    assert len(pickle.dumps(data)) < 4000


def test_reading_without_torch_never_imports_it(root: Path) -> None:
    """Iterating picks up DataLoader worker info only when torch is already imported."""
    code = "import sys, shardstore; n = len(list(shardstore.open(sys.argv[1]).iter())); print(n, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(3 * 11 - 1), "False"]


def test_iter_outside_a_loader_reads_everything(root: Path) -> None:
    """In the main process (no worker info) the iterable reads the whole split."""
    rows = list(IterableDataset(str(root), transform=tag_worker))
    assert {w for w, _, _ in rows} == {-1} and [k for _, k, _ in rows] == _all_keys(root)

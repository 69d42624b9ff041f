"""``sharding``: the partition math as pure functions, and ``Dataset.iter`` over a real prepared
dataset: disjoint and complete over ranks x workers, deterministic per seed, exact resume,
different orders per epoch, excluded samples skipped, shard-contiguous reads."""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstore
from shardstore import nvmeta
from shardstore.errors import ConfigError
from shardstore.sharding import (
    Permutation,
    global_worker,
    kept_position,
    plan_for,
    resolve_worker,
    resume_slot,
    worker_span,
)
from shardstore.storage import LocalStorage

# ----- pure functions --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 15, 16, 17, 100, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 1, 2**40 + 7])
def test_permutation_is_a_bijection_with_inverse(n: int, seed: int) -> None:
    perm = Permutation(n, seed)
    out = perm(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))
    assert perm.inverse(out).tolist() == list(range(n))


def test_permutation_depends_on_seed_and_epoch_only() -> None:
    n = 500
    a = Permutation(n, 7, 0)(np.arange(n)).tolist()
    assert a == Permutation(n, 7, 0)(np.arange(n)).tolist()
    assert a != Permutation(n, 8, 0)(np.arange(n)).tolist()
    assert a != Permutation(n, 7, 1)(np.arange(n)).tolist()
    assert a != list(range(n))
    # element-wise evaluation agrees with the batch
    assert [int(Permutation(n, 7)([i])[0]) for i in (0, 123, 499)] == [a[0], a[123], a[499]]


def test_permutation_looks_random() -> None:
    """No position stays near its slot far more often than chance (a weak-mixing Feistel would)."""
    n = 10_000
    out = Permutation(n, 3)(np.arange(n))
    assert np.mean(np.abs(out - np.arange(n)) < n // 100) < 0.05
    assert abs(float(np.corrcoef(out, np.arange(n))[0, 1])) < 0.05


def test_permutation_rejects_out_of_range() -> None:
    with pytest.raises(ConfigError):
        Permutation(10, 0)([10])


@pytest.mark.parametrize("n", [0, 1, 7, 24, 1001])
@pytest.mark.parametrize("count", [1, 2, 3, 8, 13])
def test_worker_spans_are_disjoint_complete_balanced(n: int, count: int) -> None:
    spans = [worker_span(n, i, count) for i in range(count)]
    assert spans[0][0] == 0 and spans[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    sizes = [hi - lo for lo, hi in spans]
    assert max(sizes) - min(sizes) <= 1


def test_global_worker_is_rank_major_and_validates() -> None:
    assert global_worker(0, 2, 0, 3) == (0, 6)
    assert global_worker(1, 2, 2, 3) == (5, 6)
    # a rank's workers cover exactly the span of that rank when split by rank first
    n = 101
    lo, _ = worker_span(n, *global_worker(1, 2, 0, 3))
    _, hi = worker_span(n, *global_worker(1, 2, 2, 3))
    assert (lo, hi) == worker_span(n, 1, 2)
    for bad in [(2, 2, 0, 1), (-1, 2, 0, 1), (0, 0, 0, 1), (0, 1, 1, 1), (0, 1, 0, 0)]:
        with pytest.raises(ConfigError):
            global_worker(*bad)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 60), st.sets(st.integers(0, 80), max_size=30), st.integers(0, 80))
def test_resume_slot_matches_brute_force(lo: int, skipped_set: set[int], start: int) -> None:
    skipped = sorted(s for s in skipped_set if s >= lo)
    kept = [s for s in range(lo, lo + start + len(skipped) + 1) if s not in skipped_set]
    slot = resume_slot(lo, start, skipped)
    # exactly `start` kept slots lie before it, and the first kept slot at or after it is kept[start]
    assert sum(1 for s in range(lo, slot) if s not in skipped_set) == start
    nxt = next(s for s in range(slot, slot + len(skipped) + 2) if s not in skipped_set)
    assert nxt == kept[start]


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 50), max_size=40), st.integers(0, 30))
def test_kept_position_matches_brute_force(excluded_set: set[int], i: int) -> None:
    excluded = sorted(excluded_set)
    kept = [p for p in range(0, 200) if p not in excluded_set]
    assert kept_position(i, excluded) == kept[i]


def test_resolve_worker_defaults_outside_torch() -> None:
    assert resolve_worker(None, None) == (0, 1)
    assert resolve_worker(2, 4) == (2, 4)


@pytest.mark.parametrize("shuffle", [False, True])
def test_plans_partition_every_position_once(shuffle: bool) -> None:
    n, excluded = 97, [0, 5, 50, 96]
    seen: list[int] = []
    for index in range(6):
        plan = plan_for(n, excluded, shuffle=shuffle, seed=4, epoch=0, index=index, count=6)
        got = list(plan.positions())
        assert len(got) == len(plan)
        if not shuffle:
            assert got == sorted(got)
        seen += got
    assert sorted(seen) == [p for p in range(n) if p not in excluded]


def test_plan_rejects_bad_start() -> None:
    plan = plan_for(10, [], shuffle=False, seed=0, epoch=0, index=0, count=1)
    assert list(plan.positions(10)) == []
    with pytest.raises(ConfigError):
        plan.positions(11)
    with pytest.raises(ConfigError):
        plan.positions(-1)


# ----- over a prepared dataset -----------------------------------------------------------------------


@pytest.fixture
def ds_path(make_shards: Callable[..., Path]) -> Path:
    """3 shards x 17 samples, all in train; two samples excluded by split.yaml."""
    path = make_shards(shards=3, samples=17, min_kb=1, max_kb=2)
    shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
    storage = LocalStorage(str(path))
    splits = nvmeta.read_splits(storage)
    exclude = ["parts/data-000000.tar/s00000_000004", "parts/data-000002.tar/s00002_000016"]
    parts = {name: nvmeta.brace_expand(patterns) for name, patterns in splits.split_parts.items()}
    storage.write_atomic(".nv-meta/split.yaml", nvmeta.splits_bytes(nvmeta.Splits(parts, exclude)))
    return path


EXCLUDED = {"s00000_000004", "s00002_000016"}


def _keys(samples: object) -> list[str]:
    return [s["__key__"] for s in samples]  # type: ignore[attr-defined]


def test_all_ranks_and_workers_together_read_every_sample_once(ds_path: Path) -> None:
    ds = shardstore.open(str(ds_path))
    everything = [k for k in ds.keys()]
    assert len(everything) == len(ds) - 2 and not EXCLUDED & set(everything)
    for shuffle in (False, True):
        shares = [
            _keys(ds.iter(shuffle=shuffle, seed=11, rank=r, world_size=2, worker_id=w, num_workers=4))
            for r in range(2)
            for w in range(4)
        ]
        flat = [k for share in shares for k in share]
        assert len(flat) == len(set(flat)), "a sample was read twice"
        assert set(flat) == set(everything)
        assert all(shares), "every reader got something"
        if not shuffle:
            assert flat == everything, "unshuffled shares are contiguous runs in position order"


def test_iteration_is_deterministic_per_seed_and_differs_per_epoch(ds_path: Path) -> None:
    ds = shardstore.open(str(ds_path))
    a = _keys(ds.iter(shuffle=True, seed=5))
    assert a == _keys(shardstore.open(str(ds_path)).iter(shuffle=True, seed=5))
    assert a != _keys(ds.iter(shuffle=True, seed=6))
    assert a != _keys(ds.iter(shuffle=True, seed=5, epoch=1))
    assert sorted(a) == sorted(ds.keys())
    assert _keys(ds.iter()) == _keys(ds.iter(epoch=3)), "epochs do not matter without shuffle"


@pytest.mark.parametrize("shuffle", [False, True])
def test_resume_from_start_is_exact(ds_path: Path, shuffle: bool) -> None:
    ds = shardstore.open(str(ds_path))
    for w in range(3):
        full = _keys(ds.iter(shuffle=shuffle, seed=9, epoch=2, worker_id=w, num_workers=3))
        for start in range(len(full) + 1):
            resumed = _keys(ds.iter(shuffle=shuffle, seed=9, epoch=2, worker_id=w, num_workers=3, start=start))
            assert resumed == full[start:], (w, start)
        with pytest.raises(ConfigError):
            ds.iter(shuffle=shuffle, seed=9, epoch=2, worker_id=w, num_workers=3, start=len(full) + 1)


def test_iter_checks_arguments_before_reading(ds_path: Path) -> None:
    ds = shardstore.open(str(ds_path))
    with pytest.raises(ConfigError):
        ds.iter(rank=2, world_size=2)
    with pytest.raises(ConfigError):
        ds.iter(worker_id=0, num_workers=0)


def test_unshuffled_iteration_reads_runs_not_samples(
    ds_path: Path, record_preads: Callable[[], list[tuple[int, int]]]
) -> None:
    ds = shardstore.open(str(ds_path))
    ds[0], ds[20], ds[40]  # the first read of each shard also checks it: not counted below
    reads = record_preads()
    got = _keys(ds.iter())
    assert len(got) == len(ds) - 2
    # 49 samples in 3 shards, runs of up to 64: one read per run of consecutive samples of a
    # shard, not one per sample; the excluded position 4 cuts shard 0's run in two
    assert len(reads) == 4, reads
    assert sum(size for size, _ in reads) < sum(os.path.getsize(ds_path / s.name) for s in ds.shards)
    reads.clear()
    _keys(ds.iter(shuffle=True, seed=1))
    assert len(reads) > 4  # shuffled reads are scattered (merged only when neighbours)


@pytest.mark.parametrize("run, max_bytes", [(64, 32 << 20), (5, 32 << 20), (64, 1), (7, 12_000)])
def test_in_order_runs_give_what_positions_give(ds_path: Path, run: int, max_bytes: int) -> None:
    """Runs cut by shard ends, by ``run`` samples and by ``max_bytes`` (at least one sample a read)
    yield exactly ``ds[i]`` for each position, in order."""
    ds = shardstore.open(str(ds_path))
    for lo, hi in [(5, 50), (16, 35), (20, 21), (33, 34), (7, 7)]:  # 4 and 50 are excluded
        assert list(ds._iter_range(lo, hi, run, max_bytes)) == [ds[i] for i in range(lo, hi)]


def test_spans_are_the_positions_in_runs(ds_path: Path) -> None:
    ds = shardstore.open(str(ds_path))
    excluded = ds.excluded_positions()
    for count in (1, 2, 3, 7):
        for index in range(count):
            plan = plan_for(len(ds), excluded, shuffle=False, seed=0, epoch=0, index=index, count=count)
            for start in range(len(plan) + 1):
                spans = list(plan.spans(start))
                assert [p for lo, hi in spans for p in range(lo, hi)] == list(plan.positions(start))
                assert all(lo < hi for lo, hi in spans)
    with pytest.raises(ConfigError):
        plan.spans(len(plan) + 1)
    with pytest.raises(ConfigError):
        plan_for(len(ds), excluded, shuffle=True, seed=0, epoch=0, index=0, count=1).spans()


def test_iter_matches_positions(ds_path: Path) -> None:
    """What ``iter`` yields is what ``ds[i]`` gives for the same position."""
    ds = shardstore.open(str(ds_path))
    for sample in ds.iter(shuffle=True, seed=2):
        assert ds[sample["__index__"]] == sample
    excluded = ds.excluded_positions()
    assert len(excluded) == 2
    assert bisect.bisect_left(excluded, 4) == 0 and excluded[0] == 4 and excluded[1] == 3 * 17 - 1

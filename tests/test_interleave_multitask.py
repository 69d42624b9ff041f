"""``interleave(..., restart=True, nominal_length=N)``: the multitask loader of imitation-learning
research (a task drawn uniformly per sample, exhausted tasks started over), seeded and cut over
ranks x workers."""

from __future__ import annotations

import collections
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import pytest

import shardstore
from shardstore.errors import ConfigError


def _within_binomial(counts: collections.Counter[int], n: int, k: int) -> None:
    """Each of ``k`` sources drawn ``n * (1/k)`` times within 4.5 binomial standard deviations
    (a chance of about 7e-6 per source for a fair draw to fall outside)."""
    p = 1 / k
    tol = 4.5 * math.sqrt(n * p * (1 - p))
    assert sum(counts.values()) == n
    for i in range(k):
        assert abs(counts[i] - n * p) <= tol, (counts, tol)


@pytest.fixture
def tasks(make_shards: Callable[..., Path]) -> list[shardstore.Dataset]:
    """Three prepared datasets of very different sizes: 5, 20 and 60 samples."""
    out = []
    for name, samples in (("a", 5), ("b", 20), ("c", 60)):
        path = make_shards(shards=1, samples=samples, name=name, prefix=name)
        shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=1)
        out.append(shardstore.open(str(path)))
    return out


def test_uniform_per_draw_with_restart(tasks: list[shardstore.Dataset]) -> None:
    n = 3000
    mixed = shardstore.interleave(tasks, seed=7, restart=True, nominal_length=n)
    assert len(mixed) == n
    got = list(mixed.iter(shuffle=True))
    counts = collections.Counter(s["__source__"] for s in got)
    _within_binomial(counts, n, 3)  # the 5-sample task is restarted ~200 times and stays at 1/3
    small = [s["__key__"] for s in got if s["__source__"] == 0]
    assert set(small) == {s["__key__"] for s in tasks[0]}
    passes = [small[i : i + 5] for i in range(0, 200, 5)]
    assert all(sorted(p) == sorted(passes[0]) for p in passes)  # whole passes, one after the other
    assert len({tuple(p) for p in passes}) > 1  # each in a fresh order when shuffled
    again = [s["__key__"] for s in shardstore.interleave(tasks, seed=7, restart=True, nominal_length=n).iter(shuffle=True)]
    assert again == [s["__key__"] for s in got]  # seeded


def test_without_restart_the_first_exhausted_source_ends_it(tasks: list[shardstore.Dataset]) -> None:
    got = list(shardstore.interleave(tasks, seed=1))
    assert collections.Counter(s["__source__"] for s in got)[0] == 5 and len(got) < 40


def test_nominal_length_is_split_over_ranks_and_workers(tasks: list[shardstore.Dataset]) -> None:
    mixed = shardstore.interleave(tasks, seed=3, restart=True, nominal_length=1001)
    per_reader = [
        list(mixed.iter(rank=r, world_size=2, worker_id=w, num_workers=2)) for r in range(2) for w in range(2)
    ]
    assert [len(p) for p in per_reader] == [251, 250, 250, 250]
    # each reader reads its own part of each task: the first pass of readers 0..3 covers task c once
    firsts = [[s["__key__"] for s in p if s["__source__"] == 2][:15] for p in per_reader]
    assert sorted(itertools.chain.from_iterable(firsts)) == sorted(s["__key__"] for s in tasks[2])
    _within_binomial(collections.Counter(s["__source__"] for p in per_reader for s in p), 1001, 3)


def test_restart_of_plain_iterables_and_bad_lengths() -> None:
    mixed = shardstore.interleave([[0], [1, 1]], seed=0, restart=True, nominal_length=600)
    _within_binomial(collections.Counter(mixed), 600, 2)
    with pytest.raises(TypeError, match="nominal_length"):
        len(shardstore.interleave([[0]], restart=True))
    with pytest.raises(ConfigError):
        shardstore.interleave([[0]], nominal_length=-1)

"""Blending: which source each next sample comes from, for one reader (rank x worker), seeded.

- blend: each next sample comes from a source drawn at random by weight (sources repeat forever by
  default, as in Energon's training loader);
- blend_epochized: a source is drawn with probability proportional to the samples it has left in the
  epoch, so an epoch holds exactly ``floor(r * n)`` samples of a source of ``n`` samples repeated ``r``
  times (per reader: its share of ``n``);
- interleave: the same weighted draw over any datasets or iterables, without a YAML.

The draws are planned apart from the reads (``Metadataset.plan``), so they are cheap to inspect and
to skip when resuming; the reads are batched into one merged read per source.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ..dataset import Dataset
from ..errors import ConfigError
from ..resources import Closeable
from ..sharding import WorkerPlan, global_worker, plan_for, resolve_worker
from .config import BLEND, BLEND_EPOCHIZED
from .resolve import flatten
from .sources import MetaSample, Source, check_reader_options


@dataclass(frozen=True)
class _Reader:
    """One reader among all ranks x workers (``sharding``'s numbering): index, count and seed."""

    index: int
    count: int
    seed: int
    shuffle: bool

    @classmethod
    def make(
        cls, seed: int, shuffle: bool, rank: int, world_size: int, worker_id: int | None, num_workers: int | None
    ) -> _Reader:
        worker_id, num_workers = resolve_worker(worker_id, num_workers)
        index, count = global_worker(rank, world_size, worker_id, num_workers)
        return cls(index, count, seed, shuffle)

    def plan(self, n: int, skipped: Sequence[int], src: int, epoch: int) -> WorkerPlan:
        """This reader's share of one pass over a source of ``n`` slots, as ``Dataset.iter`` cuts a
        split: a seeded permutation of all slots (per source and pass), then a contiguous span."""
        seed = (self.seed * 1_000_003 + src) & ((1 << 63) - 1)
        return plan_for(n, skipped, shuffle=self.shuffle, seed=seed, epoch=epoch, index=self.index, count=self.count)

    def rng(self, *tags: int) -> np.random.Generator:
        return np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, self.count, *tags])


def _cycle(n: int, skipped: Sequence[int], reader: _Reader, src: int, epoch0: int, limit: int | None) -> Iterator[int]:
    """Passes over a source (a fresh order each pass), ``limit`` slots in all (None: forever)."""
    taken = 0
    for k in itertools.count():
        plan = reader.plan(n, skipped, src, epoch0 + k)
        if len(plan) == 0:
            return
        for s in plan.positions():
            if limit is not None and taken >= limit:
                return
            yield s
            taken += 1


def _per_reader_count(n: int, skipped: Sequence[int], reader: _Reader, reps: float, src: int = 0, epoch: int = 0) -> int:
    """Samples a reader takes from a source in one blend_epochized epoch: floor(reps x its share)."""
    m = len(reader.plan(n, skipped, src, epoch))
    whole = math.floor(reps)
    return whole * m + math.floor(m * (reps - whole))


def epoch_samples(source: Source, repetitions: float) -> int:
    """Samples one blend_epochized epoch takes from ``source`` with a single reader."""
    return _per_reader_count(len(source), source.skipped, _Reader(0, 1, 0, False), repetitions)


_T = TypeVar("_T")


def _weighted(
    streams: list[Iterator[_T]], weights: list[float], rng: np.random.Generator, longest: bool = True
) -> Iterator[tuple[int, _T]]:
    """Draw a stream by weight for each next item (a slot, or for ``interleave`` a sample); an
    exhausted stream drops out (or, unless ``longest``, ends all)."""
    active = [i for i, w in enumerate(weights) if w > 0]
    while active:
        cum = list(itertools.accumulate(weights[i] for i in active))
        for u in rng.random(1024).tolist():
            k = bisect.bisect_right(cum, u * cum[-1])
            i = active[min(k, len(active) - 1)]
            slot = next(streams[i], None)
            if slot is None:
                if not longest:
                    return
                active.remove(i)
                break
            yield i, slot


def _by_remaining(streams: list[Iterator[int]], counts: list[int], rng: np.random.Generator) -> Iterator[tuple[int, int]]:
    """Draw a stream with probability proportional to what it has left: exact counts per epoch."""
    left = list(counts)
    total = sum(left)
    while total > 0:
        for u in rng.random(1024).tolist():
            if total <= 0:
                return
            x = u * total
            i = 0
            while i < len(left) - 1 and x >= left[i]:
                x -= left[i]
                i += 1
            while left[i] == 0:  # floating point edge: the last stream with samples left
                i -= 1
            slot = next(streams[i], None)
            if slot is None:  # cannot happen for counts within the stream; keep totals honest
                total -= left[i]
                left[i] = 0
                continue
            left[i] -= 1
            total -= 1
            yield i, slot


def _batched(items: Iterator[tuple[int, int]], size: int) -> Iterator[list[tuple[int, int]]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


class Metadataset(Closeable):
    """One split of a metadataset, opened: its sources and how they are blended.

    Use ``open_metadataset(yaml, split=...)``, best in a ``with`` block. ``md.iter(...)`` yields
    ``MetaSample``s; ``md.plan(...)`` yields the ``(source index, slot)`` draws alone, without
    reading. ``close()`` releases what every source's datasets and aux stores hold (reads reopen).
    """

    def __init__(self, url: str, split: str, mode: str, version: int, sources: list[Source]) -> None:
        self.url = url
        self.split = split
        self.mode = mode
        self.version = version
        self.sources = sources

    def __len__(self) -> int:
        """Samples of one pass with a single reader: each source once (blend_epochized: with its
        repetitions)."""
        if self.mode == BLEND_EPOCHIZED:
            return sum(epoch_samples(s, s.repetitions or 1.0) for s in self.sources)
        return sum(len(s) - len(s.skipped) for s in self.sources)

    def plan(
        self, *, shuffle: bool = False, seed: int = 0, rank: int = 0, world_size: int = 1,
        worker_id: int | None = None, num_workers: int | None = None, repeat: bool | None = None,
    ) -> Iterator[tuple[int, int]]:
        """The draws of one reader: ``(source index, slot)`` pairs, cheap (nothing is read).

        ``repeat`` (default: True for a blend, False otherwise): a blend's sources repeat forever;
        otherwise a pass ends when every source is done (blend_epochized: after its repetitions).
        """
        reader = _Reader.make(seed, shuffle, rank, world_size, worker_id, num_workers)
        if repeat is None:
            repeat = self.mode == BLEND
        srcs = self.sources
        if self.mode == BLEND:
            limit = None if repeat else 1
            streams = [_limited_passes(len(s), s.skipped, reader, i, limit) for i, s in enumerate(srcs)]
            return _weighted(streams, [s.weight or 0.0 for s in srcs], reader.rng(0))
        return self._epochs(reader, repeat)

    def _epochs(self, reader: _Reader, repeat: bool) -> Iterator[tuple[int, int]]:
        for epoch in itertools.count():
            counts, streams = [], []
            for i, s in enumerate(self.sources):
                reps = s.repetitions if self.mode == BLEND_EPOCHIZED and s.repetitions else 1.0
                first = epoch * (math.ceil(reps) + 1)  # the source's passes in this epoch: first, first + 1, ...
                c = _per_reader_count(len(s), s.skipped, reader, reps, i, first)
                counts.append(c)
                streams.append(_cycle(len(s), s.skipped, reader, i, first, c))
            yield from _by_remaining(streams, counts, reader.rng(0, epoch))
            if not repeat or sum(counts) == 0:
                return

    def iter(
        self, *, shuffle: bool = False, seed: int = 0, rank: int = 0, world_size: int = 1,
        worker_id: int | None = None, num_workers: int | None = None, repeat: bool | None = None,
        start: int = 0, cook: Callable[[Any], Any] | None = None, batch_size: int = 32,
    ) -> Iterator[Any]:
        """Samples for one reader (rank x worker): see ``plan``; ``start`` skips that many draws
        (to resume), ``cook(sample)`` turns each sample into the caller's object."""
        draws = self.plan(shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                          worker_id=worker_id, num_workers=num_workers, repeat=repeat)
        return _read_draws(self.sources, itertools.islice(draws, start, None), cook, batch_size)

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    def close(self) -> None:
        for source in self.sources:
            source.close()

    def __repr__(self) -> str:
        return f"Metadataset({self.url!r}, split={self.split!r}, mode={self.mode}, sources={len(self.sources)})"


def _limited_passes(n: int, skipped: Sequence[int], reader: _Reader, src: int, passes: int | None) -> Iterator[int]:
    if passes is None:
        return _cycle(n, skipped, reader, src, 0, None)
    return itertools.chain.from_iterable(reader.plan(n, skipped, src, k).positions() for k in range(passes))


def _read_draws(sources: Sequence[Source], draws: Iterator[tuple[int, int]], cook: Callable[[Any], Any] | None,
                batch_size: int) -> Iterator[Any]:
    """Read the draws in batches: one merged, concurrent read per source per batch, order kept."""
    for chunk in _batched(draws, batch_size):
        wanted: dict[int, list[int]] = {}
        for i, slot in chunk:
            wanted.setdefault(i, []).append(slot)
        got = {i: iter(sources[i].read(slots)) for i, slots in wanted.items()}
        for i, _slot in chunk:
            sample = next(got[i])
            yield cook(sample) if cook is not None else sample


def open_metadataset(yaml_path: str, split: str = "train", **reader_options: Any) -> Metadataset:
    """Open one split of an Energon metadataset YAML (``MetadatasetV2`` or the legacy ``Metadataset``).

    ``yaml_path`` is a local path or URL; relative dataset and aux paths resolve against its folder.
    ``reader_options`` go to every dataset and store: ``storage_options``, ``decode``, ``field_map``,
    ``allow_pickle``. Raises ``ConfigError`` naming the YAML file and key for anything invalid or
    missing (unknown key, wrong type, missing dataset or aux path, join nonmatch).
    """
    options = check_reader_options(reader_options)
    url = os.fspath(yaml_path)
    mf, mode, specs = flatten(url, split, options.get("storage_options"))
    sources = [Source(spec, options) for spec in specs]
    return Metadataset(url, split, mode, mf.version, sources)


# ----- interleave ---------------------------------------------------------------------------------
class Interleaved:
    """Samples of several datasets, each next one from a source drawn at random (``interleave``)."""

    def __init__(self, datasets: Sequence[Any], weights: Sequence[float] | None, seed: int, longest: bool,
                 restart: bool = False, nominal_length: int | None = None) -> None:
        if not datasets:
            raise ConfigError("interleave needs at least one dataset", member="datasets", noun="argument")
        if weights is not None and (len(weights) != len(datasets) or any(w < 0 for w in weights) or sum(weights) <= 0):
            raise ConfigError("weights must be one non-negative number per dataset, not all 0", member="weights", noun="argument")
        if nominal_length is not None and nominal_length < 0:
            raise ConfigError("nominal_length must be a non-negative number of samples", member="nominal_length", noun="argument")
        self.datasets = list(datasets)
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(datasets)
        self.seed = seed
        self.longest = longest
        self.restart = restart
        self.nominal_length = nominal_length

    def __len__(self) -> int:
        """``nominal_length``: the samples of one pass over all readers (a restarting interleave has
        no length of its own). Raises ``TypeError`` without it, as an endless iterable does."""
        if self.nominal_length is None:
            raise TypeError("this interleave has no length: pass nominal_length=")
        return self.nominal_length

    def iter(self, *, shuffle: bool = False, rank: int = 0, world_size: int = 1,
             worker_id: int | None = None, num_workers: int | None = None) -> Iterator[Any]:
        """Draw a source per sample; ``Dataset`` sources are partitioned over ranks x workers; with
        ``nominal_length`` this reader yields its share of it (the readers' shares add up to it)."""
        reader = _Reader.make(self.seed, shuffle, rank, world_size, worker_id, num_workers)
        streams = [self._stream(k, d, reader) for k, d in enumerate(self.datasets)]
        draws: Iterator[tuple[int, Any]] = _weighted(streams, self.weights, reader.rng(2), self.longest)
        if self.nominal_length is not None:
            share = self.nominal_length // reader.count + (1 if reader.index < self.nominal_length % reader.count else 0)
            draws = itertools.islice(draws, share)
        for k, sample in draws:
            if isinstance(sample, dict):
                sample = MetaSample(sample)
                sample["__source__"] = k
            yield sample

    def _stream(self, k: int, d: Any, reader: _Reader) -> Iterator[Any]:
        if not isinstance(d, Dataset):
            return _restarted(d) if self.restart else iter(d)
        skipped = d.excluded_positions()
        if self.restart:  # pass after pass, each in a fresh seeded order when shuffled
            slots: Iterator[int] = _cycle(len(d), skipped, reader, 10 + k, 0, None)
        else:
            slots = iter(reader.plan(len(d), skipped, 10 + k, 0).positions())

        def read() -> Iterator[Any]:
            while chunk := list(itertools.islice(slots, 32)):
                yield from d.get_many(chunk)

        return read()

    def __iter__(self) -> Iterator[Any]:
        return self.iter()


def _restarted(iterable: Any) -> Iterator[Any]:
    """``iterable`` over and over (``iter()`` again each time it runs out); ends if a pass is empty,
    so an iterator (which cannot start over) ends after its one pass."""
    while True:
        empty = True
        for item in iterable:
            empty = False
            yield item
        if empty:
            return


def interleave(datasets: Sequence[Any], weights: Sequence[float] | None = None, seed: int = 0,
               longest: bool = False, restart: bool = False, nominal_length: int | None = None) -> Interleaved:
    """Multiplex datasets: each next sample comes from a source drawn at random (uniform by default).

    ``datasets`` are ``Dataset``s (read in order, partitioned over ranks x workers) or any iterables.
    Stops when the first source runs out, or with ``longest=True`` when the last does. With
    ``restart=True`` an exhausted source starts over instead (a ``Dataset`` in a fresh seeded order
    when shuffled, an iterable by ``iter()`` again), so every draw stays uniform over the sources,
    as the multitask loader of imitation-learning research (``InterleavedDataset``) did; it then runs
    forever unless ``nominal_length`` (samples over all readers) ends it, which is also its ``len()``.
    Dict samples get ``__source__``: the index of their dataset.
    """
    return Interleaved(datasets, weights, seed, longest, restart, nominal_length)

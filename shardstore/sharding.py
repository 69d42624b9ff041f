"""Who reads which samples, in what order: rank/worker partition, seeded shuffle, epochs, resume.

The model: an epoch is a sequence of *slots* ``0 .. n-1`` (n = samples of the split). Without
shuffle, slot ``s`` holds position ``s``; with shuffle, position ``perm(s)``, where ``perm`` is a
seeded bijection of ``range(n)`` computed on the fly (a Feistel network with cycle walking), so
shuffling costs no memory, whatever ``n``, and any slot is found in O(1). The slots are cut into
``world_size * num_workers`` contiguous spans, one per (rank, worker): disjoint and complete by
construction. Samples that ``split.yaml`` excludes (``shard/key`` entries) keep their slot, as in
Energon, and are skipped when read.

``start`` counts the samples a worker has already *yielded* (excluded ones are not counted), so a
training loop resumes by passing the number of samples it consumed from that worker.

Reads: without shuffle, the reader's positions are runs of consecutive positions; each run of up
to ``SEQUENTIAL_BATCH`` samples of one shard is one range read, its bounds taken from the shard's
``.tar.idx`` (``Dataset._iter_range``). With shuffle, batches of random positions are located
once and read concurrently (``Dataset._read``).
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ConfigError

if TYPE_CHECKING:
    from .dataset import Dataset, SampleRef

__all__ = [
    "Permutation",
    "WorkerPlan",
    "global_worker",
    "worker_span",
    "resume_slot",
    "kept_position",
    "resolve_worker",
    "plan_for",
    "iter_dataset",
]

_M64 = (1 << 64) - 1
#: Samples per read when iterating in order: one range read covers them.
SEQUENTIAL_BATCH = 64
#: Random samples read concurrently when shuffling.
SHUFFLED_BATCH = 16
#: No read (one batch) bigger than this, whatever the sample sizes.
MAX_BATCH_BYTES = 32 << 20
#: Slots whose positions are computed at once (vectorised) when shuffling.
_SLOT_CHUNK = 1024


def _mix(x: int) -> int:
    """splitmix64 finaliser on a Python int: a well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    """The same hash on a uint64 array (multiplication wraps modulo 2**64, as wanted)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


class Permutation:
    """A seeded bijection of ``range(n)`` evaluated element-wise, in O(1) memory.

    A balanced Feistel network permutes ``range(4**k)`` (the smallest such domain holding ``n``);
    cycle walking (re-applying it until the value falls below ``n``) restricts it to ``range(n)``
    and stays a bijection. Different ``(seed, epoch)`` give unrelated permutations.
    """

    ROUNDS = 6

    def __init__(self, n: int, seed: int, epoch: int = 0) -> None:
        if n < 0:
            raise ConfigError(f"permutation size must be >= 0, got {n}")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        base = _mix(_mix(seed & _M64) ^ _mix((epoch + 0x51ED) & _M64))
        self._keys = [np.uint64(_mix(base + r)) for r in range(self.ROUNDS)]

    def _forward(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in self._keys:
            left, right = right, left ^ (_mix_array(right ^ k) & self._mask)
        return (left << self._half) | right

    def _backward(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in reversed(self._keys):
            left, right = right ^ (_mix_array(left ^ k) & self._mask), left
        return (left << self._half) | right

    def _walk(self, x: np.ndarray, step: Any) -> np.ndarray:
        values = np.asarray(x, dtype=np.uint64)
        if values.size and int(values.max()) >= self.n:
            raise ConfigError(f"index out of range for a permutation of {self.n}")
        y: np.ndarray = step(values)
        out = y >= np.uint64(self.n)
        while out.any():
            y[out] = step(y[out])
            out = y >= np.uint64(self.n)
        positions: np.ndarray = y.astype(np.int64)
        return positions

    def __call__(self, slots: np.ndarray | Sequence[int]) -> np.ndarray:
        """Positions held by ``slots``."""
        return self._walk(np.asarray(slots), self._forward)

    def inverse(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """Slots holding ``positions``."""
        return self._walk(np.asarray(positions), self._backward)


def global_worker(rank: int, world_size: int, worker_id: int, num_workers: int) -> tuple[int, int]:
    """(index, count) of this reader among all ranks x workers; rank-major, so a rank's workers
    share one contiguous span (the same cut as splitting by rank first, then by worker)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    if num_workers < 1 or not 0 <= worker_id < num_workers:
        raise ConfigError(f"need 0 <= worker_id < num_workers, got worker_id={worker_id}, num_workers={num_workers}")
    return rank * num_workers + worker_id, world_size * num_workers


def worker_span(n: int, index: int, count: int) -> tuple[int, int]:
    """The slots ``[lo, hi)`` of reader ``index`` of ``count``: contiguous, sizes differ by at most 1."""
    return n * index // count, n * (index + 1) // count


def resume_slot(lo: int, start: int, skipped: Sequence[int]) -> int:
    """The slot where a reader that already yielded ``start`` samples goes on.

    ``skipped`` are the sorted slots (at or after ``lo``) it does not yield: the answer ``s`` is the
    smallest slot with ``s - lo - |skipped below s| == start``.
    """
    s = lo + start
    while True:
        nxt = lo + start + bisect.bisect_left(skipped, s)
        if nxt == s:
            return s
        s = nxt


def kept_position(i: int, excluded: Sequence[int]) -> int:
    """The position of the ``i``-th sample that is not in ``excluded`` (sorted positions)."""
    s = resume_slot(0, i, excluded)
    k = bisect.bisect_left(excluded, s)
    while k < len(excluded) and excluded[k] == s:  # landed on an excluded run: step over it
        s, k = s + 1, k + 1
    return s


def resolve_worker(worker_id: int | None, num_workers: int | None) -> tuple[int, int]:
    """Fill in worker id and count from torch's DataLoader worker info when they are not given.

    torch is consulted only if something already imported it: a DataLoader worker always has.
    """
    if worker_id is not None and num_workers is not None:
        return worker_id, num_workers
    info = None
    torch = sys.modules.get("torch")
    if torch is not None:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
    if info is not None:
        return (info.id if worker_id is None else worker_id), (info.num_workers if num_workers is None else num_workers)
    return (0 if worker_id is None else worker_id), (1 if num_workers is None else num_workers)


@dataclass(frozen=True)
class WorkerPlan:
    """One reader's share of one epoch: its slots ``[lo, hi)``, the permutation (None: in order)
    and the sorted slots in its span that hold excluded samples."""

    n: int
    lo: int
    hi: int
    perm: Permutation | None
    skipped: tuple[int, ...]

    def __len__(self) -> int:
        """Samples this reader yields in the epoch."""
        return self.hi - self.lo - len(self.skipped)

    def positions(self, start: int = 0) -> Iterator[int]:
        """Dataset positions this reader yields, after the first ``start`` of them."""
        if start < 0 or start > len(self):
            raise ConfigError(f"start={start} is outside this reader's {len(self)} samples", member="start", noun="argument")
        return self._from_slot(resume_slot(self.lo, start, self.skipped))

    def spans(self, start: int = 0) -> Iterator[tuple[int, int]]:
        """For an in-order plan: the positions ``positions(start)`` yields, as ranges ``[a, b)``
        of consecutive positions (cut where an excluded sample is skipped)."""
        if self.perm is not None:
            raise ConfigError("spans() is for plans without shuffle")
        if start < 0 or start > len(self):
            raise ConfigError(f"start={start} is outside this reader's {len(self)} samples", member="start", noun="argument")
        return self._spans_from(resume_slot(self.lo, start, self.skipped))

    def _spans_from(self, slot: int) -> Iterator[tuple[int, int]]:
        for skipped in self.skipped[bisect.bisect_left(self.skipped, slot) :]:
            if skipped > slot:
                yield slot, skipped
            slot = skipped + 1
        if slot < self.hi:
            yield slot, self.hi

    def _from_slot(self, slot: int) -> Iterator[int]:
        skip = set(self.skipped)
        while slot < self.hi:
            end = min(self.hi, slot + _SLOT_CHUNK)
            chunk = range(slot, end) if self.perm is None else self.perm(np.arange(slot, end, dtype=np.uint64)).tolist()
            for s, pos in zip(range(slot, end), chunk, strict=True):
                if s not in skip:
                    yield int(pos)
            slot = end


def plan_for(
    n: int,
    excluded: Sequence[int],
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    index: int,
    count: int,
) -> WorkerPlan:
    """The plan of reader ``index`` of ``count`` over ``n`` positions of which ``excluded`` are skipped."""
    perm = Permutation(n, seed, epoch) if shuffle else None
    lo, hi = worker_span(n, index, count)
    if excluded:
        slots = perm.inverse(np.asarray(excluded)).tolist() if perm is not None else list(excluded)
        skipped = tuple(sorted(s for s in slots if lo <= s < hi))
    else:
        skipped = ()
    return WorkerPlan(n, lo, hi, perm, skipped)


def _batches(ds: Dataset, positions: Iterator[int], size: int) -> Iterator[list[SampleRef]]:
    """Locate positions (once each) and group them into reads of at most ``size`` samples and
    ``MAX_BATCH_BYTES`` bytes."""
    batch: list[SampleRef] = []
    nbytes = 0
    for pos in positions:
        ref = ds.locate(pos)
        batch.append(ref)
        nbytes += ref.range.size
        if len(batch) >= size or nbytes >= MAX_BATCH_BYTES:
            yield batch
            batch, nbytes = [], 0
    if batch:
        yield batch


def iter_dataset(
    ds: Dataset,
    shuffle: bool = False,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    worker_id: int | None = None,
    num_workers: int | None = None,
    start: int = 0,
    epoch: int = 0,
    batch_size: int | None = None,
) -> Iterator[Any]:
    """Samples of ``ds`` for one reader (rank x worker) in one epoch; see the module docstring.

    Arguments are checked now (``ConfigError``), reading starts on the first ``next``.
    ``worker_id``/``num_workers`` default to the torch DataLoader worker this runs in, if any.
    """
    worker_id, num_workers = resolve_worker(worker_id, num_workers)
    index, count = global_worker(rank, world_size, worker_id, num_workers)
    plan = plan_for(
        len(ds), ds.excluded_positions(), shuffle=shuffle, seed=seed, epoch=epoch, index=index, count=count
    )
    if not shuffle:
        spans = plan.spans(start)  # checks start before any read
        return _read_in_order(ds, spans, batch_size or SEQUENTIAL_BATCH)
    positions = plan.positions(start)
    return _read(ds, positions, batch_size or SHUFFLED_BATCH)


def _read_in_order(ds: Dataset, spans: Iterator[tuple[int, int]], size: int) -> Iterator[Any]:
    """Runs of consecutive positions, each run of one shard read at once (``Dataset._iter_range``)."""
    for lo, hi in spans:
        yield from ds._iter_range(lo, hi, size, MAX_BATCH_BYTES)


def _read(ds: Dataset, positions: Iterator[int], size: int) -> Iterator[Any]:
    """Random positions, a batch at a time, read concurrently (``Dataset._read`` of the refs)."""
    for batch in _batches(ds, positions, size):
        yield from ds._read(batch)

"""PyTorch adapters over a shardstore ``Dataset``: map-style and iterable.

Both work with ``DataLoader(num_workers=N)`` under fork and spawn: a ``Dataset`` pickles as its
metadata only, and file descriptors, memory maps and SQLite connections are reopened in each
worker. ``IterableDataset`` partitions the split over ranks x workers by itself (each worker reads
a disjoint share; together they read every sample once per epoch); ``MapDataset`` leaves that to
the DataLoader's sampler.

torch is an optional extra (``pip install 'shardstore[torch]'``); ``import shardstore`` never
imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import EpisodeFormatError, MissingExtraError

if TYPE_CHECKING:
    from .episodes.packets import Frame

try:
    import torch
    from torch.utils import data as _tud
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise MissingExtraError(f"shardstore.torch needs PyTorch: pip install 'shardstore[torch]' ({e})") from e

from . import compiled
from .bufferpool import FRAMES
from .dataset import Dataset
from .dataset import open as open_dataset
from .sharding import iter_dataset, kept_position

__all__ = ["MapDataset", "IterableDataset", "EpisodeStepDataset", "chw_float", "distributed_rank"]

Transform = Callable[[Any], Any]


def _dataset(dataset: Dataset | str, split: str | None, open_kwargs: dict[str, Any]) -> Dataset:
    if isinstance(dataset, Dataset):
        if open_kwargs:
            raise TypeError(f"open options {sorted(open_kwargs)} apply only when a URL is given")
        return dataset
    return open_dataset(dataset, split, **open_kwargs)


def distributed_rank() -> tuple[int, int]:
    """(rank, world_size) of ``torch.distributed`` when it is initialised, else (0, 1)."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


class MapDataset(_tud.Dataset):  # type: ignore[type-arg]
    """Map-style: item ``i`` is the ``i``-th sample of the split that ``split.yaml`` does not exclude.

    ``dataset`` is an open ``Dataset`` or a URL (then ``split`` and ``open_kwargs`` -- ``decode``,
    ``field_map``, ``storage_options`` ... -- open it). ``transform`` is applied to each sample
    (it must pickle for spawned workers).
    """

    def __init__(
        self,
        dataset: Dataset | str,
        split: str | None = "train",
        *,
        transform: Transform | None = None,
        **open_kwargs: Any,
    ) -> None:
        self.dataset = _dataset(dataset, split, open_kwargs)
        self.transform = transform
        self._excluded = self.dataset.excluded_positions()

    def __len__(self) -> int:
        return len(self.dataset) - len(self._excluded)

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} samples")
        position = kept_position(i, self._excluded) if self._excluded else i
        sample = self.dataset[position]
        return self.transform(sample) if self.transform is not None else sample


class IterableDataset(_tud.IterableDataset):  # type: ignore[type-arg]
    """Iterable: each DataLoader worker (of each rank) yields its own share of the split.

    ``rank``/``world_size`` default to ``torch.distributed``'s; the worker id and count come from
    the DataLoader. With ``shuffle``, the order is seeded by ``seed`` and the epoch (``set_epoch``).
    """

    def __init__(
        self,
        dataset: Dataset | str,
        split: str | None = "train",
        *,
        shuffle: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Transform | None = None,
        **open_kwargs: Any,
    ) -> None:
        self.dataset = _dataset(dataset, split, open_kwargs)
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.transform = transform
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the shuffle order of ``epoch`` from the next ``iter`` on. Call it in the parent before
        iterating the DataLoader; workers made with ``persistent_workers=True`` keep the epoch they
        were started with (they hold their own copy of this object)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        rank, world_size = distributed_rank()
        samples = iter_dataset(
            self.dataset,
            shuffle=self.shuffle,
            seed=self.seed,
            rank=rank if self.rank is None else self.rank,
            world_size=world_size if self.world_size is None else self.world_size,
            epoch=self.epoch,
        )
        if self.transform is None:
            return samples
        return map(self.transform, samples)


# ----- episodes ------------------------------------------------------------------------------------
class EpisodeStepDataset(_tud.Dataset):  # type: ignore[type-arg]
    """Map-style over every step of every episode: item ``i`` is step ``t`` of episode ``e``, counted
    episode by episode (``locate(i)`` gives ``(e, t)``), as ``Episodes.step(e, t)``, or with
    ``window=(before, after)`` as ``Episodes.window(e, t, before, after)`` (histories and action
    chunks with ``is_pad``). Each item also has ``__episode__`` (the episode number) and
    ``__step__``, and, when the dataset has a task table (``schema.attrs["tasks"]``, by task
    index: a LeRobot import) and the item a ``task_index``, ``task``: the current step's task
    string, as ``LeRobotDataset.__getitem__`` gives it.

    ``episodes`` is an episode view, an open ``Dataset`` (its split) or a URL (then ``split``,
    default every episode, and ``open_kwargs`` such as ``storage_options``). Media fields are
    encoded bytes, which ``default_collate`` does not batch: decode them in ``transform``. Video
    fields' frames come as LeRobot gives them, float32 tensors in [0, 1], CHW (a window: TCHW);
    ``video_chw_float=False`` keeps the view's HWC uint8 numpy arrays.
    """

    def __init__(
        self,
        episodes: Any,
        split: str | None = None,
        *,
        window: tuple[int, int] | None = None,
        transform: Transform | None = None,
        video_chw_float: bool = True,
        **open_kwargs: Any,
    ) -> None:
        from .episodes import Episodes
        from .episodes import episodes as open_episodes

        if isinstance(episodes, Episodes):
            self.episodes = episodes
        elif isinstance(episodes, Dataset):
            self.episodes = episodes.episodes
        else:
            self.episodes = open_episodes(episodes, split, **open_kwargs)
        self.window = window
        self.transform = transform
        self._ends = np.cumsum(self.episodes.lengths)
        self._videos = [f.name for f in self.episodes.schema.fields if f.kind == "video"] if video_chw_float else []
        tasks = self.episodes.schema.attrs.get("tasks")
        self._tasks: list[str] = [str(t) for t in tasks] if isinstance(tasks, (list, tuple)) else []

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def locate(self, i: int) -> tuple[int, int]:
        """``(episode position, step)`` of item ``i``."""
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} steps")
        e = int(self._ends.searchsorted(i, side="right"))
        return e, i - (int(self._ends[e - 1]) if e else 0)

    def __getitem__(self, i: int) -> Any:
        e, t = self.locate(i)
        if self.window is None:
            item = self.episodes.step(e, t)
        else:
            item = self.episodes.window(e, t, *self.window)
        item["__episode__"] = self.episodes.number(e)
        item["__step__"] = t
        if self._tasks and "task_index" in item:
            item["task"] = self._task(item["task_index"])
        for name in self._videos:
            item[name] = chw_float(item[name])
        return self.transform(item) if self.transform is not None else item

    def _task(self, task_index: Any) -> str:
        """The task string of the current step's ``task_index`` (a window's: the step at ``before``)."""
        values = np.asarray(task_index).reshape(-1)
        k = int(values[self.window[0] if self.window is not None and len(values) > 1 else 0])
        if not 0 <= k < len(self._tasks):
            raise EpisodeFormatError(f"task_index {k} is not one of the dataset's {len(self._tasks)} tasks", path=self.episodes.dataset.url)
        return self._tasks[k]


def chw_float(frames: np.ndarray | Sequence[Frame], *, planar: bool = False) -> torch.Tensor:
    """HWC (or THWC, or a list of HWC) uint8 frames as a contiguous float32 tensor in [0, 1], CHW
    (or TCHW), as LeRobot's; ``planar``: a list of frames given as their colour planes
    (``Planes``, what ``get_many(..., planar=True)`` gives ``frames``) or CHW arrays, cast
    without a transpose. The same floats as torch's ``/ 255`` of a float tensor. Planes are cast
    by ``_unitfloat.c`` in one pass that bypasses the cache (numpy casts, then divides in place,
    and each store first reads its line from memory: half the time of numpy for a 224x224 frame,
    ``tools/bench/unit_float.py``); HWC frames are cast into their slot and divided while its
    600 KB are still in the core's cache. torch's intra-op threads spin and cost 3-4x the time on
    a busy machine, and DataLoader workers run one thread each anyway. Contiguous because a
    DataLoader's collate stacks a batch 2.5-4x slower from channels-last views. The float arrays
    come from a pool (``bufferpool``): taken back when the tensor is freed, a window's 10 MB cost
    no fresh pages from the kernel."""
    one = isinstance(frames, np.ndarray) and frames.ndim == 3
    each: list[Any] = [frames] if one else list(frames)
    first = each[0]
    shape = (len(first), *first[0].shape) if planar else (first.shape[2], *first.shape[:2])
    out = FRAMES.take((len(each), *shape))
    for t, frame in enumerate(each):
        if planar:
            _unit_planes(frame, out[t])
        else:
            slot = out[t]
            slot[...] = frame.transpose(2, 0, 1)
            np.divide(slot, np.float32(255), out=slot)
    return torch.from_numpy(out[0] if one else out)


def _unit_planes(frame: Frame, slot: np.ndarray) -> None:
    """``slot`` (CHW float32) = ``frame``'s planes / 255: by the compiled one-pass cast where it
    is built and the planes are uint8 rows, else by numpy (cast, then divide in place)."""
    if _unitfloat is not None and all(p.dtype == np.uint8 and p.strides[1] == 1 for p in frame):
        for c, plane in enumerate(frame):
            _unitfloat.unit_float(plane, slot[c])
        return
    for c, plane in enumerate(frame):
        slot[c] = plane
    np.divide(slot, np.float32(255), out=slot)


#: ``unit_float(src, dst)``: see ``_unitfloat.c``. Tests set it to None to run the numpy path.
_unitfloat = compiled.load("_unitfloat")

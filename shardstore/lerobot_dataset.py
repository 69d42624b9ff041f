"""A drop-in for LeRobot's ``LeRobotDataset`` in training code, over an imported LeRobot dataset.

``shardstore import lerobot SRC OUT`` keeps every column of LeRobot's frames table and the videos;
``LeRobotDataset(OUT, delta_timestamps=..., episodes=..., image_transforms=..., tolerance_s=...)``
then gives the items lerobot 0.6's ``LeRobotDataset.__getitem__`` gives (pinned by
tests/convert/test_lerobot_dataset.py against the real package):

- item ``i`` is frame ``i`` of the chosen episodes in episode order (``episodes`` picks LeRobot
  episode indices; the order is the dataset's, not the list's);
- every column as a torch tensor (``index``, ``episode_index``, ``frame_index``, ``timestamp``,
  ``task_index``, state, action...), cameras as float32 CHW in ``[0, 1]``, ``task`` the task's text;
- a key of ``delta_timestamps`` holds its rows at ``t + round(delta * fps)`` stacked, clamped to
  the episode's first and last frame, and ``<key>_is_pad`` (bool) marks the clamped ones; the
  deltas must be multiples of ``1 / fps`` within ``tolerance_s`` (LeRobot's ``ValueError``);
- ``image_transforms`` is applied to each camera's frames (a tensor, as LeRobot applies it).

Only the frames returned are decoded, and ``__getitems__`` (what a ``DataLoader`` calls for a
batch) decodes the batch's frames together in file and time order (``Episodes.get_many``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .episodes.packets import Frame
from .episodes.view import Episodes, episodes
from .storage import LocalStorage
from .torch import _tud, chw_float, torch  # torch.py raises MissingExtraError without torch

__all__ = ["LeRobotDataset"]

#: Frames a batch decodes at a time on local storage (``__getitems__``): about 10 MB of RGB at 224x224.
BATCH_FRAMES = 64


class LeRobotDataset(_tud.Dataset):  # type: ignore[type-arg]
    """The frames of an imported LeRobot dataset (local path or URL, S3 with ``storage_options``)
    as LeRobot's ``LeRobotDataset`` returns them; a ``torch.utils.data.Dataset`` (map-style)."""

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        episodes: Sequence[int] | None = None,
        image_transforms: Callable[[Any], Any] | None = None,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = 1e-4,
        split: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError("image_transforms must be callable or None.")
        self.view: Episodes = _open(url, split, storage_options)
        schema = self.view.schema
        if schema.source_format != "lerobot":
            raise ValueError(f"{os.fspath(url)}: not a LeRobot import (source format {schema.source_format!r})")
        self.fps = float(schema.attrs["fps"])
        self.tasks: list[str] = [str(t) for t in schema.attrs.get("tasks") or []]
        self.image_transforms = image_transforms
        self.tolerance_s = tolerance_s
        self.delta_timestamps = delta_timestamps
        self.delta_indices = None if delta_timestamps is None else delta_indices(delta_timestamps, self.fps, tolerance_s)
        for key in self.delta_indices or {}:
            schema[key]  # KeyError naming a key the dataset lacks
        self.camera_keys = [f.name for f in schema.fields if f.kind == "video" or _is_image(f)]
        chosen = range(len(self.view)) if episodes is None else [self.view.position(int(n)) for n in episodes]
        self._positions = np.array(sorted(chosen, key=self.view.number), dtype=np.int64)
        self._ends = np.cumsum(self.view.lengths[self._positions])
        videos = [f.name for f in schema.fields if f.kind == "video"]
        self._frames_per_item = sum(len((self.delta_indices or {}).get(key, [0])) for key in videos) or 1
        self._remote = not isinstance(self.view.dataset.storage, LocalStorage)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def num_frames(self) -> int:
        return len(self)

    @property
    def num_episodes(self) -> int:
        return len(self._positions)

    def _locate(self, idx: int) -> tuple[int, int]:
        """(episode position, step) of item ``idx``."""
        n = len(self)
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(f"index {idx} out of range ({n} frames)")
        k = int(np.searchsorted(self._ends, idx, side="right"))
        start = int(self._ends[k - 1]) if k else 0
        return int(self._positions[k]), idx - start

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The items of ``indices``, their frames decoded together (a DataLoader's batch): in
        episode and step order, and on local storage in runs of about ``BATCH_FRAMES`` frames, so
        that a run's RGB frames are still in the CPU's cache when they are turned into floats (a
        batch of 32 16-frame windows decoded at once held 150 MB of them); neighbouring items,
        the ones sharing groups of pictures, fall in one run. On S3 a batch is one run: its
        reads are one round trip. A run's cameras decode side by side (``FrameDecoder``'s
        threads, ``SHARDSTORE_DECODE_THREADS``)."""
        steps = [self._locate(int(i)) for i in indices]
        order = sorted(range(len(steps)), key=steps.__getitem__)
        size = len(order) if self._remote else max(1, BATCH_FRAMES // self._frames_per_item)
        out: list[dict[str, Any]] = [{}] * len(steps)
        for k in range(0, len(order), size):
            run = order[k : k + size]
            raws = self.view.get_many([steps[i] for i in run], self.delta_indices, frames=_planar_float, planar=True)
            for i, raw in zip(run, raws, strict=True):
                out[i] = self._item(raw)
        return out

    def _item(self, raw: dict[str, Any]) -> dict[str, Any]:
        item: dict[str, Any] = {}
        for f in self.view.schema.fields:
            value = raw[f.name]
            if f.kind == "video":
                item[f.name] = value  # made by chw_float from the decoded frames (get_many)
            elif _is_image(f):
                item[f.name] = chw_float(_decode_images(value))
            elif f.kind == "array":
                item[f.name] = torch.from_numpy(np.array(value))  # a copy: 0-d stays 0-d, rows stay writable
            else:
                item[f.name] = value
            pad = raw.get(f"{f.name}_is_pad")
            if pad is not None:
                item[f"{f.name}_is_pad"] = torch.from_numpy(pad)
        if self.image_transforms is not None:
            for key in self.camera_keys:
                item[key] = self.image_transforms(item[key])
        task = int(raw["task_index"]) if "task_index" in raw and np.ndim(raw["task_index"]) == 0 else None
        if task is not None:
            item["task"] = self.tasks[task] if 0 <= task < len(self.tasks) else str(task)
        return item

    def __repr__(self) -> str:
        return f"LeRobotDataset({self.view.dataset.url!r}, episodes={self.num_episodes}, frames={len(self)})"


def delta_indices(delta_timestamps: dict[str, list[float]], fps: float, tolerance_s: float) -> dict[str, list[int]]:
    """LeRobot's ``get_delta_indices`` after its ``check_delta_timestamps``: each delta in frames,
    ``ValueError`` when one is not a multiple of ``1 / fps`` within ``tolerance_s``."""
    outside = {
        key: [d for d in deltas if abs(d * fps - round(d * fps)) / fps > tolerance_s]
        for key, deltas in delta_timestamps.items()
    }
    outside = {k: v for k, v in outside.items() if v}
    if outside:
        raise ValueError(
            f"delta_timestamps are not multiples of 1/fps={1 / fps} within tolerance_s={tolerance_s}: {outside}"
        )
    return {key: [round(d * fps) for d in deltas] for key, deltas in delta_timestamps.items()}


def _open(url: str | os.PathLike[str], split: str | None, storage_options: dict[str, Any] | None) -> Episodes:
    return episodes(os.fspath(url), split, storage_options=storage_options)


def _is_image(f: Any) -> bool:
    return bool(f.kind == "media" and f.encoding in ("png", "jpg", "jpeg"))


def _planar_float(frames: list[Frame]) -> torch.Tensor:
    return chw_float(frames, planar=True)


def _decode_images(value: Any) -> np.ndarray:
    """PNG/JPEG bytes (one or a list) as HWC (or THWC) uint8 RGB."""
    import io

    from PIL import Image

    def one(data: bytes) -> np.ndarray:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))

    return np.stack([one(v) for v in value]) if isinstance(value, list) else one(value)


"""An import spread over an executor's workers: the source in parts, each read and encoded by a
worker, the shards written by the parent in episode order.

A format reader that can be split gives ``EpisodeStream.parts``: picklable callables (frozen
dataclasses of paths, URLs, ``storage_options`` and numbers), each yielding a run of the
stream's episodes; one after the other they yield exactly ``EpisodeStream.episodes``. On a worker,
``encode_part`` reads a part and encodes every episode into the tar members of its samples
(``encode.encode_episode``: decoding parquet, HDF5 or TFRecord records and video frames, the
``.npy`` encoding, the tar headers) and returns them. The parent (``EpisodeWriter``) takes the
results in part order and only appends each block to the shard of its split, rotating shards at
the same episode boundaries, and writes the episode index: the output is byte for byte the local
import's. Why not whole shards per worker: where a shard ends depends on the byte size of every
earlier episode of its split, which no worker knows before the ones before it are encoded.

A part whose episode numbers depend on how many episodes the parts before it held
(``numbered = False``: the episode-frame layout, where a shard's episode count is known only
after reading it) hands back its episodes numbered from 0; the parent renumbers them, as the
local reader's running count does, and encodes them itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol

from ..executors import executor_slots, in_order
from .encode import EncodedEpisode, encode_episode
from .model import Episode, Schema

__all__ = ["EpisodePart", "PartJob", "encode_part", "encoded_parts"]


class EpisodePart(Protocol):
    """A run of a source's episodes that a worker reads by itself (see the module docstring)."""

    @property
    def numbered(self) -> bool:
        """Whether its episodes carry their final numbers (see the module docstring)."""

    def __call__(self) -> Iterator[Episode]:
        """Its episodes, read."""


@dataclass(frozen=True)
class PartJob:
    """What a worker gets: the part, and how to encode its episodes."""

    part: EpisodePart
    schema: Schema
    granularity: str
    mtime: int


def encode_part(job: PartJob) -> list[EncodedEpisode] | list[Episode]:
    """Read one part on a worker: its episodes encoded (or as read, for a part not ``numbered``)."""
    if not job.part.numbered:
        return list(job.part())
    return [encode_episode(e, job.schema, job.granularity, job.mtime) for e in job.part()]


def encoded_parts(
    executor: Executor, parts: Sequence[EpisodePart], schema: Schema, granularity: str, mtime: int,
    encode: Callable[[Episode], EncodedEpisode],
) -> Iterator[EncodedEpisode]:
    """Every episode of ``parts`` encoded on ``executor``'s workers, in stream order; a part not
    ``numbered`` has its episodes renumbered after the ones before and encoded by ``encode``. At
    most two parts per worker are in flight, so the parent holds a bounded number of results."""
    jobs = [PartJob(part, schema, granularity, mtime) for part in parts]
    number = 0
    for result in in_order(executor, encode_part, jobs, 2 * executor_slots(executor)):
        for item in result:
            if isinstance(item, Episode):
                item.index = number
                item = encode(item)
            number = item.row.number + 1
            yield item

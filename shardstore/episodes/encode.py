"""One episode as the tar members of its samples: what ``EpisodeWriter`` appends to a shard.

The encoding depends only on the episode, the schema, the granularity and the shards' mtime, not
on the shard it lands in (a tar member holds no offset), so it can run anywhere: in the writer, or
on an executor's worker (``parts.encode_part``), which hands back an ``EncodedEpisode`` whose block
of bytes the writer appends as it is. Either way the shards come out byte for byte the same. The
keys and parts are those of ``layout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import EpisodeFormatError
from . import layout
from .columns import encode_columns
from .index import EpisodeRow
from .model import Episode, FieldSpec, Schema, StepValues
from .npy import encode_row, npy_header
from .tarwriter import TarMembers
from .video import refs_to_bytes

__all__ = ["EncodedEpisode", "encode_episode", "MAX_EPISODE", "MAX_STEPS"]

MAX_EPISODE = 10**8 - 1
MAX_STEPS = 10**6 - 1  # the step counter has 6 digits (keys sort by step)


@dataclass(frozen=True, slots=True)
class EncodedEpisode:
    """An episode's samples as tar bytes (``members``), its split (None: the writer's split ratio
    decides) and its index row, whose ``shard`` and ``first_index`` the writer fills in."""

    row: EpisodeRow
    split: str | None
    members: bytes
    #: The columns layout's row starts in ``blobs.bin`` (``index.EpisodeIndexWriter.add_blob_starts``).
    blob_starts: bytes = b""


def encode_episode(episode: Episode, schema: Schema, granularity: str, mtime: int) -> EncodedEpisode:
    """Check ``episode`` against ``schema`` and encode its samples (``EpisodeFormatError`` naming
    the episode and field for one that does not fit)."""
    number = episode.index
    where = f"episode {number}"
    if not 0 <= number <= MAX_EPISODE:
        raise EpisodeFormatError(f"episode number must be 0..{MAX_EPISODE}", member=where, noun="")
    n = episode.validate(schema)
    extra = any(f.rows == "steps+1" for f in schema.fields)
    samples = n + 1 if extra else n
    if samples == 0:
        raise EpisodeFormatError("an episode without steps", member=where, noun="")
    if n > MAX_STEPS:
        raise EpisodeFormatError(f"{n} steps; at most {MAX_STEPS} fit the key", member=where, noun="")
    members = TarMembers(mtime)
    blob_starts = b""
    if granularity == "columns":
        key = layout.episode_key(number)
        parts, blob_starts = encode_columns(schema, episode.steps, n, extra, episode.terminal, where)
        for part, data in parts:
            members.add(f"{key}.{part}", data)
        samples, first_key = 1, key
    elif granularity == "step":
        for t in range(samples):
            _add(members, layout.step_key(number, t), _step_sample(schema, episode.steps, t, n, extra, episode.terminal))
        first_key = layout.step_key(number, 0)
    else:
        _add(members, layout.episode_key(number), _episode_sample(schema, episode.steps, samples, episode.terminal))
        samples, first_key = 1, layout.episode_key(number)
    row = EpisodeRow(number, "", 0, samples, n, first_key, bool(episode.terminal), dict(episode.metadata),
                     dict(episode.source))
    return EncodedEpisode(row, episode.split, members.take(), blob_starts)


def _add(members: TarMembers, key: str, sample: dict[str, bytes]) -> None:
    """One sample: its parts in name order (as webdataset writes them), ``key.part`` each."""
    for part in sorted(sample):
        members.add(f"{key}.{part}", sample[part])


def _step_sample(
    schema: Schema, steps: Mapping[str, StepValues], t: int, n: int, extra: bool, terminal: bool
) -> dict[str, bytes]:
    sample: dict[str, bytes] = {}
    for f in schema.fields:
        if t == n and f.rows == "steps":
            continue
        v = steps[f.name]
        if f.kind == "text":
            sample[layout.part_name(f)] = v[t].encode()  # type: ignore[union-attr]
        elif f.kind == "media":
            sample[layout.part_name(f)] = bytes(v[t])  # type: ignore[arg-type]
        elif f.kind == "video":
            sample[layout.part_name(f)] = v[t].to_bytes()  # type: ignore[union-attr]
        else:
            arr: np.ndarray = v  # type: ignore[assignment]
            row = arr[t, ...]  # a 0-d array keeps its byte order; arr[t] would be a native scalar
            if not row.flags.c_contiguous:
                row = row.copy()
            sample[layout.part_name(f)] = npy_header(arr.dtype, arr.shape[1:]) + row.tobytes()
    last = t == (n if extra else n - 1)
    sample[layout.FLAG_PARTS[0]] = layout.TRUE_NPY if t == 0 else layout.FALSE_NPY
    sample[layout.FLAG_PARTS[1]] = layout.TRUE_NPY if last else layout.FALSE_NPY
    sample[layout.FLAG_PARTS[2]] = layout.TRUE_NPY if last and terminal else layout.FALSE_NPY
    return sample


def _episode_sample(schema: Schema, steps: Mapping[str, StepValues], rows: int, terminal: bool) -> dict[str, bytes]:
    sample: dict[str, bytes] = {}
    for f in schema.fields:
        v = steps[f.name]
        if f.kind == "video":  # the rows' frame references as one part
            sample[layout.part_name(f)] = refs_to_bytes(v)  # type: ignore[arg-type]
        elif f.kind in ("text", "media"):
            for t, item in enumerate(v):
                sample[layout.row_part_name(f, t)] = _row_bytes(f, item)
        else:
            sample[layout.part_name(f)] = encode_row(v)  # type: ignore[arg-type]
    is_first = np.zeros(rows, bool)
    is_first[0] = True
    is_last = np.zeros(rows, bool)
    is_last[-1] = True
    for part, flags in zip(layout.FLAG_PARTS, (is_first, is_last, is_last & terminal), strict=True):
        sample[part] = encode_row(flags)
    return sample


def _row_bytes(f: FieldSpec, item: Any) -> bytes:
    """One row of a text or media field as the bytes of its part."""
    return item.encode() if f.kind == "text" else bytes(item)  # type: ignore[no-any-return]

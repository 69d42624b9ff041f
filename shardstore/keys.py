"""Member name -> (sample key, part name), with Energon's skip rules, and grouping into samples.

The rules (DESIGN.md section 4): only regular files count; names with a ``__dunder__`` path
component at the start are skipped; the key is everything up to the first dot of the basename
(folders included), the part is the rest. Consecutive members with the same key form a sample.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import compress, islice, pairwise
from typing import cast

import numpy as np

from .tarscan import REGULAR, MemberBatch, TarMember

__all__ = [
    "split_name", "split_names", "SamplePart", "SampleRecord", "SampleBatch", "group_samples", "group_batches", "member_name",
]

_NAME_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_RE = re.compile(r"__[^/]*__($|/)")


def split_name(name: str) -> tuple[str, str] | None:
    """``(key, part)`` for a member name, or None if the name is skipped or has no part."""
    if "/" not in name and not name.startswith("__"):
        # The common case, read on every random access: with no folder the rules reduce to
        # "a non-empty key up to the first dot", and no dunder name can match.
        key, dot, part = name.partition(".")
        return (key, part) if dot and key else None
    if _SKIP_RE.match(name):
        return None
    m = _NAME_RE.match(name)
    if m is None:
        return None
    return m.group(1), m.group(2)


def member_name(key: str, part: str) -> str:
    """The member name of ``part`` of sample ``key``: the inverse of ``split_name``."""
    return f"{key}.{part}"


@dataclass(frozen=True, slots=True)
class SamplePart:
    """One member of a sample: its part name and where its data lies in the shard."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One sample of a shard: key, position in the shard, byte range and parts."""

    key: str
    index: int
    offset: int
    size: int
    parts: tuple[SamplePart, ...]


@dataclass(frozen=True, slots=True)
class SampleBatch:
    """Consecutive samples of one shard and their parts, column by column.

    The bulk form of ``SampleRecord`` (prepare turns close to a million members a second into
    index rows, see ``MemberBatch``): sample ``first_index + i`` is ``keys[i]`` at ``offsets[i]``
    (``sizes[i]`` bytes); part ``j`` belongs to sample ``part_samples[j]``.
    """

    first_index: int
    keys: list[str]
    offsets: list[int]
    sizes: list[int]
    part_samples: list[int]
    part_names: list[str]
    part_offsets: list[int]
    part_sizes: list[int]

    def __len__(self) -> int:
        return len(self.keys)

    def records(self) -> Iterator[SampleRecord]:
        parts = zip(self.part_samples, self.part_names, self.part_offsets, self.part_sizes, strict=True)
        pending = next(parts, None)
        for i, (key, offset, size) in enumerate(zip(self.keys, self.offsets, self.sizes, strict=True), self.first_index):
            mine = []
            while pending is not None and pending[0] == i:
                mine.append(SamplePart(pending[1], pending[2], pending[3]))
                pending = next(parts, None)
            yield SampleRecord(key, i, offset, size, tuple(mine))


def split_names(names: list[str]) -> tuple[list[str | None], list[str | None]]:
    """``split_name`` of many names at once: (keys, parts), None where a name is no part.

    When no name has a folder or starts with ``__`` (a usual shard), ``split_name`` is "cut at
    the first dot" for every name, done here in one pass; otherwise name by name.
    """
    joined = "\0".join(names)
    if names and "/" not in joined and not joined.startswith("__") and "\0__" not in joined:
        keys, dots, parts = zip(*[name.partition(".") for name in names], strict=True)
        if "" not in dots and "" not in keys:  # else some name has no dot or nothing before it
            return list(keys), list(parts)
    pairs = [split_name(name) for name in names]
    return [p[0] if p else None for p in pairs], [p[1] if p else None for p in pairs]


def group_batches(batches: Iterable[MemberBatch]) -> Iterator[SampleBatch]:
    """Group a shard's members, batch by batch, into samples (the one grouping rule of shardstore).

    Only regular files whose names split into a key and a part count (``split_name``);
    consecutive ones with the same key form a sample. A sample's range runs from its first
    member's first header to the next sample's first header; the last sample's runs to the end of
    the last member seen (so members that are skipped stay inside the range of the sample before
    them, as in Energon). A sample still open at the end of a batch is handed out with a later
    one, its parts with it. Sample boundaries are found with numpy, a batch at a time.
    """
    open_key: str | None = None
    open_start = end = closed = 0
    carry: tuple[list[int], list[str], list[int], list[int]] = ([], [], [], [])  # the open sample's parts
    for batch in batches:
        end = batch.end
        keys, parts = split_names(batch.names)
        heads, datas, sizes = batch.header_offsets, batch.data_offsets, batch.sizes
        if None in keys or batch.kinds.count(REGULAR) != len(keys):
            keep = [k is not None and kind == REGULAR for k, kind in zip(keys, batch.kinds, strict=True)]
            keys, parts = list(compress(keys, keep)), list(compress(parts, keep))
            heads, datas, sizes = (list(compress(column, keep)) for column in (heads, datas, sizes))
        n = len(keys)
        if not n:
            continue
        named = cast("list[str]", keys)  # no None is left: the filter above dropped them
        new = np.empty(n, dtype=bool)  # member i starts a sample
        new[0] = keys[0] != open_key
        ka = np.array(keys, dtype=object)
        np.not_equal(ka[1:], ka[:-1], out=new[1:])
        starts = np.flatnonzero(new).tolist()
        # Sample of each member: the open one (index ``closed``) until the first start.
        sample_of = (np.cumsum(new) + (closed if open_key is not None else closed - 1)).tolist()
        if not starts:  # the whole batch continues the open sample
            for column, values in zip(carry, (sample_of, parts, datas, sizes), strict=True):
                column += values
            continue
        s_keys = [named[i] for i in starts]
        s_offsets = [heads[i] for i in starts]
        if open_key is not None:
            s_keys.insert(0, open_key)
            s_offsets.insert(0, open_start)
        last = starts[-1]  # the sample that stays open begins here
        out_parts = [c + v[:last] for c, v in zip(carry, (sample_of, parts, datas, sizes), strict=True)]
        carry = (sample_of[last:], parts[last:], datas[last:], sizes[last:])  # type: ignore[assignment]
        first = closed
        closed += len(s_keys) - 1
        open_key, open_start = s_keys[-1], s_offsets[-1]
        if len(s_keys) > 1:
            yield SampleBatch(
                first, s_keys[:-1], s_offsets[:-1], [b - a for a, b in pairwise(s_offsets)], *out_parts
            )
    if open_key is not None:
        yield SampleBatch(closed, [open_key], [open_start], [end - open_start], *carry)


def group_samples(members: Iterable[TarMember]) -> Iterator[SampleRecord]:
    """Group a shard's members into samples (``group_batches`` one member at a time)."""
    for batch in group_batches(_as_batches(members)):
        yield from batch.records()


def _as_batches(members: Iterable[TarMember], size: int = 1024) -> Iterator[MemberBatch]:
    it = iter(members)
    while chunk := list(islice(it, size)):
        yield MemberBatch(
            [m.name for m in chunk], [m.kind for m in chunk], [m.header_offset for m in chunk],
            [m.data_offset for m in chunk], [m.size for m in chunk], chunk[-1].end,
        )

"""Member name -> (sample key, part name), with Energon's skip rules, and grouping into samples.

The rules (DESIGN.md section 4): only regular files count; names with a ``__dunder__`` path
component at the start are skipped; the key is everything up to the first dot of the basename
(folders included), the part is the rest. Consecutive members with the same key form a sample.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .tarscan import REGULAR, TarMember

__all__ = ["split_name", "SamplePart", "SampleRecord", "group_samples", "member_name"]

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


def group_samples(members: Iterable[TarMember]) -> Iterator[SampleRecord]:
    """Group a shard's members into samples.

    A sample's range runs from its first member's first header to the next sample's first
    header; the last sample's runs to the end of the last member seen (so members that are
    skipped stay inside the range of the sample before them, as in Energon).
    """
    key: str | None = None
    start = 0
    parts: list[SamplePart] = []
    index = 0
    end = 0
    for m in members:
        end = m.end
        if m.kind != REGULAR:
            continue
        kp = split_name(m.name)
        if kp is None:
            continue
        if kp[0] != key:
            if key is not None:
                yield SampleRecord(key, index, start, m.header_offset - start, tuple(parts))
                index += 1
            key, start, parts = kp[0], m.header_offset, []
        parts.append(SamplePart(kp[1], m.data_offset, m.size))
    if key is not None:
        yield SampleRecord(key, index, start, end - start, tuple(parts))

"""Which episodes an edit keeps, in which order, under which number and split: the plan
(``Take`` per result episode) every operation builds and ``apply`` writes.

Episode lists (``3,7,10-20``) name the episodes' own numbers (``Episodes.number``, what the keys
and LeRobot's ``episode_index`` say). The result is numbered ``0 .. n-1`` in the order of the
takes (LeRobot needs consecutive ``episode_index``; its own ``delete_episodes`` renumbers alike);
the report maps old numbers to new.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError

__all__ = ["Take", "parse_episode_list", "episode_values", "ratio_splits"]

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
#: An episode list names at most this many episodes (a range like 0-10**12 is a typo, not a plan).
MAX_LISTED = 10_000_000


@dataclass(frozen=True, slots=True)
class Take:
    """One episode of the result: position ``position`` of input ``source`` (its number there
    ``old``), in ``split`` (None: train), with ``tasks`` (None: its own). Its number in the result
    is its place among the takes once grouped by split (``apply``)."""

    source: int
    position: int
    old: int
    split: str | None
    tasks: tuple[str, ...] | None = None


def parse_episode_list(text: str, what: str = "--episodes") -> set[int]:
    """``"3,7,10-20"`` -> {3, 7, 10, ..., 20}; ``ConfigError`` naming the bad item."""
    out: set[int] = set()
    for item in text.split(","):
        m = _RANGE.match(item)
        if not m:
            raise ConfigError(f"{item.strip()!r} is not an episode number or range like 10-20", member=what)
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"range {item.strip()!r} runs backwards", member=what)
        if hi - lo + 1 + len(out) > MAX_LISTED:
            raise ConfigError(f"more than {MAX_LISTED} episodes listed", member=what)
        out.update(range(lo, hi + 1))
    return out


def episode_values(number: int, length: int, split: str | None, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The names an expression sees for one episode (``expr.NAMES``); numpy scalars as Python's."""
    tasks = [str(t) for t in metadata.get("tasks") or []]
    meta = {k: v.item() if isinstance(v, np.generic) else v for k, v in metadata.items()}
    return {
        "episode": number,
        "length": length,
        "task": tasks[0] if tasks else "",
        "tasks": tasks,
        "split": split or "",
        "meta": meta,
    }


def ratio_splits(numbers: Sequence[int], ratio: Sequence[tuple[str, float]], seed: int | None) -> dict[int, str]:
    """Episode number -> split: the numbers shuffled with ``seed`` (kept in order when None), cut
    at the cumulative shares (``int(n * cumulative)``, as prepare cuts shards)."""
    order = list(numbers)
    if seed is not None:
        order = [order[i] for i in np.random.default_rng(seed).permutation(len(order))]
    total = sum(w for _, w in ratio)
    out: dict[int, str] = {}
    at, cum = 0, 0.0
    for k, (name, w) in enumerate(ratio):
        cum += w
        end = len(order) if k == len(ratio) - 1 else int(len(order) * cum / total)
        for n in order[at:end]:
            out[n] = name
        at = end
    return out

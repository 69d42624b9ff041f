"""``prepare --update``: which shards of a prepared dataset need a scan, and the splits after.

A shard is kept (its rows copied from the old ``index.sqlite``, its ``.tar.idx`` left in place)
when it is still there with the size, mtime and ETag ``shardstore.json`` recorded (the fields the
backend gives) and its ``.tar.idx`` exists; every other shard is scanned. Shards are numbered in
path order, as a full prepare numbers them, so the tables, ``.info.json`` and ``.tar.idx`` files
equal a full prepare's. A recorded shard that is gone is an error unless ``drop_missing``.

Splits (docs/scale.md): with ``split_parts`` regexes every shard goes where its path matches, as
in a full prepare; with a ``split_ratio`` the shards already indexed keep their split and the new
ones are cut by the ratio among themselves (path order, or shuffled with ``shuffle_tars``); with
neither, a new shard joins the split of the shard before it in path order (the first split if
none is before it). Without ``shuffle_tars`` each split lists its shards in path order.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import nvmeta
from .errors import ConfigError
from .storage import FileStat, Storage, scratch_path

__all__ = ["UpdatePlan", "plan_update", "update_splits"]


@dataclass
class UpdatePlan:
    """What ``--update`` reuses: new ``tar_file_id`` -> old one for kept shards, the old counts,
    the old splits, and a local path of the old ``index.sqlite``."""

    kept: dict[int, int]
    stats: dict[str, FileStat]
    counts: dict[str, int]
    splits: nvmeta.Splits
    index_path: str
    temporary: bool
    dropped: list[str] = field(default_factory=list)
    #: kept shard -> its recorded ``fingerprint`` and ``tar_idx`` digest (kept as recorded: the
    #: shard and its ``.tar.idx`` are unchanged)
    fields: dict[str, dict[str, str]] = field(default_factory=dict)

    def close(self) -> None:
        if self.temporary and os.path.exists(self.index_path):
            os.unlink(self.index_path)


#: The fields of ``shardstore.json`` that ``--update`` keeps for a kept shard.
_KEPT_FIELDS = ("fingerprint", "tar_idx")


def _unchanged(recorded: dict[str, Any] | None, stat: FileStat) -> bool:
    if recorded is None or recorded.get("size") != stat.size:
        return False
    return all(recorded.get(k) == getattr(stat, k) for k in ("mtime", "etag") if recorded.get(k) is not None or getattr(stat, k) is not None)


def plan_update(storage: Storage, shards: Sequence[str], drop_missing: bool) -> UpdatePlan:
    """Compare the shards found now with what the dataset's ``.nv-meta`` recorded."""
    info = nvmeta.read_info(storage)
    recorded = nvmeta.read_shardstore_json(storage)
    if recorded is None:
        raise ConfigError(
            f"no {nvmeta.META_DIR}/{nvmeta.SHARDSTORE_JSON} (not prepared by shardstore): --update needs it; "
            "prepare with --force-overwrite",
            path=storage.url(nvmeta.META_DIR),
        )
    found = set(shards)
    gone = [s for s in info.shards if s not in found]
    if gone and not drop_missing:
        raise ConfigError(
            f"shard vanished since prepare ({len(gone)} in all): pass --drop-missing to drop it from the index",
            path=storage.url(gone[0]),
        )
    old_ids = {name: i for i, name in enumerate(info.shards)}
    kept, stats, fields = {}, {}, {}
    for i, name in enumerate(shards):
        if name not in old_ids:
            continue
        stat = storage.stat(name)
        if _unchanged(recorded.get(name), stat) and storage.exists(nvmeta.tar_idx_path(name)):
            kept[i], stats[name] = old_ids[name], stat
            fields[name] = {k: v for k in _KEPT_FIELDS if isinstance(v := recorded[name].get(k), str)}
    local = storage.local_path(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}")
    temporary = local is None
    if local is None:
        local = scratch_path(".sqlite")
        with open(local, "wb") as f:
            f.write(storage.read(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"))
    return UpdatePlan(kept, stats, info.shard_counts, nvmeta.read_splits(storage), local, temporary, gone, fields)


def update_splits(
    plan: UpdatePlan,
    shards: Sequence[str],
    ratio: Sequence[tuple[str, float]] | None,
    patterns: Sequence[tuple[str, str]] | None,
    shuffle: bool,
    split_shards: Callable[..., dict[str, list[str]]],
) -> dict[str, list[str]]:
    """The splits after an update, by the rule of the module docstring (``split_shards``:
    prepare's own ratio/regex split, so the rules cannot drift apart)."""
    if patterns:
        return split_shards(shards, None, patterns, shuffle)
    present = set(shards)
    old = {name: [s for s in nvmeta.brace_expand(p) if s in present] for name, p in plan.splits.split_parts.items()}
    known = {s for lst in old.values() for s in lst}
    new = [s for s in shards if s not in known]
    if ratio is not None:
        for name, lst in split_shards(new, ratio, None, shuffle).items():
            old.setdefault(name, []).extend(lst)
    else:
        owner = {s: name for name, lst in old.items() for s in lst}
        order = [s for s in shards if s in owner]
        first = next(iter(old), "train")
        for s in new:
            at = bisect.bisect_left(order, _path_key(s), key=_path_key)
            old.setdefault(owner[order[at - 1]] if at else first, []).append(s)
    if not shuffle:  # each split in path order, as a full prepare lists it
        position = {s: i for i, s in enumerate(shards)}
        old = {name: sorted(lst, key=position.__getitem__) for name, lst in old.items()}
    return old


def _path_key(name: str) -> tuple[str, ...]:
    return tuple(name.split("/"))

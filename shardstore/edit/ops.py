"""The edit operations (``shardstore.edit.delete_episodes`` ... ``merge``): each turns its
arguments into a plan (``select.Take`` per result episode, field changes) and writes it (``apply``).

Every operation reads an episode dataset (an import of any format: ``shardstore import FORMAT``)
and writes a new one at ``out``, or replaces its input with ``in_place=True`` (staged beside it
and moved into place at the end: the input stays whole until the result is). The input is never
written otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from ..episodes.model import Schema
from ..episodes.view import Episodes, episodes
from ..errors import ConfigError
from ..storage import is_remote_url
from .apply import FieldChanges, apply_plan
from .expr import parse_expression
from .report import EditReport
from .select import Take, episode_values, parse_episode_list, ratio_splits

__all__ = [
    "delete_episodes",
    "keep_episodes",
    "filter_episodes",
    "split",
    "merge",
    "rename_field",
    "drop_field",
    "set_task",
]

EpisodeList = str | Iterable[int]


def delete_episodes(
    dataset: str, out: str | None = None, *, episodes: EpisodeList, in_place: bool = False, force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` without the episodes numbered in ``episodes`` (``"3,7,10-20"`` or
    numbers); the rest renumbered ``0 .. n-1`` in order. ``ConfigError`` for a number the dataset
    does not have."""
    view = _open(dataset)
    gone = _numbers(view, episodes)
    takes = [t for t in _all(view) if t.old not in gone]
    return _write([view], takes, dataset, out, "delete-episodes", in_place, force, progress)


def keep_episodes(
    dataset: str, out: str | None = None, *, episodes: EpisodeList, in_place: bool = False, force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` with only the episodes numbered in ``episodes``, renumbered in order."""
    view = _open(dataset)
    kept = _numbers(view, episodes)
    takes = [t for t in _all(view) if t.old in kept]
    return _write([view], takes, dataset, out, "keep-episodes", in_place, force, progress)


def filter_episodes(
    dataset: str, out: str | None = None, *, where: str, in_place: bool = False, force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` with the episodes for which ``where`` holds (``expr``: ``episode``,
    ``length``, ``task``, ``tasks``, ``split``, ``meta.NAME``), renumbered in order."""
    view = _open(dataset)
    expression = parse_expression(where)
    takes = [t for t in _all(view) if expression.matches(_values(view, t))]
    return _write([view], takes, dataset, out, "filter", in_place, force, progress)


def split(
    dataset: str,
    out: str | None = None,
    *,
    ratio: str | Sequence[tuple[str, float]] | None = None,
    seed: int | None = None,
    episodes: Mapping[str, EpisodeList] | None = None,
    in_place: bool = False,
    force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` whose episodes are split anew: by ``ratio`` (``"8,1,1"``: train, val,
    test; episodes shuffled with ``seed`` first, in order without one), or by ``episodes`` (split
    name -> episode list; episodes no list names go to train). The result is numbered split by
    split (train, val, test), as LeRobot's split ranges need."""
    from ..prepare import parse_split_ratio

    view = _open(dataset)
    takes = _all(view)
    if (ratio is None) == (episodes is None):
        raise ConfigError("give a ratio (--ratio 8,1,1) or episode lists per split (--split NAME=LIST), not both")
    if ratio is not None:
        weights = parse_split_ratio(ratio) if isinstance(ratio, str) else list(ratio)
        assigned = ratio_splits([t.old for t in takes], weights, seed)
    else:
        assert episodes is not None
        assigned = {}
        for name, listed in episodes.items():
            for n in _numbers(view, listed):
                if n in assigned:
                    raise ConfigError(f"episode {n} is in two splits ({assigned[n]} and {name})", member=name)
                assigned[n] = name
    takes = [Take(t.source, t.position, t.old, assigned.get(t.old, "train")) for t in takes]
    return _write([view], takes, dataset, out, "split", in_place, force, progress)


def merge(out: str, datasets: Sequence[str], *, force: bool = False, progress: bool = False) -> EditReport:
    """One dataset at ``out`` of the episodes of ``datasets`` in order (their splits kept), numbered
    ``0 .. n-1``. They must have the same fields (name, kind, dtype, shape, rows) and fps; tasks
    are merged by text."""
    if len(datasets) < 2:
        raise ConfigError("merge needs two datasets or more")
    views = [_open(d) for d in datasets]
    first = views[0].schema
    for d, view in zip(datasets[1:], views[1:], strict=True):
        _same_fields(first, view.schema, d)
    takes = [Take(k, t.position, t.old, t.split) for k, view in enumerate(views) for t in _all(view)]
    if any(os.path.abspath(out) == os.path.abspath(d) for d in datasets if not is_remote_url(d)):
        raise ConfigError("OUT is one of the inputs; merge writes a new dataset", path=out)
    return apply_plan(views, takes, out, operation="merge", force=force, progress=progress)


def rename_field(
    dataset: str, out: str | None = None, *, old: str, new: str, in_place: bool = False, force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` with field ``old`` named ``new`` (its stats and the source's feature
    list too)."""
    view = _open(dataset)
    changes = FieldChanges(renamed={old: new})
    return _write([view], _all(view), dataset, out, "rename-field", in_place, force, progress, changes)


def drop_field(
    dataset: str, out: str | None = None, *, field: str | Sequence[str], in_place: bool = False, force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` without the field(s) ``field``."""
    view = _open(dataset)
    changes = FieldChanges(dropped=[field] if isinstance(field, str) else list(field))
    return _write([view], _all(view), dataset, out, "drop-field", in_place, force, progress, changes)


def set_task(
    dataset: str,
    out: str | None = None,
    *,
    task: str,
    episodes: EpisodeList | None = None,
    where: str | None = None,
    in_place: bool = False,
    force: bool = False,
    progress: bool = False,
) -> EditReport:
    """A copy of ``dataset`` where the chosen episodes (``episodes``, or those ``where`` holds
    for, or all) have the one task ``task`` (LeRobot's ``task_index`` rewritten with it)."""
    if not task.strip():
        raise ConfigError("the task must not be empty", member="--task")
    view = _open(dataset)
    if episodes is not None and where is not None:
        raise ConfigError("choose episodes by --episodes or by --where, not both")
    chosen = _numbers(view, episodes) if episodes is not None else None
    expression = parse_expression(where) if where is not None else None
    takes = []
    for t in _all(view):
        hit = (chosen is None or t.old in chosen) and (expression is None or expression.matches(_values(view, t)))
        takes.append(Take(t.source, t.position, t.old, t.split, (task,) if hit else None))
    return _write([view], takes, dataset, out, "set-task", in_place, force, progress)


# ----- helpers ---------------------------------------------------------------------------------------
def _open(dataset: str) -> Episodes:
    return episodes(os.fspath(dataset))


def _all(view: Episodes) -> list[Take]:
    """Every episode of ``view`` in number order, in its own split."""
    takes = [Take(0, e, view.number(e), view.split(e)) for e in range(len(view))]
    return sorted(takes, key=lambda t: t.old)


def _numbers(view: Episodes, listed: EpisodeList) -> set[int]:
    numbers = parse_episode_list(listed) if isinstance(listed, str) else {int(n) for n in listed}
    have = {view.number(e) for e in range(len(view))}
    missing = sorted(numbers - have)
    if missing:
        raise ConfigError(f"episode {missing[0]} is not in the dataset ({len(have)} episodes)", path=view.dataset.url,
                          member="--episodes")
    return numbers


def _values(view: Episodes, take: Take) -> dict[str, object]:
    return episode_values(take.old, int(view.lengths[take.position]), take.split, view.metadata(take.position))


def _same_fields(a: Schema, b: Schema, where: str) -> None:
    sig_a = [(f.name, f.kind, f.dtype, f.shape, f.rows) for f in a.fields]
    sig_b = [(f.name, f.kind, f.dtype, f.shape, f.rows) for f in b.fields]
    if sig_a != sig_b:
        diff = next((x, y) for x, y in zip([*sig_a, None], [*sig_b, None], strict=False) if x != y)
        raise ConfigError(f"fields differ from the first dataset's: {diff[1]} where it has {diff[0]}", path=where)
    fps_a, fps_b = a.attrs.get("fps"), b.attrs.get("fps")
    if fps_a != fps_b:
        raise ConfigError(f"fps {fps_b} where the first dataset has {fps_a}", path=where)


def _write(
    views: list[Episodes],
    takes: list[Take],
    dataset: str,
    out: str | None,
    operation: str,
    in_place: bool,
    force: bool,
    progress: bool,
    changes: FieldChanges | None = None,
) -> EditReport:
    """Write to ``out``, or over ``dataset`` with ``in_place``."""
    if in_place:
        if out is not None and os.path.abspath(out) != os.path.abspath(dataset):
            raise ConfigError("give OUT or --in-place, not both", path=out)
        if is_remote_url(dataset):
            raise ConfigError("an edit in place needs a local dataset", path=dataset)
        out, force = dataset, True
    elif out is None:
        raise ConfigError("give OUT (a new dataset) or --in-place", path=dataset)
    elif not is_remote_url(dataset) and os.path.abspath(out) == os.path.abspath(dataset):
        raise ConfigError("OUT is the input; pass --in-place to replace it", path=out)
    return apply_plan(views, takes, out, operation=operation, changes=changes, force=force, progress=progress)

"""``shardstore check minari PATH [--deep]``: a Minari dataset against its metadata and spaces.

Without ``--deep`` (the metadata and the shapes; no step is read): the metadata the minari loader
requires (0.5: ``data/metadata.json`` with ``data_format``, ``observation_space`` and
``action_space`` as serialized strings, or an ``env_spec``; ``dataset_id``, ``minari_version``
strings, the version one minari 0.5.4 reads; ``total_episodes``/``total_steps`` integers), episode ids 0..N-1, and whatever the reader
refuses (fields that disagree in length between episodes, a missing field).

With ``--deep``, every step: ``total_episodes`` and ``total_steps`` against the episodes; each
episode's observations (and infos) one row more than its steps (``steps+1``); ``terminations`` and
``truncations``: at most one terminal step, and only the last (a warning when the last step is
neither: Minari's recorder ends an episode on one of them); the data against the spaces (a Box's
dtype, shape and bounds, a Discrete's range); no NaN in float fields.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...episodes.model import Episode
from ...episodes.problems import FormatReport
from ...episodes.problems import progress as progress_bar
from ...errors import ShardstoreError
from . import spaces
from .api import METADATA_JSON, inspect_source, read_minari

__all__ = ["check_minari"]

#: How the reader names a place: ``episode 3, field 'observations'``.
_MEMBER = re.compile(r"^episode (\d+), field '(.*)'$")


def check_minari(
    src: str | os.PathLike[str], *, deep: bool = False, storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> FormatReport:
    """The checks of the module docstring on the Minari dataset ``src`` (a local folder or id;
    ``storage_options`` is accepted for the CLI's sake, Minari datasets are read locally)."""
    report = FormatReport(os.fspath(src), "Minari", deep=deep, unit="steps")
    report.ran("metadata", "episodes")
    try:
        source = inspect_source(src)
        stream = read_minari(src)
    except ShardstoreError as err:
        report.add("error", "metadata", err.detail, file=err.path, field=err.member)
        report.finish()
        return report
    report.version = source.version
    where = str(source.data_dir / METADATA_JSON) if source.metadata is not None else str(source.data_dir)
    _check_metadata(source.metadata, report, where)
    total_eps, total_steps = source.total_episodes, source.total_steps
    steps = 0
    try:
        for n, e in enumerate(progress_bar(stream.episodes, total_eps or 0, "episode", "Checking Minari", progress)):
            if e.index != n:
                report.add("error", "episodes", f"episode id {e.index}", episode=e.index, expected=f"id {n} (ids 0..N-1)")
            length = e.length(stream.schema)
            steps += length
            report.episodes += 1
            if deep:
                rel = e.source.get("file") if isinstance(e.source, dict) else None
                _check_episode(e, length, source.spaces, report, str(source.data_dir.parent / rel) if rel else where)
    except ShardstoreError as err:  # what the reader refuses ends the walk (rows that disagree, a field missing)
        m = _MEMBER.match(err.member or "")
        where_ = {"episode": int(m.group(1)), "field": m.group(2)} if m else {"field": err.member}
        report.add("error", "read", err.detail, file=err.path, **where_)
    report.frames = steps
    if deep:
        report.ran("totals")
        if total_eps is not None and total_eps != report.episodes:
            report.add("error", "totals", f"total_episodes is {total_eps}", file=where, field="total_episodes",
                       expected=f"{report.episodes} (episodes in the data)")
        if total_steps is not None and total_steps != steps:
            report.add("error", "totals", f"total_steps is {total_steps}", file=where, field="total_steps",
                       expected=f"{steps} (the episodes' steps)")
    report.finish()
    return report


#: ``minari.supported_dataset_versions`` of minari 0.5.4 (its loader refuses any other ``minari_version``).
SUPPORTED_VERSIONS = frozenset({"0.4.0", "0.4.1", "0.4.2", "0.4.3", "0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4"})


def _check_metadata(meta: Mapping[str, Any] | None, report: FormatReport, where: str) -> None:
    if meta is None:
        return  # 0.3/0.4: the attributes of main_data.hdf5, read by the reader
    for key in ("observation_space", "action_space"):
        if key in meta and not isinstance(meta[key], str):
            report.add("error", "metadata", f"{key} is a {type(meta[key]).__name__}", file=where, field=key,
                       expected="a serialized space (a JSON string), as minari reads it")
        elif key in meta and spaces.parse(meta[key]) is None:  # minari's loader deserializes it on open
            report.add("error", "metadata", f"{key} {meta[key][:80]!r} is not a JSON object", file=where, field=key,
                       expected="a serialized space (a JSON object), as minari reads it")
        elif key not in meta and not isinstance(meta.get("env_spec"), str):
            report.add("error", "metadata", f"no {key} and no env_spec", file=where, field=key,
                       expected="a serialized space, or an env_spec to build the environment from")
    for key, kind in (("dataset_id", str), ("minari_version", str), ("total_episodes", int), ("total_steps", int)):
        if key in meta and not isinstance(meta[key], kind):
            report.add("error", "metadata", f"{key} is {meta[key]!r}", file=where, field=key,
                       expected=f"a {kind.__name__} (minari asserts it)")
        elif key not in meta:  # MinariDataset reads metadata[key]: a KeyError
            report.add("error", "metadata", f"no {key}", file=where, field=key, expected="the key minari's loader reads")
    version = meta.get("minari_version")
    if isinstance(version, str) and version not in SUPPORTED_VERSIONS:
        report.add("error", "metadata", f"minari_version {version!r}", file=where, field="minari_version",
                   expected=f"one minari 0.5.4 reads ({', '.join(sorted(SUPPORTED_VERSIONS))})")


def _check_episode(e: Episode, n: int, layout: Mapping[str, Any], report: FormatReport, file: str) -> None:
    add = functools.partial(report.add, file=file)
    report.ran("rows", "terminal", "spaces", "finite")
    for name, values in e.steps.items():
        top = name.split(".")[0]
        rows = len(values)
        want = n + 1 if top in ("observations", "infos") else n
        if top in ("observations", "actions", "rewards", "terminations", "truncations") and rows != want:
            add("error", "rows", f"{rows} rows", episode=e.index, field=name,
                       expected=f"{want} ({'steps+1' if want > n else 'one per step'}, {n} steps)")
    term = _flags(e.steps.get("terminations"), n)
    trunc = _flags(e.steps.get("truncations"), n)
    ends = term | trunc
    if ends[:-1].any():
        i = int(np.flatnonzero(ends[:-1])[0])
        add("error", "terminal", f"a termination or truncation at step {i} of {n}", episode=e.index, frame=i,
                   field="terminations" if term[i] else "truncations", expected="only at the last step")
    if n and term[-1] and trunc[-1]:
        add("warning", "terminal", "the last step is both terminated and truncated", episode=e.index, frame=n - 1)
    elif n and not ends[-1]:
        add("warning", "terminal", "the last step is neither terminated nor truncated", episode=e.index,
                   frame=n - 1, expected="terminations or truncations true at the last step")
    for name, values in e.steps.items():
        if not isinstance(values, np.ndarray):
            continue
        path = tuple(name.split("."))
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values.reshape(len(values), -1)).all(1) if len(values) else np.zeros(0, bool)
            space = spaces.space_at(layout, path)
            infinite_ok = space is not None and not np.isfinite(np.asarray(space.get("high", 0), np.float64)).all()
            nan = np.isnan(values.reshape(len(values), -1)).any(1) if len(values) else bad
            bad = nan if infinite_ok else bad
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                add("error", "finite", f"NaN or Inf in {int(bad.sum())} rows", episode=e.index, frame=i,
                           field=name, expected="finite values")
        _check_space(values, spaces.space_at(layout, path), report, e.index, name, file)


def _flags(values: Any, n: int) -> np.ndarray:
    if not isinstance(values, np.ndarray) or len(values) != n:
        return np.zeros(n, bool)
    return values.astype(bool).reshape(n)


def _check_space(
    values: np.ndarray, space: dict[str, Any] | None, report: FormatReport, ep: int, name: str, file: str
) -> None:
    add = functools.partial(report.add, file=file)
    if space is None or not len(values):
        return
    kind = space.get("type")
    if kind == "Box":
        shape = [int(s) for s in space.get("shape", [])]
        if list(values.shape[1:]) != shape:
            add("error", "spaces", f"rows of shape {list(values.shape[1:])}", episode=ep, field=name,
                       expected=f"shape {shape} (the Box space)")
            return
        if str(space.get("dtype")) != str(values.dtype):
            add("error", "spaces", f"dtype {values.dtype}", episode=ep, field=name,
                       expected=f"{space.get('dtype')} (the Box space)")
        low = np.broadcast_to(np.asarray(space.get("low", -np.inf), np.float64), shape)
        high = np.broadcast_to(np.asarray(space.get("high", np.inf), np.float64), shape)
        v = values.astype(np.float64)
        out = ((v < low) | (v > high)).reshape(len(v), -1).any(1)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            add("error", "spaces", f"values outside the Box's bounds in {int(out.sum())} rows", episode=ep,
                       frame=i, field=name, expected=f"low {_short(low)} .. high {_short(high)}")
    elif kind == "Discrete":
        start, count = int(space.get("start", 0)), int(space.get("n", 0))
        flat = values.reshape(len(values), -1)
        out = ((flat < start) | (flat >= start + count)).any(1)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            add("error", "spaces", f"value {flat[i].tolist()} outside the Discrete space", episode=ep, frame=i,
                       field=name, expected=f"{start}..{start + count - 1}")


def _short(a: np.ndarray) -> str:
    flat = np.unique(a)
    return str(flat[0]) if len(flat) == 1 else str(a.ravel()[:4].tolist())

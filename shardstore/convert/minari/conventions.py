"""Episodes of another format shaped as Minari holds them, so that ``minari`` 0.5's loader reads them.

Minari's loader needs the top-level groups ``observations`` (one row more than steps: the
observation after the last action), ``actions``, ``rewards``, ``terminations``, ``truncations``
(``infos`` optional) and, in ``metadata.json``, the observation and action spaces (inferred from the
fields by ``spaces.infer``) and the totals. So a stream from LeRobot, RLDS or the episode-frame
layout is mapped by the fields' roles (``episodes.conventions.role``):

- observations (``observation.*``, ``obs``) -> ``observations/...``; the final row is the last step's
  observation (RLDS's convention: the last step holds it, its action and reward are dropped), or
  ``next_X``'s last row where ``X``/``next_X`` pairs exist (nothing dropped);
- actions -> ``actions/...``; the first reward field -> ``rewards`` (zeros when there is none);
- ``terminations``/``truncations`` from the episode's end (``Episode.terminal``);
- the step's task text (``language_instruction``) -> the episode attribute ``tasks``; each episode's
  ``id`` and ``total_steps`` attributes as minari's writer sets them; LeRobot's per-episode
  bookkeeping (``conventions.EPISODE_BOOKKEEPING``: file locations, stats of its columns) dropped;
- LeRobot's bookkeeping columns and the other formats' flags are dropped (derived again by any
  writer that needs them); any other field -> ``infos/...`` (with the final row);
- videos decoded into uint8 frames, PNG/JPEG images into uint8 arrays (stored raw,
  ``jpeg_encoding`` false: lossless), pickled steps into arrays only with ``allow_pickle``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace

import numpy as np

from ...episodes import conventions as conv
from ...episodes.mapping import ConversionReport
from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...episodes.tasks import TASKS, episode_tasks

__all__ = ["to_minari"]

FORMAT = "minari"


def to_minari(stream: EpisodeStream, report: ConversionReport, *, allow_pickle: bool = False) -> EpisodeStream:
    """``stream`` in Minari's shape (a Minari source is returned as it is)."""
    if stream.schema.source_format == FORMAT:
        return stream
    stream = conv.decode_for(stream, report, "array", allow_pickle)
    roles = {f.name: conv.role(f) for f in stream.schema.fields}
    if conv.next_pairs(stream.schema):
        stream = conv.join_next_rows(stream, report)
        info_pad = True
    else:
        final = [f.name for f in stream.schema.fields if roles[f.name] in ("observation", "other")]
        stream = conv.last_step_as_final_row(_with_steps(stream, report), report, final)
        info_pad = False
    return _placed(stream, report, roles, info_pad)


def _with_steps(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """Without the episodes of one step: that step is only the final observation, and Minari's
    loader reads no episode without steps."""
    schema = stream.schema

    def kept(episodes: Iterable[Episode]) -> Iterator[Episode]:
        for ep in episodes:
            if ep.length(schema) > 1:
                yield ep
            else:
                report.drop(f"episode {ep.index}", "one step, which holds only the final observation: Minari "
                            "has no episode without steps")

    return replace(stream, episodes=kept(stream.episodes), count=None, total_steps=None, parts=None)


def _placed(stream: EpisodeStream, report: ConversionReport, roles: Mapping[str, str], info_pad: bool) -> EpisodeStream:
    schema = stream.schema
    by_role: dict[str, list[FieldSpec]] = {}
    for f in schema.fields:
        by_role.setdefault(roles.get(f.name, "other"), []).append(f)
    fields: list[FieldSpec] = []
    renamed: dict[str, str] = {}

    def place(group: list[FieldSpec], top: str, heads: tuple[str, ...]) -> None:
        for f in group:
            p = conv.parts(f)
            rest = p[1:] if p[0] in heads else p
            path = (top,) if len(group) == 1 and not rest else (top, *(rest or p))
            spec = replace(f, name=".".join(path), path=path, attrs={})
            fields.append(spec)
            renamed[f.name] = spec.name
            report.map(f.name, "/".join(path))

    place(by_role.get("observation", []), "observations", conv.OBSERVATION)
    place(by_role.get("action", []), "actions", conv.ACTION)
    rewards = by_role.get("reward", [])
    if rewards:
        place(rewards[:1], "rewards", conv.REWARD)
    else:
        report.derive("rewards", "zeros (the source has no reward)")
    padded = [f for f in by_role.get("other", []) if info_pad and f.rows == "steps"]
    place(by_role.get("other", []), "infos", ("infos",))
    fields = [replace(f, rows="steps+1") if f.path[0] == "infos" else f for f in fields]
    for f in padded:
        report.derive(f"{renamed[f.name]}'s final row", "zero (an info after the last step)")
    for why, group in (("a second reward field", rewards[1:]),
                       ("an episode-end flag: Minari's terminations/truncations come from the episode's end",
                        by_role.get("flag", [])),
                       ("LeRobot bookkeeping (a LeRobot writer rebuilds it)", by_role.get("bookkeeping", []))):
        for f in group:
            report.drop(f.name, why)
    tasks = by_role.get("task", [])
    for f in tasks:
        report.map(f.name, f"episode attribute {TASKS}", encoding="the episode's distinct texts")
    flags = (FieldSpec("terminations", "array", "|b1", (), ("terminations",)),
             FieldSpec("truncations", "array", "|b1", (), ("truncations",)))
    report.derive("terminations", "true at the last step of an episode that ended terminally")
    report.derive("truncations", "true at the last step of an episode that was cut")
    report.derive("episode attributes id, total_steps", "the episode's number and steps, as minari writes them")
    if schema.source_format == "lerobot":
        report.drop(f"episode metadata {', '.join(conv.EPISODE_BOOKKEEPING)}",
                    "LeRobot bookkeeping of its own files and columns (a LeRobot writer derives it again)")
    if not rewards:
        fields.append(FieldSpec("rewards", "array", "<f8", (), ("rewards",)))
    fields += flags
    out = Schema(tuple(fields), schema.source_format, schema.source_version,
                 {k: v for k, v in schema.attrs.items() if k in ("tasks", "subflavors")})

    def shaped(ep: Episode) -> Episode:
        n = ep.length(schema)
        steps = {renamed[name]: ep.steps[name] for name in renamed}
        for f in padded:
            steps[renamed[f.name]] = conv.pad_row(f, ep.steps[f.name])
        if not rewards:
            steps["rewards"] = np.zeros(n, np.float64)
        last = np.arange(n) == n - 1
        steps["terminations"] = last & ep.terminal
        steps["truncations"] = last & (not ep.terminal)
        metadata = {k: v for k, v in ep.metadata.items() if k not in conv.EPISODE_BOOKKEEPING}
        metadata.update(id=ep.index, total_steps=n)  # as minari's writer: its loader sums total_steps of a subset
        found = episode_tasks(schema, ep)
        if found:
            metadata[TASKS] = found
        return replace(ep, steps=steps, metadata=metadata)

    return replace(conv.map_stream(stream, out, shaped), source_files={})

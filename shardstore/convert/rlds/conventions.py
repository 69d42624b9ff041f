"""Episodes of another format shaped as RLDS holds them (LeRobot sources have the mapping spec of
their own, ``lerobot_mapping``):

- Minari's observation after the last action becomes one more step, the last (``is_last``;
  ``is_terminal`` from the episode's end), its action and reward zero: RLDS's own convention, which
  ``last_step_as_final_row`` undoes on the way back;
- an ``X``/``next_X`` pair (the episode-frame layout's ``obs``/``next_obs``) becomes ``X`` with that
  final row first, then the same last step;
- names by role: observations under ``observation/``, actions ``action``, the reward ``reward``;
  Minari's ``terminations``/``truncations`` and the layout's ``dones`` are dropped (RLDS's flags,
  derived from the episode's end, carry them); other fields keep their names;
- the episode's task (``episodes.tasks``) becomes ``language_instruction`` when there is none;
- videos decoded into PNG frames; pickled steps into arrays only with ``allow_pickle``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ...episodes import conventions as conv
from ...episodes.mapping import ConversionReport
from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...episodes.tasks import TASK_FIELDS, step_tasks

__all__ = ["to_rlds"]

FORMAT = "rlds"
#: Per-step flags of other formats that RLDS's is_first/is_last/is_terminal replace (discount stays).
_REPLACED_FLAGS = ("terminations", "truncations", "dones", "next.done")


def to_rlds(stream: EpisodeStream, report: ConversionReport, *, allow_pickle: bool = False) -> EpisodeStream:
    """``stream`` in RLDS's shape (an RLDS source is returned as it is)."""
    if stream.schema.source_format == FORMAT:
        return stream
    stream = conv.decode_for(stream, report, "png", allow_pickle)
    stream = conv.join_next_rows(stream, report)
    stream = _renamed(stream, report)
    stream = conv.final_row_as_last_step(stream, report)
    stream = _language(stream, report)
    report.derive("steps/is_first, is_last, is_terminal", "the episode's length and how it ended")
    return replace(stream, source_files={})


def _renamed(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    tops = {"observation": ("observation", conv.OBSERVATION), "action": ("action", conv.ACTION),
            "reward": ("reward", conv.REWARD)}
    fields: list[FieldSpec] = []
    renamed: dict[str, str] = {}
    for f in stream.schema.fields:
        r = conv.role(f)
        if f.name in _REPLACED_FLAGS or conv.parts(f)[0] in _REPLACED_FLAGS:
            report.drop(f.name, "RLDS's is_last/is_terminal flags carry the episode's end")
            continue
        p = conv.parts(f)
        path = p
        if r in tops and not p[0].startswith(conv.NEXT):
            top, heads = tops[r]
            path = (top, *(p[1:] if p[0] in heads else p))
        spec = replace(f, name=".".join(path), path=path)
        if spec.name in renamed.values():
            report.drop(f.name, f"a second field named {spec.name!r} in RLDS")
            continue
        renamed[f.name] = spec.name
        fields.append(spec)
        wide = f.kind == "array" and np.dtype(f.dtype).kind == "f" and np.dtype(f.dtype).itemsize > 4
        report.map(f.name, "steps/" + "/".join(path),
                   cast=f"{f.dtype} -> float32 values (tf.train.Example's float_list)" if wide else "")

    def rename(ep: Episode) -> Episode:
        return replace(ep, steps={new: ep.steps[old] for old, new in renamed.items()}, metadata=_nested(ep.metadata))

    schema = Schema(tuple(fields), stream.schema.source_format, stream.schema.source_version,
                    {k: v for k, v in stream.schema.attrs.items() if k in ("tasks", "subflavors")})
    return conv.map_stream(stream, schema, rename)


def _nested(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Flat ``a/b`` metadata keys (Minari's HDF5 attributes) as nested mappings: TFDS feature names
    have no ``/``."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        *groups, leaf = key.split("/")
        node = out
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = value
    return out


def _language(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """``language_instruction`` from the episodes' tasks, when the source has a task but no such field."""
    schema = stream.schema
    if any(n in schema.names for n in TASK_FIELDS):
        return stream
    first, episodes = conv.peek(stream.episodes)
    if first is None or step_tasks(schema, first) is None:
        return replace(stream, episodes=episodes)
    out = replace(schema, fields=(*schema.fields, FieldSpec("language_instruction", "text", path=("language_instruction",))))
    report.derive("steps/language_instruction", "the episode's task (episode tasks, the task folder)")

    def language(ep: Episode) -> Episode:
        tasks = step_tasks(schema, ep) or [""] * ep.length(schema)
        return replace(ep, steps={**ep.steps, "language_instruction": tasks})

    return conv.map_stream(replace(stream, episodes=episodes), out, language)

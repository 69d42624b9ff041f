"""Episodes of another format shaped as the episode-frame layout holds them (one pickled array per
step and part, as the research code's ``load_dataset_dict`` reads ``obs``, ``next_obs``, ``acts``,
``rews``, ``dones``):

- Minari's observation after the last action: each ``steps+1`` field ``X`` becomes ``X`` and
  ``next_X`` (the layout's ``obs``/``next_obs``; ``join_next_rows`` undoes it on the way back);
- names by role: observations ``obs``/``next_obs`` (``obs.<key>`` for a dict's members), actions
  ``acts``, the reward ``rews``; Minari's ``terminations``/``truncations`` are dropped (``dones``
  is written from the episode ends); other fields keep their names;
- videos and PNG/JPEG images decoded into uint8 HWC arrays;
- the dataset's task (``episodes.tasks``) becomes the ``task`` of the metadata member.
"""

from __future__ import annotations

from dataclasses import replace

from ...episodes import conventions as conv
from ...episodes.mapping import ConversionReport
from ...episodes.model import Episode, EpisodeStream, FieldSpec
from ...episodes.tasks import dataset_task, episode_tasks, task_table
from .layout import DONES, FORMAT

__all__ = ["to_episode_wds"]

_NAMES = {"observation": "obs", "action": "acts", "reward": "rews"}
_REPLACED_FLAGS = ("terminations", "truncations", "next.done")


def to_episode_wds(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    """``stream`` in the layout's shape (a source of the layout is returned as it is)."""
    if stream.schema.source_format == FORMAT:
        return stream
    stream = conv.decode_for(stream, report, "array", allow_pickle=False)  # only the layout itself has pickles
    stream = conv.split_next_rows(stream, report)
    return _renamed(stream, report)


def _short(f: FieldSpec) -> str:
    """The layout's name of a field: ``obs``, ``next_obs``, ``obs.<key>``, ``acts``, ``rews``."""
    p = conv.parts(f)
    r = conv.role(f)
    nxt = p[0].startswith(conv.NEXT)
    head = p[0].removeprefix(conv.NEXT) if nxt else p[0]
    heads = {"observation": conv.OBSERVATION, "action": conv.ACTION, "reward": conv.REWARD}.get(r, ())
    if r not in _NAMES or head not in heads and f.name not in heads:
        return f.name
    rest = p[1:] if head in heads else ()
    return ".".join(((conv.NEXT if nxt else "") + _NAMES[r], *rest))


def _renamed(stream: EpisodeStream, report: ConversionReport) -> EpisodeStream:
    fields: list[FieldSpec] = []
    renamed: dict[str, str] = {}
    for f in stream.schema.fields:
        if f.name in _REPLACED_FLAGS:
            report.drop(f.name, f"the layout's {DONES} (written from the episode ends) carries it")
            continue
        name = _short(f)
        if name in renamed.values():
            report.drop(f.name, f"a second field named {name!r}")
            continue
        renamed[f.name] = name
        fields.append(replace(f, name=name, path=()))
        report.map(f.name, f"{name}.pickle", encoding="pickle (protocol 4)")
    attrs = {k: v for k, v in stream.schema.attrs.items() if k == "tasks"}
    first, episodes = conv.peek(stream.episodes)
    task = dataset_task(stream.schema) or next(iter(task_table(stream.schema)), None)
    if first is not None and task is None:
        task = next(iter(episode_tasks(stream.schema, first)), None)
    if task is not None:
        attrs["subflavors"] = {"task": task}
        report.derive("_metadata.meta.pickle task", "the source's (first) task")
    report.derive(f"{DONES}.pickle", "true at each episode's last step")

    def rename(ep: Episode) -> Episode:
        return replace(ep, steps={new: ep.steps[old] for old, new in renamed.items()})

    schema = replace(stream.schema, fields=tuple(fields), attrs=attrs)
    return replace(conv.map_stream(replace(stream, episodes=episodes), schema, rename), source_files={})

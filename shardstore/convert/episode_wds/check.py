"""``shardstore check episode-wds PATH [--deep]``: the episode-frame layout's shards, task by task.

Without ``--deep``: the task folders and their shards are found, each shard starts with its
metadata member. With ``--deep`` every step is read (the ``dones`` pickles through the restricted
unpickler, nothing else unpickled): per task its episode and frame counts (the report's lines say
them, a task with no frame is an error), the steps of each shard numbered ``frame_000``,
``frame_001``... without a gap or repeat (a frame lost or written twice), every step has a
``dones`` part, and an episode whose last step is not done (its shard ends first: a cut
trajectory) is a warning naming shard and episode.
"""

from __future__ import annotations

import os
from typing import Any

from ...episodes.problems import FormatReport
from ...episodes.problems import progress as progress_bar
from ...errors import ShardstoreError
from .layout import DONES, FORMAT, find_tasks, read_task

__all__ = ["check_episode_wds"]


def check_episode_wds(
    src: str | os.PathLike[str], *, deep: bool = False, storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> FormatReport:
    """The checks of the module docstring on the episode-frame folder ``src`` (local; the
    ``storage_options`` of the CLI are not used)."""
    report = FormatReport(os.fspath(src), FORMAT, deep=deep)
    report.ran("tasks")
    try:
        tasks = find_tasks(src)
    except ShardstoreError as err:
        report.add("error", "tasks", err.detail, file=err.path)
        report.finish()
        return report
    for task in progress_bar(tasks, len(tasks), "task", "Checking episode-wds", progress):
        name = "/".join(task.names) or str(task.folder)
        try:
            stream = read_task(task)
            if not deep:
                report.parts[name] = {"shards": len(task.shards)}
                continue
            report.ran("frames", "dones")
            episodes = frames = 0
            next_frame: dict[str, int] = {}  # per shard, the frame number its next step must have
            for ep in stream.episodes:
                n = ep.length(stream.schema)
                episodes += 1
                frames += n
                shard_name = ep.source.get("shard") if isinstance(ep.source, dict) else None
                shard = str(task.folder / shard_name) if shard_name else str(task.folder)
                keys = ep.source.get("keys", []) if isinstance(ep.source, dict) else []
                _check_numbering(report, shard, ep.index, keys, next_frame)
                dones = ep.steps.get(DONES)
                if isinstance(dones, list) and any(d == b"" for d in dones):
                    report.add("error", "dones", "steps without a dones part", file=shard, episode=ep.index,
                               field=DONES, expected="a dones pickle per step")
                if not ep.terminal:
                    report.add("warning", "dones", f"the shard ends before this episode's done ({n} steps)",
                               file=shard, episode=ep.index, frame=n - 1, field=DONES,
                               expected="dones true at an episode's last step")
            report.episodes += episodes
            report.frames += frames
            report.parts[name] = {"episodes": episodes, "frames": frames}
            if frames == 0:
                report.add("error", "frames", "no frames", file=str(task.folder), field=name,
                           expected="at least one step")
        except ShardstoreError as err:
            report.add("error", "tasks", err.detail, file=err.path, field=err.member)
    report.finish()
    return report


def _check_numbering(report: FormatReport, shard: str, episode: int, keys: list[str], next_frame: dict[str, int]) -> None:
    """The research code numbers a shard's steps ``frame_000``, ``frame_001``... across its
    trajectories: a number skipped or repeated is a frame lost or written twice."""
    where = str(shard)
    for t, key in enumerate(keys):
        number = key.rsplit("_", 1)[-1]
        if not number.isdigit():
            continue
        want = next_frame.get(where, 0)
        if int(number) != want:
            report.add("error", "frames", f"step key {key!r}", file=where, episode=episode, frame=t,
                       expected=f"frame_{want:03d} (the shard's steps numbered without a gap)")
        next_frame[where] = int(number) + 1

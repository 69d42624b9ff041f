"""Tasks: the natural-language task of an episode and of each of its steps, one convention for every
format, so that RLDS's ``language_instruction``, LeRobot's tasks (``meta/tasks``, ``task_index``),
a Minari episode's ``tasks`` attribute and the episode-frame layout's task folder name all meet in
the hub without any format knowing another's names.

The convention:

- ``Episode.metadata["tasks"]`` (``TASKS``): the episode's task texts, a list of strings in order
  of first use (LeRobot's ``episodes.jsonl`` ``tasks``). A writer that has a place for tasks reads
  them with ``episode_tasks``, which also finds them where a reader left them in the steps;
- a step's task is the text field named ``language_instruction`` or ``task`` (``TASK_FIELDS``),
  else the ``task_index`` array field looked up in the dataset's task list ``Schema.attrs["tasks"]``
  (LeRobot's), else the episode's first task; ``step_tasks`` gives them;
- a dataset-wide task with no per-episode place (the episode-frame layout's ``<task>`` folder) is
  ``Schema.attrs["subflavors"]["task"]``, the episodes' task when they name none.

Pure functions of an episode and its schema: nothing here reads or writes a file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .model import Episode, Schema

__all__ = ["TASKS", "TASK_FIELDS", "TASK_INDEX", "dataset_task", "episode_tasks", "step_tasks", "task_table"]

#: The episode metadata key of the episode's task texts.
TASKS = "tasks"
#: Text fields that hold each step's task (RLDS's name first).
TASK_FIELDS = ("language_instruction", "task")
#: The integer field of a task's position in ``Schema.attrs["tasks"]`` (LeRobot's).
TASK_INDEX = "task_index"


def task_table(schema: Schema) -> list[str]:
    """The dataset's task list (``Schema.attrs["tasks"]``), [] when it has none."""
    tasks = schema.attrs.get(TASKS)
    if isinstance(tasks, Sequence) and not isinstance(tasks, str) and all(isinstance(t, str) for t in tasks):
        return list(tasks)
    return []


def dataset_task(schema: Schema) -> str | None:
    """The one task a whole dataset is about (the episode-frame layout's task folder), or None."""
    flavors = schema.attrs.get("subflavors")
    task = flavors.get("task") if isinstance(flavors, dict) else None
    return task if isinstance(task, str) and task else None


def _text_field(schema: Schema) -> str | None:
    return next((n for n in TASK_FIELDS if n in schema.names and schema[n].kind == "text"), None)


def step_tasks(schema: Schema, episode: Episode) -> list[str] | None:
    """Each step's task text (see the module docstring for where it is found), or None when the
    episode has no task anywhere."""
    n = episode.length(schema)
    name = _text_field(schema)
    if name is not None:
        return [str(t) for t in episode.steps[name]][:n]
    table = task_table(schema)
    index = episode.steps.get(TASK_INDEX)
    if table and isinstance(index, np.ndarray) and index.size >= n:
        rows = index.reshape(len(index), -1)[:n, 0]
        if all(0 <= int(i) < len(table) for i in rows):
            return [table[int(i)] for i in rows]
    tasks = _metadata_tasks(episode) or ([t] if (t := dataset_task(schema)) else [])
    return [tasks[0]] * n if tasks else None


def episode_tasks(schema: Schema, episode: Episode) -> list[str]:
    """The episode's task texts in order of first use: its ``tasks`` metadata, else those of its
    steps, else the dataset's task; [] when it has none."""
    tasks = _metadata_tasks(episode)
    if tasks:
        return tasks
    steps = step_tasks(schema, episode)
    return list(dict.fromkeys(steps)) if steps else []


def _metadata_tasks(episode: Episode) -> list[str]:
    tasks = episode.metadata.get(TASKS)
    if isinstance(tasks, Sequence) and not isinstance(tasks, str) and all(isinstance(t, str) for t in tasks):
        return list(tasks)
    if isinstance(tasks, np.ndarray) and tasks.dtype.kind in "US":
        return [str(t) for t in tasks.tolist()]
    return []

"""The one column of a format that an edit derives from the result's task list.

LeRobot's frames carry ``task_index``, an index into the dataset's task list; a merge (task lists
merged by text) or ``set-task`` changes which index a task has, so the rewritten episodes' column is
rewritten with them. (``episode_index`` and ``index``, derived from an episode's place in the
dataset, are the LeRobot writer's to renumber on export.) Other formats derive nothing from the
task list, so only a LeRobot source's field of that name is touched, in its own dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..episodes.model import Schema, StepValues

__all__ = ["rewrite_task_index"]


def rewrite_task_index(schema: Schema, steps: dict[str, StepValues], task_index: Sequence[int] | None) -> None:
    """Set ``steps["task_index"]`` to ``task_index`` per row (in place); None leaves it as it is."""
    if task_index is None or schema.source_format != "lerobot" or "task_index" not in schema.names:
        return
    old = steps["task_index"]
    assert isinstance(old, np.ndarray)
    steps["task_index"] = np.asarray(task_index).astype(old.dtype).reshape(old.shape)

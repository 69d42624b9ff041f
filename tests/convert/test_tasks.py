"""The hub's task convention: where an episode's and a step's task text are found."""

from __future__ import annotations

import numpy as np

from shardstore.episodes.model import Episode, FieldSpec, Schema
from shardstore.episodes.tasks import episode_tasks, step_tasks

STATE = FieldSpec("state", "array", "<f4", (2,))


def test_language_instruction_gives_step_and_episode_tasks() -> None:
    schema = Schema((STATE, FieldSpec("language_instruction", "text")))
    ep = Episode(0, {"state": np.zeros((3, 2), np.float32), "language_instruction": ["a", "b", "a"]})
    assert step_tasks(schema, ep) == ["a", "b", "a"]
    assert episode_tasks(schema, ep) == ["a", "b"]


def test_task_index_through_the_dataset_task_list() -> None:
    schema = Schema((STATE, FieldSpec("task_index", "array", "<i8")), attrs={"tasks": ["pick", "place"]})
    ep = Episode(0, {"state": np.zeros((2, 2), np.float32), "task_index": np.array([1, 0])})
    assert step_tasks(schema, ep) == ["place", "pick"]
    assert episode_tasks(schema, ep) == ["place", "pick"]


def test_metadata_tasks_win_and_a_dataset_task_is_the_fallback() -> None:
    schema = Schema((STATE,), attrs={"subflavors": {"task": "reach"}})
    ep = Episode(0, {"state": np.zeros((2, 2), np.float32)})
    assert step_tasks(schema, ep) == ["reach", "reach"]
    ep.metadata["tasks"] = ["push"]
    assert episode_tasks(schema, ep) == ["push"]
    assert step_tasks(Schema((STATE,)), Episode(1, {"state": np.zeros((1, 2), np.float32)})) is None

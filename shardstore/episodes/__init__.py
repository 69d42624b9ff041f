"""Episodes of robot-learning data: the model every format converts through (``model``), and the
episode view of a prepared dataset."""

from __future__ import annotations

from .model import FLAG_FIELDS, Episode, EpisodeStream, FieldSpec, Schema, from_jsonable, to_jsonable

__all__ = ["FLAG_FIELDS", "Episode", "EpisodeStream", "FieldSpec", "Schema", "from_jsonable", "to_jsonable"]

"""Episodes of robot-learning data: the model every format converts through (``model``), the
writer of episodes into shards (``writer``), and the episode view of a prepared dataset (``view``).

The package itself is callable: ``shardstore.episodes(ds)`` is ``shardstore.episodes.episodes(ds)``
(the view), while ``shardstore.episodes.model`` etc. stay importable as submodules. A function of
the same name bound over the package (as ``shardstore.prepare`` is) would break
``import shardstore.episodes.model as m`` in the format modules that build on this one.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .model import FLAG_FIELDS, Episode, EpisodeStream, FieldSpec, Schema, from_jsonable, to_jsonable
from .view import Episodes, episodes
from .writer import DEFAULT_SHARD_SIZE, EpisodeWriter, WriteReport, infer_schema

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "FLAG_FIELDS",
    "Episode",
    "EpisodeStream",
    "EpisodeWriter",
    "Episodes",
    "FieldSpec",
    "Schema",
    "WriteReport",
    "episodes",
    "from_jsonable",
    "infer_schema",
    "to_jsonable",
]


class _CallablePackage(types.ModuleType):
    """This package's module type: calling it opens the episode view."""

    def __call__(self, dataset: Any, split: str | None = None, **kwargs: Any) -> Episodes:
        return episodes(dataset, split, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

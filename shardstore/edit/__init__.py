"""Episode-level edits of an episode dataset (``shardstore.edit``): delete, keep, filter, split,
merge, rename and drop fields, set tasks; videos kept whole (no frame decoded or encoded), stats
recomputed from the values. ``ops`` has the operations, ``expr`` the ``--where`` language, ``select``
the plan, ``apply`` the writing, ``report`` what it did.

    import shardstore
    shardstore.edit.delete_episodes("ds", "ds_clean", episodes="3,7,10-20")
"""

from __future__ import annotations

from .expr import parse_expression
from .ops import (
    delete_episodes,
    drop_field,
    filter_episodes,
    keep_episodes,
    merge,
    rename_field,
    set_task,
    split,
)
from .report import EditReport

__all__ = [
    "EditReport",
    "delete_episodes",
    "drop_field",
    "filter_episodes",
    "keep_episodes",
    "merge",
    "parse_expression",
    "rename_field",
    "set_task",
    "split",
]

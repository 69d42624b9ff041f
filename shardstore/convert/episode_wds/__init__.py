"""The episode-frame WebDataset layout (one tar member per step and field) to and from the episode model."""

from __future__ import annotations

from .api import BLEND_YAML, ImportReport, export_episode_wds, import_episode_wds, source_summary
from .layout import (
    FORMAT,
    META_MEMBER,
    EpisodeWdsShard,
    Task,
    find_tasks,
    read_episode_wds,
    write_episode_wds,
)

__all__ = ['BLEND_YAML', 'ImportReport', 'import_episode_wds', 'export_episode_wds', 'source_summary', 'FORMAT', 'META_MEMBER', 'Task', 'EpisodeWdsShard', 'find_tasks', 'read_episode_wds', 'write_episode_wds']

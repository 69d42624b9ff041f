"""The source's metadata files an edited dataset keeps (``.nv-meta/source/``).

An import keeps the source's metadata files byte for byte so an export can give them back
unchanged. After an edit most of them describe episodes that are gone:

- LeRobot: ``meta/info.json`` is kept, its totals, ``splits`` and ``features`` (renamed or
  dropped fields) updated; the per-episode files (``meta/episodes*``, ``meta/episodes_stats.jsonl``),
  the task list and ``meta/stats.json`` are left out, so the writer rewrites them from the episodes
  (stats recomputed from the values) instead of copying stale ones.
- Other formats derive their counts from the episodes when they export; their files are kept as
  they are, unless fields were renamed or dropped: then the files (which name the old fields) are
  left out and the export derives them from the schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["edited_source_files"]

#: LeRobot's files rewritten from the episodes (prefixes).
_LEROBOT_DERIVED = ("meta/episodes", "meta/stats.json", "meta/tasks.")
_INFO = "meta/info.json"


def edited_source_files(
    files: Mapping[str, bytes],
    source_format: str,
    *,
    episodes: int,
    frames: int,
    tasks: int,
    splits: Mapping[str, tuple[int, int]],
    renamed: Mapping[str, str],
    dropped: frozenset[str],
) -> dict[str, bytes]:
    """The files the result keeps; ``splits`` maps a split to its episode range ``[lo, hi)``."""
    if source_format != "lerobot":
        return {} if renamed or dropped else dict(files)
    out = {k: v for k, v in files.items() if not k.startswith(_LEROBOT_DERIVED)}
    if _INFO in out:
        info = json.loads(out[_INFO])
        features = info.get("features") or {}
        info["features"] = {renamed.get(k, k): v for k, v in features.items() if k not in dropped}
        info.update(
            total_episodes=episodes,
            total_frames=frames,
            total_tasks=tasks,
            splits={name: f"{lo}:{hi}" for name, (lo, hi) in splits.items()},
        )
        if "total_videos" in info:
            cameras = sum(1 for f in info["features"].values() if isinstance(f, dict) and f.get("dtype") == "video")
            info["total_videos"] = episodes * cameras
        out[_INFO] = json.dumps(info, indent=4).encode()
    return out

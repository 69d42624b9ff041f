"""One report for every import, export and conversion: what ``--json`` prints and the summary line.

Each format's importer and exporter returns its own report (a dataclass with the counts it knows,
named as its format names them: ``frames`` for LeRobot, ``out`` or ``path``); ``ConvertReport.of``
maps any of them to one shape, so a script reads the same keys whatever the format:

``path`` (what was written), ``source`` (what was read), ``format`` and ``version`` (the outside
format and its version: the source's for an import, the one written for an export), ``episodes``,
``steps``, ``bytes``, ``seconds``, ``warnings``, and ``extras`` (everything else the format
reported, under its own names).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..humanize import human_bytes, plural

__all__ = ["ConvertReport", "folder_bytes"]

#: A format's own name for a common key.
_ALIASES = {"path": ("path", "out"), "steps": ("steps", "frames")}
_COMMON = ("path", "version", "episodes", "steps", "bytes", "seconds", "warnings")
_FORMAT_NAMES = {"minari": "Minari", "lerobot": "LeRobot", "rlds": "RLDS", "episode-wds": "episode-frame WebDataset"}


@dataclass(frozen=True, slots=True)
class ConvertReport:
    """What an import, export or conversion did; see the module docstring."""

    action: str  # "import" or "export"
    path: str
    source: str
    format: str
    version: str | None
    episodes: int
    steps: int
    bytes: int
    seconds: float
    warnings: tuple[str, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, raw: Any, *, action: str, fmt: str, source: str, seconds: float, **known: Any
    ) -> ConvertReport:
        """The common report of a format's own report ``raw`` (a dataclass, or a mapping). ``known``
        fills or overrides keys ``raw`` lacks (``path``, ``version``, ``episodes``, ``steps``,
        ``bytes``); ``seconds`` is the wall time the caller measured, used when ``raw`` has none."""
        values = dict(_as_mapping(raw))
        common: dict[str, Any] = {}
        for key in _COMMON:
            for name in _ALIASES.get(key, (key,)):
                if name in values and key not in common and _fits(key, values[name]):
                    common[key] = values.pop(name)
        common.update(known)
        path = str(common.get("path", ""))
        return cls(
            action=action,
            path=path if "://" in path or not path else os.path.abspath(path),
            source=source,
            format=fmt,
            version=None if common.get("version") is None else str(common["version"]),
            episodes=int(common.get("episodes", 0)),
            steps=int(common.get("steps", 0)),
            bytes=int(common.get("bytes", 0)),
            seconds=round(float(common.get("seconds", seconds)), 3),
            warnings=tuple(str(w) for w in common.get("warnings", ())),
            extras=values,
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object: the common keys, then ``extras``."""
        out = {k: getattr(self, k) for k in ("path", "source", "format", "version", "episodes", "steps", "bytes", "seconds")}
        return {**out, "warnings": list(self.warnings), "extras": dict(self.extras)}

    def summary(self) -> str:
        """The one human line: ``Imported 4 episodes, 43 steps (1.2 MB) from SRC (LeRobot v2.1) into OUT in 1.0 s``."""
        name = _FORMAT_NAMES.get(self.format, self.format)
        what = f"{name} {self.version}" if self.version else name
        counts = f"{plural(self.episodes, 'episode')}, {plural(self.steps, 'step')} ({human_bytes(self.bytes)})"
        if self.action == "import":
            line = f"Imported {counts} from {self.source} ({what}) into {self.path}"
        else:
            line = f"Exported {counts} from {self.source} to {self.path} ({what})"
        warned = f", {plural(len(self.warnings), 'warning')}" if self.warnings else ""
        return f"{line} in {self.seconds:.1f} s{warned}"


def _as_mapping(raw: Any) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    if hasattr(raw, "to_dict"):
        return dict(raw.to_dict())
    if dataclasses.is_dataclass(raw) and not isinstance(raw, type):
        return dataclasses.asdict(raw)
    raise TypeError(f"not a report: {type(raw).__name__}")


def _fits(key: str, value: Any) -> bool:
    """Whether a format's value can be the common ``key`` (LeRobot's import ``frames`` is a mode
    name, not a count: it stays an extra)."""
    if key in ("episodes", "steps", "bytes"):
        return isinstance(value, int) and not isinstance(value, bool)
    if key == "seconds":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if key == "warnings":
        return isinstance(value, (list, tuple))
    return isinstance(value, str)


def folder_bytes(path: str) -> int:
    """Bytes of the files under a local ``path`` (what an export that does not count them wrote)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total

"""What a format's check found: problems with their severity and place, and the report around them.

Every format's ``check`` (LeRobot, Minari, RLDS, episode-frame WebDataset) reports through these
types, so ``shardstore check FORMAT PATH [--deep]`` prints one kind of line and one JSON shape
whatever the format: a ``Problem`` says how bad (``error``: a loader or a training run would be
wrong; ``warning``: allowed but unusual), which check found it, where (file, episode, frame,
field, camera) and what was expected instead of what was found.

A fault that repeats (a NaN in every row) is one problem per episode and field, naming the first
frame and the count; past ``MAX_PER_CHECK`` problems of one check the rest are only counted.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["Severity", "Problem", "FormatReport", "MAX_PER_CHECK", "progress"]

Severity = Literal["error", "warning"]
#: Problems kept per check; the rest are counted in ``FormatReport.suppressed``.
MAX_PER_CHECK = 100

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: its severity, the check's name, what is wrong, where, and what was expected."""

    severity: Severity
    check: str
    message: str
    file: str | None = None
    episode: int | None = None
    camera: str | None = None
    frame: int | None = None
    field: str | None = None
    expected: str | None = None

    def where(self) -> str:
        parts = [
            self.file,
            None if self.episode is None else f"episode {self.episode}",
            None if self.camera is None else f"camera {self.camera!r}",
            None if self.frame is None else f"frame {self.frame}",
            None if self.field is None else f"field {self.field!r}",
        ]
        return ", ".join(p for p in parts if p)

    def __str__(self) -> str:
        where = self.where()
        text = f"{self.severity}: [{self.check}] {where + ': ' if where else ''}{self.message}"
        return f"{text} (expected {self.expected})" if self.expected else text


@dataclass(slots=True)
class FormatReport:
    """What a format's check found: the dataset's format, version and size, the checks run, the
    problems (``ok`` when none is an error) and how long it took."""

    source: str
    format: str
    version: str | None = None
    deep: bool = False
    unit: str = "frames"  # what a step is called in the format (Minari, RLDS: steps)
    episodes: int = 0
    frames: int = 0
    videos: int = 0
    checks: list[str] = field(default_factory=list)
    parts: dict[str, dict[str, int]] = field(default_factory=dict)  # per task / split: episodes, frames
    problems: list[Problem] = field(default_factory=list)
    suppressed: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _per_check: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.errors == 0

    @property
    def errors(self) -> int:
        return sum(p.severity == "error" for p in self.problems) + sum(self.suppressed.values())

    def ran(self, *checks: str) -> None:
        """Record that ``checks`` ran (each once, in order)."""
        self.checks += [c for c in checks if c not in self.checks]

    def add(self, severity: Severity, check: str, message: str, **where: Any) -> None:
        """A problem; past ``MAX_PER_CHECK`` of one check, errors are only counted."""
        n = self._per_check[check] = self._per_check.get(check, 0) + 1
        if n > MAX_PER_CHECK:
            if severity == "error":
                self.suppressed[check] = self.suppressed.get(check, 0) + 1
            return
        self.problems.append(Problem(severity, check, message, **where))

    def finish(self) -> None:
        self.seconds = round(time.perf_counter() - self._started, 3)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "version": self.version,
            "deep": self.deep,
            "ok": self.ok,
            "errors": self.errors,
            "warnings": sum(p.severity == "warning" for p in self.problems),
            "episodes": self.episodes,
            "frames": self.frames,
            "unit": self.unit,
            "videos": self.videos,
            "checks": self.checks,
            "parts": self.parts,
            "problems": [asdict(p) for p in self.problems],
            "suppressed": self.suppressed,
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def lines(self) -> list[str]:
        """A verdict line, then one line per problem."""
        warnings = sum(p.severity == "warning" for p in self.problems)
        verdict = "ok" if self.ok else f"{self.errors} error(s)"
        if warnings:
            verdict += f", {warnings} warning(s)"
        size = f"{self.episodes} episodes, {self.frames} {self.unit}" + (f", {self.videos} videos" if self.videos else "")
        head = (
            f"{self.source}: {self.format}{' ' + self.version if self.version else ''}, {size}"
            f"{' (deep)' if self.deep else ''}: {verdict}"
        )
        parts = [f"  {name}: " + ", ".join(f"{v} {k}" for k, v in c.items()) for name, c in self.parts.items()]
        more = [f"... and {n} more {check} errors" for check, n in self.suppressed.items()]
        return [head, *parts, *(str(p) for p in self.problems), *more]


def progress(items: Iterable[_T], total: int, unit: str, desc: str, show: bool) -> Iterator[_T]:
    """``items`` with a progress bar on stderr when ``show`` (the CLI decides: a terminal, not --quiet)."""
    if not show:
        return iter(items)
    from tqdm import tqdm

    return iter(tqdm(items, total=total, unit=unit, desc=desc, file=sys.stderr))

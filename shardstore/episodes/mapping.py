"""What a conversion did to each field: the report every conversion between formats writes.

Four lists, each entry one field (or one piece of bookkeeping):

- ``mapped``: a source field that reached the target, under which name, with which dtype cast
  (``"<f4 -> <f8"``, empty when none) and which encoding (``"video -> png"``);
- ``derived``: what the target holds that the source did not carry as a field (RLDS's flags,
  Minari's terminations, LeRobot's bookkeeping columns and stats), and from what;
- ``approximated``: lossy re-encodes, with the PSNR measured when there is one;
- ``dropped``: a source field or row that has no place in the target, and why.

It is one piece on its own, beside the import/export summaries (episodes, steps, bytes): a
conversion's JSON carries both. Written beside the output as ``OUT.report.json`` and
``OUT.report.txt`` (``write``), never inside it, so the target's own loader sees only its format.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Approximated", "ConversionReport", "Derived", "Dropped", "Mapped", "report_paths"]


# Each entry prints as its line of ``OUT.report.txt`` (as ``problems.Problem`` prints as its line of
# a check's report); ``ConversionReport.to_dict`` gives its fields.
@dataclass(frozen=True, slots=True)
class Mapped:
    source: str
    target: str
    cast: str = ""
    encoding: str = ""

    def __str__(self) -> str:
        return (f"mapped: {self.source} -> {self.target}" + (f" (cast {self.cast})" if self.cast else "")
                + (f" [{self.encoding}]" if self.encoding else ""))


@dataclass(frozen=True, slots=True)
class Derived:
    target: str
    how: str

    def __str__(self) -> str:
        return f"derived: {self.target} <- {self.how}"


@dataclass(frozen=True, slots=True)
class Approximated:
    source: str
    target: str
    how: str
    psnr_db: float | None = None

    def __str__(self) -> str:
        psnr = f", PSNR {self.psnr_db:.1f} dB" if self.psnr_db is not None else ""
        return f"approximated: {self.source} -> {self.target}: {self.how}{psnr}"


@dataclass(frozen=True, slots=True)
class Dropped:
    source: str
    why: str

    def __str__(self) -> str:
        return f"dropped: {self.source}: {self.why}"


@dataclass
class ConversionReport:
    """The field mapping of one conversion ``source_format`` -> ``target_format``; built while the
    conventions run (``map``, ``derive``, ``approximate``, ``drop``), each entry recorded once."""

    source_format: str
    target_format: str
    mapped: list[Mapped] = field(default_factory=list)
    derived: list[Derived] = field(default_factory=list)
    approximated: list[Approximated] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def map(self, source: str, target: str, cast: str = "", encoding: str = "") -> None:
        """Record ``source -> target``; a field an earlier step already mapped to ``source`` keeps one
        entry, from its first name to its last, casts and encodings joined."""
        for i, m in enumerate(self.mapped):
            if m.target == source:
                self.mapped[i] = Mapped(m.source, target, "; ".join(filter(None, (m.cast, cast))),
                                        "; ".join(filter(None, (m.encoding, encoding))))
                return
        self._add(self.mapped, Mapped(source, target, cast, encoding))

    def derive(self, target: str, how: str) -> None:
        self._add(self.derived, Derived(target, how))

    def approximate(self, source: str, target: str, how: str, psnr_db: float | None = None) -> None:
        self._add(self.approximated, Approximated(source, target, how, psnr_db))

    def drop(self, source: str, why: str) -> None:
        self._add(self.dropped, Dropped(source, why))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @staticmethod
    def _add(entries: list[Any], entry: Any) -> None:
        if entry not in entries:
            entries.append(entry)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        entries = [*self.mapped, *self.derived, *self.approximated, *self.dropped]
        lines = [f"conversion {self.source_format} -> {self.target_format}", *(f"  {e}" for e in entries)]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

    def write(self, out: str | os.PathLike[str], extra: dict[str, Any] | None = None) -> tuple[str, str]:
        """Write ``OUT.report.json`` (this report, and ``extra`` beside it) and ``OUT.report.txt``
        beside ``out``; return their paths."""
        json_path, text_path = report_paths(out)
        body = {"conversion": self.to_dict(), **(extra or {})}
        for path, content in ((json_path, json.dumps(body, indent=2, default=str)), (text_path, self.text())):
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(content)
            os.replace(tmp, path)
        return json_path, text_path


def report_paths(out: str | os.PathLike[str]) -> tuple[str, str]:
    """``(OUT.report.json, OUT.report.txt)``: beside ``out``, never inside it."""
    base = os.fspath(out).rstrip("/").rstrip(os.sep)
    return f"{base}.report.json", f"{base}.report.txt"

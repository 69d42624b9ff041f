"""What an edit did: ``EditReport`` (the CLI prints it, ``--json`` gives it whole)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["EditReport"]


@dataclass
class EditReport:
    """The result of one edit.

    ``numbers``: per result episode ``[input, old number, new number]``. Video files: ``copied``
    (whole, byte for byte, into the result's video store; an episode's frames are a time range
    of its file, as before), ``remuxed`` and ``reencoded`` (with why) -- an edit of the store
    never cuts, joins or encodes a file, so these stay empty; an export cuts at packet level and
    says so in its own report. ``stats``: how each field's stats were made.
    """

    operation: str
    out: str
    inputs: list[str]
    episodes: int
    steps: int
    removed: int
    splits: dict[str, int]
    tasks: list[str]
    numbers: list[list[int]] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)  # renamed: old -> new; dropped: name -> ""
    copied: list[str] = field(default_factory=list)
    remuxed: list[str] = field(default_factory=list)
    reencoded: list[str] = field(default_factory=list)
    stats: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """A short human summary."""
        splits = ", ".join(f"{k} {v}" for k, v in self.splits.items())
        out = [
            f"{self.operation}: wrote {self.out}: {self.episodes} episodes ({splits}), {self.steps} steps, "
            f"{self.removed} episodes removed, {len(self.tasks)} tasks in {self.seconds:.2f} s",
            f"videos: {len(self.copied)} copied whole, {len(self.remuxed)} remuxed, {len(self.reencoded)} re-encoded "
            "(no frame decoded or encoded)",
        ]
        if self.fields:
            out.append("fields: " + ", ".join(f"{k} -> {v}" if v else f"{k} dropped" for k, v in self.fields.items()))
        return out

"""Numbers for people: the byte sizes and counts of the command line's summary lines."""

from __future__ import annotations

__all__ = ["human_bytes", "plural"]


def human_bytes(n: int) -> str:
    """``n`` bytes in decimal units: ``512 B``, ``16.3 MB``."""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def plural(n: int, word: str) -> str:
    """``1 shard``, ``2 shards``."""
    return f"{n} {word}{'' if n == 1 else 's'}"

"""A digest of every file under a folder (names and bytes): how the edit tests see that a source
was only read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(path)):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(path)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()

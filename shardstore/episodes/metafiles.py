"""A format's metadata files read as regular files only.

Every format keeps small metadata files beside its data (LeRobot's ``meta/``, Minari's
``metadata.json``, TFDS's ``dataset_info.json`` and ``features.json``) that an import reads whole
and keeps under ``.nv-meta/source/``. In a downloaded dataset such a name may be a symlink (to
``~/.ssh/id_rsa``: kept in the import and served to whoever reads it), a FIFO (the read blocks
forever) or a device. On local storage every component of the path is ``lstat``-ed below the
root: a symlink or anything but a regular file or folder is skipped with a ``UserWarning`` naming
it. Remote stores hold only objects. A file larger than ``MAX_META`` is refused before it is read.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterable

from ..errors import ConfigError
from ..storage import Storage

__all__ = ["MAX_META", "MetadataFileWarning", "read_metadata_files", "regular", "regular_path"]

#: Largest metadata file read whole (LeRobot's biggest, ``episodes_stats.jsonl`` of a dataset of
#: 100k episodes, is a few hundred MB).
MAX_META = 1 << 30


class MetadataFileWarning(UserWarning):
    """A metadata file that is a symlink or not a regular file: skipped."""


def regular(storage: Storage, rel: str) -> bool:
    """True if ``rel`` is a regular file reached through real folders only (always on remote
    storage); warns and returns False for a symlink, FIFO, device or socket on the way."""
    root = storage.local_path("")
    return True if root is None else regular_path(root, rel)


def regular_path(root: str | os.PathLike[str], rel: str) -> bool:
    """``regular`` for the local folder ``root``."""
    path = os.fspath(root)
    parts = rel.split("/")
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except OSError:
            return False
        last = i == len(parts) - 1
        if last and stat.S_ISDIR(st.st_mode):
            return False  # a folder is not a metadata file, nor anything to warn about
        if not (stat.S_ISREG(st.st_mode) if last else stat.S_ISDIR(st.st_mode)):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file" if last else "not a folder"
            warnings.warn(MetadataFileWarning(f"{path}: {kind}; a metadata file is read only as a regular file: "
                                              "skipped"), stacklevel=3)
            return False
    return True


def read_metadata_files(storage: Storage, names: Iterable[str]) -> dict[str, bytes]:
    """The regular files among ``names`` (relative to ``storage``) read whole, the rest skipped with
    a warning; one over ``MAX_META`` bytes is a ``ConfigError`` (checked before reading)."""
    out: dict[str, bytes] = {}
    for rel in names:
        if not regular(storage, rel):
            continue
        size = storage.stat(rel).size
        if size > MAX_META:
            raise ConfigError(f"a metadata file of {size} bytes (at most {MAX_META} read)", path=storage.url(rel))
        out[rel] = storage.read(rel)
    return out

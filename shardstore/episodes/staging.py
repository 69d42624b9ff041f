"""Write a folder beside its destination, then move it into place: how the episode writer and the
format exporters never leave half a dataset behind.

``StagedFolder(out, force=..., holds=...)`` refuses an ``out`` that already holds what ``holds``
recognises (unless ``force``) or anything else but an empty folder, and makes a hidden sibling
``.<name>.shardstore-tmp-<host>-<pid>-<random>``. ``commit()`` renames it to ``out`` (a replaced
dataset is renamed aside first and removed last, so ``out`` always holds a whole one); ``abort()``
removes it. A process killed outright leaves only the hidden sibling, which the next
``StagedFolder`` of the same ``out`` removes once its process is gone.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Callable

from ..errors import ConfigError, StorageError

__all__ = ["StagedFolder"]

_HOST = socket.gethostname().replace("-", "_")


class StagedFolder:
    """A staging folder for ``out``; see the module docstring. ``what`` names the content in
    messages (``a dataset``, ``a Minari dataset``)."""

    def __init__(
        self, out: str | os.PathLike[str], *, force: bool, holds: Callable[[str], bool], what: str = "a dataset"
    ) -> None:
        self.out = os.path.abspath(os.fspath(out))
        self.holds = holds
        if os.path.lexists(self.out):
            if not os.path.isdir(self.out):
                raise ConfigError("exists and is not a folder", path=self.out)
            if holds(self.out):
                if not force:
                    raise ConfigError(f"already holds {what}; pass force=True (--force) to replace it", path=self.out)
            elif os.listdir(self.out):
                raise ConfigError(f"is a folder that is not empty and holds no {what.split(' ', 1)[-1]}; choose another OUT", path=self.out)
        parent = os.path.dirname(self.out)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create the folder: {e.strerror}", path=parent) from e
        prefix = f".{os.path.basename(self.out)}.shardstore-tmp-"
        _remove_dead(parent, prefix)
        self.path = os.path.join(parent, f"{prefix}{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        try:
            os.mkdir(self.path)
        except OSError as e:  # a parent that cannot be written (/proc, /sys, read-only): one line
            raise StorageError(f"cannot write beside OUT here: {e.strerror}", path=self.out) from None

    def commit(self) -> None:
        """Move the finished folder to ``out``."""
        aside = None
        if os.path.isdir(self.out):
            if self.holds(self.out):
                aside = f"{self.path}-old"
                os.rename(self.out, aside)
            else:
                os.rmdir(self.out)  # empty: checked when staging began
        try:
            os.rename(self.path, self.out)
        except OSError as e:
            if aside is not None:
                os.rename(aside, self.out)
            raise StorageError(f"cannot move the staged folder into place: {e.strerror or e}", path=self.out) from e
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _remove_dead(parent: str, prefix: str) -> None:
    """Remove staging folders of the same ``out`` on this host whose process is gone."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        fields = name[len(prefix) :].split("-")
        if len(fields) < 3 or fields[0] != _HOST or not fields[1].isdigit():
            continue
        try:
            os.kill(int(fields[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:
            pass  # alive (another user's process) or unknowable: leave it


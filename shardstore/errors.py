"""Typed errors: every one names the file and, where known, the tar member and byte offset.

Each specific error also inherits the matching built-in exception so callers that only know
Python's own hierarchy (``KeyError``, ``FileNotFoundError``, ``ValueError``) still catch it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "ShardstoreError",
    "TarFormatError",
    "TruncatedTarError",
    "DuplicateKeyError",
    "EmptyShardError",
    "DatasetNotPreparedError",
    "IndexVersionError",
    "StaleIndexError",
    "IndexCorruptError",
    "SampleNotFoundError",
    "StorageError",
    "ConfigError",
    "MissingExtraError",
    "PickleNotAllowedError",
    "DecodeError",
    "PathEscapeError",
    "AuxNotFoundError",
    "MountError",
    "WorkerDiedError",
    "EpisodeFormatError",
    "LinkLoopWarning",
    "PrepareLockedError",
    "OutputLockedError",
    "LeRobotFormatError",
    "TFRecordFormatError",
    "place_message",
    "from_library",
    "library_errors",
    "UnsafePickleError",
]


def place_message(
    detail: str, path: str | None, member: str | None = None, offset: int | None = None, noun: str = "member"
) -> str:
    """``path, member 'm', offset N: detail``, leaving out what is None: how errors (and ``check``'s
    problems) name their place, so every message reads the same way. ``noun`` says what ``member``
    is when it is not a tar member (``option 'layout'``, ``key 'split_parts'``); ``""`` prints a
    place that describes itself as is (``episode 3, field 'action'``)."""
    where = []
    if path is not None:
        where.append(str(path))
    if member is not None:
        where.append(f"{noun} {member!r}" if noun else str(member))
    if offset is not None:
        where.append(f"offset {offset}")
    return f"{', '.join(where)}: {detail}" if where else detail


class ShardstoreError(Exception):
    """Root of every error shardstore raises on purpose.

    ``path`` names the file (shard, index, YAML), ``member`` the tar member or key, ``offset``
    the byte offset inside ``path``; ``detail`` says what was wrong. ``noun`` names what
    ``member`` is when it is not a tar member (``place_message``).
    """

    def __init__(
        self,
        detail: str,
        *,
        path: str | None = None,
        member: str | None = None,
        offset: int | None = None,
        noun: str = "member",
    ) -> None:
        self.detail = detail
        self.path = path
        self.member = member
        self.offset = offset
        self.noun = noun
        super().__init__(self._message())

    def _message(self) -> str:
        return place_message(self.detail, self.path, self.member, self.offset, self.noun)

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Keyword-only constructors don't survive pickling between worker processes otherwise.
        return (_rebuild, (type(self), self.detail, self.path, self.member, self.offset, self.noun))


def _rebuild(
    cls: type[ShardstoreError], detail: str, path: str | None, member: str | None, offset: int | None,
    noun: str = "member",
) -> ShardstoreError:
    err = cls.__new__(cls)
    ShardstoreError.__init__(err, detail, path=path, member=member, offset=offset, noun=noun)
    return err


class TarFormatError(ShardstoreError, ValueError):
    """A shard is not a tar file, or one of its headers is corrupt."""


class TruncatedTarError(TarFormatError):
    """A shard ends inside a header or inside a member's data."""


class EmptyShardError(ShardstoreError, ValueError):
    """A shard holds no sample (Energon refuses those too)."""


class DuplicateKeyError(ShardstoreError, ValueError):
    """A sample key occurs twice in a dataset; the message names both places."""


class DatasetNotPreparedError(ShardstoreError, FileNotFoundError):
    """The folder has no ``.nv-meta`` (or it lacks a file the operation needs)."""


class IndexVersionError(ShardstoreError, ValueError):
    """The index was written by a format version this shardstore does not read."""


class StaleIndexError(ShardstoreError, RuntimeError):
    """A shard changed (size, mtime or ETag) after the dataset was prepared: rerun prepare."""


class WorkerDiedError(ShardstoreError, RuntimeError):
    """A prepare scan worker process ended during the scan (killed by a signal, crashed, exited);
    names the shard it held, if any, and how it ended."""


class SampleNotFoundError(ShardstoreError, KeyError):
    """No sample (or member) with that key or position."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self._message()


class StorageError(ShardstoreError, OSError):
    """Reading or writing a file or object failed (after retries, for remote storage)."""


class ConfigError(ShardstoreError, ValueError):
    """A YAML or JSON configuration is invalid; ``member`` names the key."""


class MissingExtraError(ShardstoreError, ImportError):
    """An optional dependency is needed: the message names the extra to install."""


class PickleNotAllowedError(ShardstoreError, PermissionError):
    """A part would need pickle to decode; that runs code from the data, so it is opt-in."""


class DecodeError(ShardstoreError, ValueError):
    """A part's bytes do not decode as its extension says, or a field map does not fit a sample."""


class PathEscapeError(ShardstoreError, ValueError):
    """A file name would leave its store (``../x``, an absolute path): refused, never resolved."""


class AuxNotFoundError(ConfigError, KeyError):
    """A sample asked for an aux store its metadataset does not define; names the YAML and key."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self._message()


class MountError(ShardstoreError, OSError):
    """Mounting or unmounting failed (no FUSE, mount point busy, the mount process died)."""


class EpisodeFormatError(ShardstoreError, ValueError):
    """An episode does not fit the episode model or its format's rules; ``member`` names the episode
    and field (``episode 3, field 'actions'``), ``path`` the source file."""


class LinkLoopWarning(UserWarning):
    """A symlinked folder leads to a folder already listed (``ln -s .. parts/loop``): not followed
    again. The message names the link and where the folder was first listed."""


class PrepareLockedError(ShardstoreError, BlockingIOError):
    """Another prepare holds this dataset's lock (``.nv-meta.lock``); the message names its process."""


class OutputLockedError(ShardstoreError, BlockingIOError):
    """Another import or export is writing the same OUT (it holds ``.<OUT>.shardstore-lock``); the
    message names its process."""


class UnsafePickleError(PickleNotAllowedError):
    """A pickle (decoded with the opt-in) names a class or function outside numpy's arrays, scalars
    and dtypes and Python's builtin types; the message names it. Nothing it names was called."""
class LeRobotFormatError(EpisodeFormatError):
    """A LeRobot dataset breaks its format's rules (``shardstore check lerobot`` lists them all);
    the message names the episode, the camera and the file."""


class TFRecordFormatError(ShardstoreError, ValueError):
    """A TFRecord file is corrupt (a CRC mismatch, a truncated record) or a record is not a
    ``tf.train.Example``; ``member`` names the record (``record 3``) and, where known, the field."""
class IndexCorruptError(StaleIndexError):
    """An index file holds a value that cannot be right: a ``.tar.idx`` that is truncated or whose
    offsets decrease, a ``samples``/``sample_parts`` row whose range is negative or runs past the
    end of its shard, a ``tar_file_id`` with no shard. Names the index file or shard, the member or
    key and the offset; rerun prepare. (A ``StaleIndexError``: a changed shard and a damaged index
    look alike to a reader, and the cure is the same.)"""


#: What ``from_library`` keeps of a library's message (h5py's run over several lines and kilobytes).
_MAX_DETAIL = 400


def from_library(exc: BaseException, path: str | None = None, member: str | None = None) -> ShardstoreError:
    """A library's exception (pyarrow, h5py, PyAV, json, sqlite3, the OS, numpy) as the typed
    ``ShardstoreError`` that says the same, on one line: ``path`` and ``member`` where the caller
    knows them, else what the exception itself names (an ``OSError``'s file, a JSON or UTF-8
    error's offset). Raise it ``from exc``; a ``ShardstoreError`` comes back as it is."""
    if isinstance(exc, ShardstoreError):
        return exc
    name = type(exc).__name__
    text = " ".join(str(exc).split())
    if isinstance(exc, KeyError) and exc.args:
        text = f"no {exc.args[0]!r}"
    detail = (text if isinstance(exc, OSError | json.JSONDecodeError) and text else f"{name}: {text}" if text else name)
    if len(detail) > _MAX_DETAIL:
        detail = detail[:_MAX_DETAIL] + "..."
    if isinstance(exc, json.JSONDecodeError):
        return ConfigError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", path=path,
                           member=member, offset=exc.pos)
    if isinstance(exc, UnicodeDecodeError):
        return DecodeError(f"not {exc.encoding}: {exc.reason}", path=path, member=member, offset=exc.start)
    sqlite3 = sys.modules.get("sqlite3")  # (not imported here: only an error of a loaded module can come)
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        if getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
            return StorageError(f"cannot write (sqlite: {text}): No space left on device or an I/O error",
                                path=path, member=member)
        return IndexCorruptError(f"sqlite: {text}", path=path, member=member)
    if isinstance(exc, RecursionError):
        return DecodeError("nested too deeply to read (a cycle of links, or thousands of levels)", path=path, member=member)
    if isinstance(exc, MemoryError):
        return StorageError("out of memory (a size in the input is larger than this machine can hold)", path=path, member=member)
    if isinstance(exc, OSError):
        where = path if path is not None else exc.filename
        return StorageError(exc.strerror or detail, path=where, member=member)
    if isinstance(exc, KeyError | ValueError | TypeError | IndexError):
        return DecodeError(detail, path=path, member=member)
    return ShardstoreError(detail, path=path, member=member)


@contextmanager
def library_errors(path: str | None, member: str | None = None) -> Iterator[None]:
    """Around a library call on ``path``: its exceptions (but not ``ShardstoreError``, nor
    ``KeyboardInterrupt`` and exit) raised again as ``from_library`` makes them, with the original
    as ``__cause__``."""
    try:
        yield
    except ShardstoreError:
        raise
    except Exception as e:
        raise from_library(e, path, member) from e

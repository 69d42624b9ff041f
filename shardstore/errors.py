"""Typed errors: every one names the file and, where known, the tar member and byte offset.

Each specific error also inherits the matching built-in exception so callers that only know
Python's own hierarchy (``KeyError``, ``FileNotFoundError``, ``ValueError``) still catch it.
"""

from __future__ import annotations

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
    "LeRobotFormatError",
    "TFRecordFormatError",
    "place_message",
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

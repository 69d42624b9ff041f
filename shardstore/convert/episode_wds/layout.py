"""The episode-frame WebDataset layout of imitation-learning research data, read into episodes and
written back (``../shared/specs/il-representations-datasets.md`` describes it).

The layout: one folder per task, ``<root>/<demos|random>/<benchmark>/<task>/``, of shards ``*.tar``
or ``*.tar.zst`` written by webdataset's ``TarWriter``. Each shard starts with
``_metadata.meta.pickle`` (spaces and env config, pickled with classes of the research code), then
per step ``frame_NNN.<part>.pickle`` (parts ``acts, dones, frame, infos, next_obs, obs, rews``,
sorted; some may be missing). Trajectories are concatenated; one ends at a step whose ``dones`` is
true.

Into the episode model:

- every part is a ``media`` field with encoding ``pickle`` (``acts.pickle`` -> field ``acts``): its
  pickle bytes are kept exactly and never loaded; ``dones`` is read by ``safepickle.read_flag`` (a
  bool recognised with every global inert: nothing called, no opt-in) to cut episodes; a field a step
  lacks is ``b""`` there (a pickle is never empty) and stays missing on export;
- an episode never spans shards: one whose last step is not done (the shard ends first) is kept,
  ``terminal=False`` and ``metadata["truncated"] = True``, not merged into the next shard's;
- each episode's ``source`` (kept in the store's episode index) names its shard and the original
  key of every step;
- the metadata member goes to ``source_files`` (``<shard>/_metadata.meta.pickle``, bytes kept, the
  class names it refers to listed in the schema without loading it), never into the steps;
- data type, benchmark and task (from the folder names) are the dataset's ``subflavors``.

``.tar.zst`` is decompressed as a stream (no uncompressed copy); a stream that ends inside a zstd
frame is a ``TruncatedTarError``. ``write_episode_wds`` writes the shards back (metadata member
first, the parts of each step in field order, zstd where the source was), so the round trip gives
the same members with the same bytes. Episodes written by other code (array fields, no source)
are written as new shards: arrays pickled per step, ``dones`` from the episode ends.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, ClassVar

import numpy as np

from ... import safepickle
from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...episodes.names import safe_name
from ...episodes.staging import StagedFolder
from ...errors import (
    DecodeError,
    EpisodeFormatError,
    MissingExtraError,
    PathEscapeError,
    ShardstoreError,
    TarFormatError,
    TruncatedTarError,
)
from ...tarscan import REGULAR, iter_member_batches

__all__ = [
    "FORMAT",
    "META_MEMBER",
    "Task",
    "EpisodeWdsShard",
    "find_tasks",
    "read_episode_wds",
    "write_episode_wds",
]

FORMAT = "episode-wds"
META_MEMBER = "_metadata.meta.pickle"
DONES = "dones"
_SUFFIXES = (".tar.zst", ".tar")
_DATA_TYPES = ("demos", "random")
_CHUNK = 1 << 20
#: The walker's file size for a stream: its end is found by the end marker or a short read.
_UNBOUNDED = 1 << 62
#: Members walked (and so held in memory) at a time.
_WALK_BATCH = 64
#: Most bytes of a ``.tar.zst`` held at once (a batch of members, each read whole): a compressed
#: shard gives no real size to check a member's declared size against.
MAX_ZST_MEMBER = 1 << 29
_PLAIN_LIMIT = "the shard's size"
#: Where the names an export writes come from (the store's field tree and episode index).
SCHEMA_WHERE = ".nv-meta/schema.json"


# ----- where the shards are ------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """One task's shards: ``folder`` holds them (``shards`` relative to it, sorted), ``names`` is
    its path below the root (``("demos", "magical", "MoveToCorner")``), empty for a lone folder."""

    folder: Path
    shards: tuple[str, ...]
    names: tuple[str, ...] = ()

    @property
    def subflavors(self) -> dict[str, str]:
        """``data_type``, ``benchmark``, ``task`` from ``<demos|random>/<benchmark>/<task>``; a
        folder nested otherwise gives its path as ``task``."""
        if len(self.names) == 3:
            return dict(zip(("data_type", "benchmark", "task"), self.names, strict=True))
        return {"task": "/".join(self.names)} if self.names else {}


def _is_shard(p: Path) -> bool:
    return p.is_file() and p.name.endswith(_SUFFIXES)


def find_tasks(src: str | os.PathLike[str]) -> list[Task]:
    """The tasks of ``src``: a shard, a folder of shards, or a root of task folders.

    A lone shard or folder takes its names from its own path when that ends in
    ``<demos|random>/<benchmark>/<task>``. Raises ``EpisodeFormatError`` when nothing is found.
    """
    root = Path(src)
    if _is_shard(root):
        return [Task(root.parent, (root.name,), _names_of(root.parent))]
    if not root.is_dir():
        raise EpisodeFormatError("no such shard or folder", path=str(root))
    own = sorted(p.name for p in root.iterdir() if _is_shard(p))
    if own:
        return [Task(root, tuple(own), _names_of(root))]
    tasks = []
    for folder in sorted({p.parent for p in root.rglob("*") if _is_shard(p)}):
        shards = tuple(sorted(p.name for p in folder.iterdir() if _is_shard(p)))
        tasks.append(Task(folder, shards, folder.relative_to(root).parts))
    if not tasks:
        raise EpisodeFormatError("no .tar or .tar.zst shards here or below", path=str(root))
    return tasks


def _names_of(folder: Path) -> tuple[str, ...]:
    parts = folder.resolve().parts
    return tuple(parts[-3:]) if len(parts) >= 3 and parts[-3] in _DATA_TYPES else ()


# ----- reading a shard as a stream of members --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Member:
    name: str
    offset: int  # of its header, in the (uncompressed) tar
    data: bytes


class _ZstdReader(io.RawIOBase):
    """A zstd stream decompressed as it is read, frame after frame; raises ``TruncatedTarError`` if
    the input ends inside a frame (a stream reader would just stop)."""

    def __init__(self, raw: BinaryIO, path: str) -> None:
        try:
            import zstandard
        except ImportError as e:
            raise MissingExtraError(f"reading .tar.zst needs zstandard: pip install 'shardstore[convert]' ({e})") from e
        self._zstd = zstandard
        self._raw = raw
        self._path = path
        self._dec = zstandard.ZstdDecompressor().decompressobj()
        self._buf = b""
        self._consumed = 0
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            chunk = self._raw.read(_CHUNK)
            if not chunk:
                if self._in_frame:
                    raise TruncatedTarError(
                        "the zstd stream ends inside a frame (truncated .zst)", path=self._path, offset=self._consumed
                    )
                return 0
            self._buf = self._feed(chunk)
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def _feed(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            try:
                out.append(self._dec.decompress(chunk))
            except self._zstd.ZstdError as e:
                raise TarFormatError(f"not a valid zstd stream: {e}", path=self._path, offset=self._consumed) from e
            self._in_frame = not self._dec.eof
            used = len(chunk) - len(self._dec.unused_data) if self._dec.eof else len(chunk)
            self._consumed += used
            chunk = self._dec.unused_data if self._dec.eof else b""
            if self._dec.eof:
                self._dec = self._zstd.ZstdDecompressor().decompressobj()
        return b"".join(out)


class _Window:
    """A forward-only stream read at offsets, as ``tarscan``'s walker reads a file: keeps the bytes
    from ``start`` on (what the current batch of members spans) and reads more when asked.

    The walker asks only for bytes a whole tar has (headers up to the end marker, then data), so a
    stream that ends first is a cut shard: ``TruncatedTarError`` at the offset asked for.
    """

    def __init__(self, stream: IO[bytes], path: str, limit: int, limit_what: str) -> None:
        self._stream = stream
        self._path = path
        self._buf = bytearray()
        self.start = 0
        self._limit, self._limit_what = limit, limit_what
        self._header: tuple[int, bytes] = (0, b"")

    def read_at(self, offset: int, size: int) -> bytes:
        want = offset + size - self.start
        if want > self._limit:  # checked before reading: a declared size is a size to hold
            at, header = self._header
            size_field = header[124:136].rstrip(bytes(1)).decode("ascii", "replace").strip() or "?"
            plain = self._limit_what == _PLAIN_LIMIT  # the real end of the file: a cut shard
            raise (TruncatedTarError if plain else TarFormatError)(
                f"{'the shard ends inside a tar header or member, or before its end marker (truncated): ' if plain else ''}"
                f"the member declares {size_field} (octal) bytes; the walk would hold {want} bytes, more than "
                f"{self._limit_what} ({self._limit})",
                path=self._path, member=header[:100].split(bytes(1), 1)[0].decode("utf-8", "replace"), offset=at,
            )
        while len(self._buf) < want:
            chunk = self._stream.read(max(_CHUNK, want - len(self._buf)))
            if not chunk:
                raise TruncatedTarError(
                    "the shard ends inside a tar header or member, or before its end marker (truncated)",
                    path=self._path, offset=offset,
                )
            self._buf += chunk
        lo = offset - self.start
        data = bytes(self._buf[lo : lo + size])
        if size == 512:
            self._header = (offset, data)
        return data

    def release(self, offset: int) -> None:
        """Forget the bytes before ``offset``: nothing before it will be asked for again."""
        del self._buf[: offset - self.start]
        self.start = offset


def _members(path: Path) -> Iterator[_Member]:
    """The regular members of a shard in order, streamed (``.tar.zst`` decompressed on the way)
    through ``tarscan``'s header walker, a few members at a time.

    Raises ``TarFormatError`` for a corrupt header, ``TruncatedTarError`` when the data ends inside
    a header or member, inside a zstd frame, or before the tar's end marker (a zero block), so a
    cut shard never reads as a shorter one.
    """
    where = str(path)
    with open(path, "rb") as raw:
        zst = _ZstdReader(raw, where) if path.name.endswith(".zst") else None
        stream: IO[bytes] = io.BufferedReader(zst, _CHUNK) if zst is not None else raw
        # every member is held in memory whole: the window refuses to hold more than the shard's
        # size (plain) or MAX_ZST_MEMBER (compressed), before reading
        window = _Window(stream, where, *((MAX_ZST_MEMBER, "the limit of a .tar.zst walk") if zst else
                                          (os.fstat(raw.fileno()).st_size, _PLAIN_LIMIT)))
        for batch in iter_member_batches(window.read_at, _UNBOUNDED, where, _WALK_BATCH):
            for m in batch.members():
                if m.kind != REGULAR:
                    continue
                try:
                    data = window.read_at(m.data_offset, m.size)
                except TruncatedTarError:
                    raise TruncatedTarError("the shard ends inside this member", path=where, member=m.name,
                                            offset=m.header_offset) from None
                yield _Member(m.name, m.header_offset, data)
            window.release(batch.end)
        while zst is not None and stream.read(_CHUNK):  # the rest of the stream: a cut tail must still be seen
            pass


# ----- members -> steps -> episodes ------------------------------------------------------------------
@dataclass(slots=True)
class _Step:
    key: str
    offset: int
    parts: dict[str, _Member]


def _steps(path: Path) -> tuple[bytes, Iterator[_Step]]:
    """The metadata member's bytes and the shard's steps (members grouped by key, in order).

    Raises ``EpisodeFormatError`` when the first member is not the metadata.
    """
    members = _members(path)
    first = next(members, None)
    if first is None:
        raise EpisodeFormatError("the shard holds no member", path=str(path))
    if first.name != META_MEMBER:
        raise EpisodeFormatError(
            f"the first member must be {META_MEMBER} (this layout's metadata)", path=str(path), member=first.name,
            offset=first.offset,
        )

    def grouped() -> Iterator[_Step]:
        step: _Step | None = None
        for m in members:
            key, dot, part = m.name.partition(".")
            if not dot or "/" in m.name:
                raise EpisodeFormatError("not a step member (<key>.<part>)", path=str(path), member=m.name, offset=m.offset)
            if step is None or key != step.key:
                if step is not None:
                    yield step
                step = _Step(key, m.offset, {})
            step.parts[part] = m
        if step is not None:
            yield step

    return first.data, grouped()


def _field_name(part: str) -> tuple[str, str]:
    """``acts.pickle`` -> (``acts``, ``pickle``): the field and its encoding."""
    name, dot, encoding = part.rpartition(".")
    return (name, encoding) if dot and name else (part, "")


def _is_done(step: _Step, path: Path) -> bool:
    part = next((p for p in step.parts if _field_name(p)[0] == DONES), None)
    if part is None:
        raise EpisodeFormatError(f"the step has no {DONES} part", path=str(path), member=step.key, offset=step.offset)
    m = step.parts[part]
    try:
        return safepickle.read_flag(m.data)  # read, not unpickled: no opt-in needed
    except ShardstoreError as e:
        raise type(e)(f"{DONES}: {e.detail}", path=str(path), member=m.name, offset=m.offset) from e


def _unpickle(m: _Member, path: Path) -> Any:
    try:
        return safepickle.loads(m.data)
    except ShardstoreError as e:
        raise type(e)(e.detail, path=str(path), member=m.name, offset=m.offset) from None


@dataclass(frozen=True, slots=True)
class _ShardHead:
    """What the start of a shard says: its metadata bytes and the parts of its first step."""

    name: str
    metadata: bytes
    parts: tuple[str, ...]
    first: _Step | None


def _head(task: Task, name: str) -> _ShardHead:
    meta, steps = _steps(task.folder / name)
    first = next(steps, None)
    return _ShardHead(name, meta, tuple(first.parts) if first else (), first)


def read_episode_wds(src: str | os.PathLike[str], *, allow_pickle: bool = False) -> EpisodeStream:
    """Episodes of one task: ``src`` is a shard or a folder of shards (a root of several tasks:
    ``find_tasks``, then ``read_task`` per task).

    ``allow_pickle``: also unpickle every part through the restricted unpickler, to check it loads
    and to record the dtype and shape of array parts in the field tree (a refused class is an
    ``UnsafePickleError`` naming shard, member and offset). Without it only ``dones`` is unpickled.
    """
    tasks = find_tasks(src)
    if len(tasks) != 1:
        raise EpisodeFormatError(
            f"{len(tasks)} task folders here: import them one by one or as a root", path=str(src)
        )
    return read_task(tasks[0], allow_pickle=allow_pickle)


def read_task(task: Task, *, allow_pickle: bool = False) -> EpisodeStream:
    """Episodes of one ``Task`` (see ``read_episode_wds``); shards are read twice: their start for
    the field tree here, all of them lazily when the episodes are iterated."""
    heads = [_head(task, name) for name in task.shards]
    parts: dict[str, None] = {}
    for h in heads:
        parts.update(dict.fromkeys(h.parts))
    fields = []
    for part in parts:
        name, encoding = _field_name(part)
        dtype, shape = "", ()
        sample = next((h.first.parts[part] for h in heads if h.first and part in h.first.parts), None)
        if allow_pickle and sample is not None:
            value = _unpickle(sample, task.folder / next(h.name for h in heads if h.first and part in h.first.parts))
            if isinstance(value, np.ndarray | np.generic):
                dtype, shape = np.asarray(value).dtype.str, tuple(np.shape(value))
        fields.append(FieldSpec(name, "media", dtype=dtype, shape=shape, encoding=encoding, attrs={"part": part}))
    schema = Schema(
        tuple(fields),
        source_format=FORMAT,
        attrs={
            "subflavors": task.subflavors,
            "shards": [
                {
                    "name": h.name,
                    "compression": "zstd" if h.name.endswith(".zst") else "",
                    "metadata": _meta_path(h.name),
                    "metadata_classes": _classes(h.metadata, task.folder / h.name),
                }
                for h in heads
            ],
        },
    )
    files = {_meta_path(h.name): h.metadata for h in heads}
    shards = [EpisodeWdsShard(os.path.abspath(task.folder), name, schema, allow_pickle) for name in task.shards]
    return EpisodeStream(schema, _episodes(task, schema, allow_pickle), None, files, parts=shards)


def _meta_path(shard: str) -> str:
    return f"{shard}/{META_MEMBER}"


def _classes(metadata: bytes, path: Path) -> list[str]:
    try:
        return safepickle.foreign_globals(metadata)
    except DecodeError as e:
        raise DecodeError(e.detail, path=str(path), member=META_MEMBER) from None


def _episodes(task: Task, schema: Schema, allow_pickle: bool) -> Iterator[Episode]:
    index = 0
    for name in task.shards:
        for episode in _shard_episodes(task.folder, name, schema, allow_pickle, index):
            yield episode
            index += 1


def _shard_episodes(folder: Path, name: str, schema: Schema, allow_pickle: bool, index: int) -> Iterator[Episode]:
    """The episodes of one shard, numbered from ``index``."""
    path = folder / name
    _, steps = _steps(path)
    pending: list[_Step] = []
    for step in steps:
        for part, m in step.parts.items():
            if _field_name(part)[0] not in schema.names:
                raise EpisodeFormatError(
                    "a part no shard's first step has (the field tree is read from those)",
                    path=str(path), member=m.name, offset=m.offset,
                )
            if allow_pickle:
                _unpickle(m, path)
        pending.append(step)
        if _is_done(step, path):
            yield _episode(index, schema, name, pending, terminal=True)
            index += 1
            pending = []
    if pending:  # the shard ended inside a trajectory: kept, flagged, never merged with the next
        yield _episode(index, schema, name, pending, terminal=False)


@dataclass(frozen=True)
class EpisodeWdsShard:
    """One shard of a task as a part of the stream (``episodes.parts``): a worker reads and checks
    it (unpickling its parts with ``allow_pickle``); its episodes come numbered from 0 and the
    writer numbers them after the shards before (how many episodes a shard holds is known only once
    read), as the local reader's running count does."""

    folder: str
    name: str
    schema: Schema
    allow_pickle: bool
    numbered: ClassVar[bool] = False

    def __call__(self) -> Iterator[Episode]:
        return _shard_episodes(Path(self.folder), self.name, self.schema, self.allow_pickle, 0)


def _episode(index: int, schema: Schema, shard: str, steps: list[_Step], terminal: bool) -> Episode:
    values: dict[str, list[bytes]] = {}
    for f in schema.fields:
        part = str(f.attrs["part"])
        values[f.name] = [s.parts[part].data if part in s.parts else b"" for s in steps]
    metadata: dict[str, Any] = {} if terminal else {"truncated": True}
    source = {"shard": shard, "keys": [s.key for s in steps]}
    return Episode(index, dict(values), metadata, terminal=terminal, source=source)


# ----- writing the layout ----------------------------------------------------------------------------
def write_episode_wds(
    stream: EpisodeStream, out: str | os.PathLike[str], *, compress: bool | None = None, force: bool = False
) -> list[str]:
    """Write ``stream`` as the layout into the folder ``out``; return the shard names.

    Episodes imported from the layout go back into their shards under their keys (metadata member
    from ``source_files``, zstd where the source was; ``compress`` overrides). Others go into new
    shards ``shard-000000.tar[.zst]``: array fields pickled per step, ``dones`` from the episode
    ends when there is no such field, the metadata a pickled dict of the dataset's subflavors.
    Written in a staging folder beside ``out`` and moved into place (``StagedFolder``): ``out`` must
    be new or empty, or hold such shards and ``force`` be given.
    """
    with StagedFolder(out, force=force, holds=_holds_shards, what="a folder of shards") as staged:
        names = _write_shards(stream, Path(staged.path), compress)
        staged.commit()
    return names


def _holds_shards(folder: str) -> bool:
    return any(_is_shard(p) for p in Path(folder).iterdir())


def _write_shards(stream: EpisodeStream, stage: Path, compress: bool | None) -> list[str]:
    schema = stream.schema
    shards = {str(s["name"]): s for s in schema.attrs.get("shards", ())} if schema.source_format == FORMAT else {}
    writer: _ShardWriter | None = None
    current: str | None = None
    names: list[str] = []
    try:
        for episode in stream.episodes:
            source = episode.source
            src = str(source["shard"]) if source.get("shard") in shards else None
            if writer is None or (src is not None and src != current):
                if writer is not None:
                    writer.close()
                if src is None:
                    name = f"shard-{len(names):06d}.tar" + (".zst" if compress else "")
                else:
                    name = src if compress is None else src.removesuffix(".zst") + (".zst" if compress else "")
                    safe_name(name, SCHEMA_WHERE, "shard name")  # a name from the dataset's own files
                    if name in names:  # its episodes are not together in the stream: refuse, never overwrite
                        raise EpisodeFormatError(
                            f"episodes of source shard {src!r} are not contiguous", member=f"episode {episode.index}", noun=""
                        )
                writer = _ShardWriter(stage / name, _metadata_for(stream, shards.get(src or "")))
                current = src
                names.append(name)
            keys = source.get("keys") if src is not None else None
            writer.write_episode(schema, episode, keys)
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    return names


def _metadata_for(stream: EpisodeStream, shard: Mapping[str, Any] | None) -> bytes:
    if shard is not None and shard.get("metadata") in stream.source_files:
        return bytes(stream.source_files[str(shard["metadata"])])
    return pickle.dumps(dict(stream.schema.attrs.get("subflavors") or {}), protocol=4)


class _ShardWriter:
    """One shard being written: metadata member first, then steps; zstd-compressed when its name
    ends in ``.zst``. Members as webdataset's ``TarWriter`` writes them (mode 0444)."""

    def __init__(self, path: Path, metadata: bytes) -> None:
        self.name = path.name
        self._raw = open(path, "wb")
        self._zstd: Any = None
        fileobj: Any = self._raw
        if path.name.endswith(".zst"):
            try:
                import zstandard
            except ImportError as e:
                raise MissingExtraError(f"writing .tar.zst needs zstandard: pip install 'shardstore[convert]' ({e})") from e
            self._zstd = zstandard.ZstdCompressor(level=3).stream_writer(self._raw, closefd=False)
            fileobj = self._zstd
        self._tar = tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT)
        self._frame = 0
        self._parts: set[str] = set()  # part names checked (each once: they repeat every step)
        self._add(META_MEMBER, metadata)

    def _add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o444
        self._tar.addfile(info, io.BytesIO(data))

    def write_episode(self, schema: Schema, episode: Episode, keys: Any) -> None:
        """The steps of ``episode`` under their source ``keys``, or ``frame_NNN`` counted per shard."""
        n = episode.length(schema)
        if not isinstance(keys, list) or len(keys) != n:
            keys = None
        for t in range(n):
            key = keys[t] if keys is not None else f"frame_{self._frame:03d}"
            self._frame += 1
            if keys is not None and "." in safe_name(key, f"episode {episode.index}", "step key"):
                raise PathEscapeError("a step key holds no dot (the part starts at the first one): refused",
                                      path=f"episode {episode.index}", member=repr(key))
            for part, data in _step_parts(schema, episode, t, n):
                if part not in self._parts:
                    self._parts.add(safe_name(part, SCHEMA_WHERE, "part name"))
                self._add(f"{key}.{part}", data)

    def close(self) -> None:
        self._tar.close()
        if self._zstd is not None:
            self._zstd.close()  # ends the zstd frame (the raw file stays open: closefd=False)
        self._raw.close()

    def discard(self) -> None:
        """Close the file after a failure without writing what the tar and zstd streams buffer (on
        a full disk that fails again, and tarfile would try once more when collected)."""
        tar: Any = self._tar  # (tarfile's attributes below are not in its stubs)
        tar.closed = True
        tar.fileobj.closed = True  # its _Stream: no flush at __del__
        self._raw.close()


def _step_parts(schema: Schema, episode: Episode, t: int, n: int) -> Iterable[tuple[str, bytes]]:
    """The members of step ``t``, sorted by part name as ``TarWriter`` writes them."""
    out: list[tuple[str, bytes]] = []
    for f in schema.fields:
        values = episode.steps[f.name]
        if f.kind == "media" and f.encoding == "pickle":
            data = bytes(values[t])  # type: ignore[arg-type]  # a media field: bytes per step
            if data:  # b"": the source step had no such part
                out.append((str(f.attrs.get("part", f"{f.name}.pickle")), data))
        elif f.kind in ("array", "media", "text"):
            value = values[t]
            out.append((f"{f.name}.pickle", pickle.dumps(value, protocol=4)))
        else:
            raise EpisodeFormatError(f"a {f.kind} field has no place in this layout", member=f"episode {episode.index}, field {f.name!r}", noun="")
    if DONES not in schema.names:
        out.append((f"{DONES}.pickle", pickle.dumps(np.bool_(t == n - 1), protocol=4)))
    return sorted(out)

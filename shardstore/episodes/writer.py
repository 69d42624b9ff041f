"""``EpisodeWriter``: episodes into a prepared shardstore dataset.

Every import goes through it (``EpisodeWriter(out).write_stream(read_minari(src))``), and user code
records rollouts with it. The shards, the episode index, ``schema.json`` and the source's files are
written into a staging folder beside OUT, prepared there, and only then swapped into place
(``staging.StagedFolder``): an interrupted writer (an exception, Ctrl-C, SIGTERM through the CLI)
removes its staging folder, one killed outright leaves a hidden
``.<OUT>.shardstore-tmp-<host>-<pid>-<random>`` folder that the next writer of the same OUT (or
``shardstore check OUT``) removes. OUT is at every instant the old dataset or the new one.

Shards are written by ``tarwriter.TarWriter`` (plain ustar headers; webdataset's writer, through
Python's tarfile, was 79% of an import's time). An episode never spans two shards, so it
is one contiguous byte range that the view reads at once. Episodes go to the shards of their split
(``{split}-{n:06d}.tar``): ``Episode.split`` when set, else ``split_ratio`` by episodes; prepare
writes ``split.yaml`` from the shard names. The layout is in ``layout.py``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, replace
from types import TracebackType
from typing import Any

import numpy as np

from .. import nvmeta
from ..errors import ConfigError, EpisodeFormatError, ShardstoreError, from_library
from ..storage import is_remote_url
from . import layout
from .encode import EncodedEpisode, encode_episode
from .index import EPISODES_SQLITE, SCHEMA_JSON, SOURCE_DIR, EpisodeIndexWriter
from .model import Episode, EpisodeStream, FieldSpec, Rows, Schema, StepValues
from .names import safe_relpath
from .parts import encoded_parts
from .staging import StagedFolder
from .tarwriter import TarWriter

__all__ = ["EpisodeWriter", "WriteReport", "infer_schema", "DEFAULT_SHARD_SIZE"]

#: Shards are closed (at an episode boundary) once they reach this many bytes.
DEFAULT_SHARD_SIZE = 256 * 1024 * 1024
_SPLIT_RE = re.compile(r"^[A-Za-z0-9_]+$")


@dataclass
class WriteReport:
    """What a writer wrote: counts, bytes of the shards, seconds, and episodes per split."""

    path: str
    episodes: int
    steps: int
    samples: int
    shards: int
    bytes: int
    seconds: float
    splits: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def infer_schema(episode: Episode) -> Schema:
    """A schema for episodes like ``episode``: numpy arrays become array fields (per-step shape =
    the array's shape without its first axis), lists of strings text fields, lists of PNG or JPEG
    bytes media fields. Fields with one row more than the others get ``rows="steps+1"``."""
    lengths = {name: len(v) for name, v in episode.steps.items()}
    n = min(lengths.values(), default=0)
    fields = []
    for name, values in episode.steps.items():
        rows: Rows = "steps+1" if lengths[name] == n + 1 and len(set(lengths.values())) > 1 else "steps"
        where = f"episode {episode.index}, field {name!r}"
        if isinstance(values, np.ndarray):
            fields.append(FieldSpec(name, "array", values.dtype.str, tuple(values.shape[1:]), rows=rows))
        elif values and all(isinstance(v, str) for v in values):
            fields.append(FieldSpec(name, "text", rows=rows))
        elif values and all(isinstance(v, bytes | bytearray | memoryview) for v in values):
            head = bytes(values[0][:8])  # type: ignore[arg-type]
            encoding = "png" if head.startswith(b"\x89PNG") else "jpeg" if head.startswith(b"\xff\xd8") else ""
            if not encoding:
                raise EpisodeFormatError("media of unknown encoding: pass a schema", member=where, noun="")
            fields.append(FieldSpec(name, "media", "|u1", encoding=encoding, rows=rows))
        else:
            raise EpisodeFormatError(f"cannot infer a field from {type(values).__name__}: pass a schema", member=where, noun="")
    return Schema(tuple(fields))


class _Splitter:
    """Assigns episodes without a split of their own to splits in proportion to a ratio, as they
    come: each goes to the split furthest below its share so far, so every prefix of the stream is
    split as evenly as whole episodes allow (no count needed up front)."""

    def __init__(self, ratio: Sequence[tuple[str, float]]) -> None:
        total = sum(w for _, w in ratio)
        self.shares = [(name, w / total) for name, w in ratio if w > 0]
        self.counts = dict.fromkeys((name for name, _ in self.shares), 0)
        self.seen = 0

    def next(self) -> str:
        self.seen += 1
        name = max(self.shares, key=lambda s: self.seen * s[1] - self.counts[s[0]])[0]
        self.counts[name] += 1
        return name


class _Shards:
    """The open shard of one split, rotated at episode boundaries once past ``shard_size``."""

    def __init__(self, root: str, split: str, shard_size: int, mtime: int) -> None:
        self.root, self.split, self.shard_size, self.mtime = root, split, shard_size, mtime
        self.number = -1
        self.tar: TarWriter | None = None
        self.name = ""
        self.samples = 0
        self.names: list[str] = []

    def open_for_episode(self) -> None:
        if self.tar is not None and self.tar.offset < self.shard_size:
            return
        self.close()
        self.number += 1
        self.name = f"{self.split}-{self.number:06d}.tar"
        self.tar = TarWriter(open(os.path.join(self.root, self.name), "wb"), self.mtime)  # noqa: SIM115
        self.names.append(self.name)
        self.samples = 0

    def write(self, members: bytes, samples: int) -> None:
        """An episode's samples, encoded (``encode.encode_episode``)."""
        assert self.tar is not None, "open_for_episode() first"
        self.tar.write_members(members)
        self.samples += samples

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()  # closes the file too
            self.tar = None


class EpisodeWriter:
    """Write episodes into a new prepared shardstore dataset at ``out`` (a local folder).

    ``granularity``: ``"columns"`` (the default, layout 2: one sample per episode, its small fields
    the records of one ``steps.npy``, media and text packed in ``blobs.bin``; ``columns.py``), or
    layout 1's ``"step"`` (every field of every step a tar member of its own) or ``"episode"`` (one
    sample per episode, a member per array field and per media or text row).
    ``shard_size``: bytes after which a shard is closed (at an episode boundary). ``split_ratio``:
    ``"8,1,1"`` or ``[("train", 8), ...]`` for episodes whose ``split`` is None (default: all
    train). ``schema``: the field tree (default: inferred from the first episode, see
    ``infer_schema``). ``source_files``: relative path -> bytes, kept under ``.nv-meta/source/``.
    ``subflavors``: Energon's ``subflavors`` of ``dataset.yaml`` (given to every sample).
    ``force``: replace a dataset already at ``out``. ``progress``: a progress bar by steps. The
    members' mtime is the writer's start, or ``$SOURCE_DATE_EPOCH`` when set (the same bytes
    from the same episodes, e.g. to compare an import on a cluster with a local one).

    Use as a context manager (or call ``close()``): on a clean exit the dataset is prepared and
    moved into place and ``report`` says what was written; on an exception nothing is left (an
    ``OSError`` of writing, a full disk, comes out as the ``StorageError`` naming ``out``).
    Raises ``ConfigError`` for a taken ``out`` or bad options, ``EpisodeFormatError`` for an episode
    that does not fit the schema (naming episode and field).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        granularity: str = layout.DEFAULT_GRANULARITY,
        shard_size: int = DEFAULT_SHARD_SIZE,
        split_ratio: str | Sequence[tuple[str, float]] | None = None,
        schema: Schema | None = None,
        source_files: Mapping[str, bytes] | None = None,
        force: bool = False,
        progress: bool = False,
        total_steps: int | None = None,
        num_workers: int | None = None,
        subflavors: Mapping[str, str] | None = None,
    ) -> None:
        from ..prepare import parse_split_ratio

        self.out = os.fspath(out)
        if is_remote_url(self.out):
            raise ConfigError("EpisodeWriter writes a local folder; upload it afterwards", path=self.out)
        if granularity not in layout.GRANULARITIES:
            raise ConfigError(f"granularity must be one of {', '.join(layout.GRANULARITIES)}, not {granularity!r}",
                              member="granularity", noun="argument")
        if shard_size <= 0:
            raise ConfigError(f"shard_size must be positive, not {shard_size}", member="shard_size", noun="argument")
        self.granularity = granularity
        self.shard_size = shard_size
        ratio = parse_split_ratio(split_ratio) if isinstance(split_ratio, str) else split_ratio
        self._splitter = _Splitter(ratio or [("train", 1.0)])
        self._declared = ["train", *[name for name, _ in ratio or [] if name != "train"]]
        self.schema = schema
        self._source_files = dict(source_files or {})
        self._subflavors = dict(subflavors or {})
        self.num_workers = num_workers
        self.report: WriteReport | None = None
        self._t0 = time.perf_counter()
        self._mtime = _members_mtime()
        self._shards: dict[str, _Shards] = {}
        self._numbers: set[int] = set()
        self._split_counts: Counter[str] = Counter()
        self._next_number = 0
        self._steps = self._samples = 0
        self._closed = False
        self._progress = _progress_bar(progress, total_steps)
        self._staged = StagedFolder(self.out, force=force, holds=_is_dataset)
        self.out = self._staged.out
        self.staging = self._staged.path
        os.makedirs(os.path.join(self.staging, nvmeta.META_DIR))
        self._index = EpisodeIndexWriter(os.path.join(self.staging, nvmeta.META_DIR, EPISODES_SQLITE), granularity)

    # ----- writing --------------------------------------------------------------------------------
    def write(self, episode: Episode) -> int:
        """Write one episode; return its step count. Its number (``episode.index``) names its keys
        and must be unique in the dataset."""
        if self._closed:
            raise ConfigError("the writer is closed", path=self.out)
        if self.schema is None:
            self.schema = infer_schema(episode)
        return self._append(self._encode(episode))

    def write_encoded(self, episode: EncodedEpisode) -> int:
        """Write an episode already encoded (``encode.encode_episode``, or the samples of an episode
        of another dataset copied as they are, with its index row); return its step count."""
        if self._closed:
            raise ConfigError("the writer is closed", path=self.out)
        return self._append(episode)

    def _encode(self, episode: Episode) -> EncodedEpisode:
        assert self.schema is not None
        return encode_episode(episode, self.schema, self.granularity, self._mtime)

    def _append(self, episode: EncodedEpisode) -> int:
        """An encoded episode into the open shard of its split, and its row into the index."""
        row = episode.row
        where = f"episode {row.number}"
        if row.number in self._numbers:
            raise EpisodeFormatError("episode number written twice", member=where, noun="")
        split = episode.split if episode.split is not None else self._splitter.next()
        if not _SPLIT_RE.match(split):
            raise EpisodeFormatError(f"split name {split!r} must be letters, digits and '_'", member=where, noun="")
        shards = self._shards.get(split)
        if shards is None:
            shards = self._shards[split] = _Shards(self.staging, split, self.shard_size, self._mtime)
        shards.open_for_episode()
        first = shards.samples
        shards.write(episode.members, row.samples)
        self._numbers.add(row.number)
        self._split_counts[split] += 1
        self._next_number = max(self._next_number, row.number + 1)
        self._index.add(replace(row, shard=shards.name, first_index=first))
        if episode.blob_starts:
            self._index.add_blob_starts(row.number, episode.blob_starts)
        self._steps += row.steps
        self._samples += row.samples
        if self._progress is not None:
            self._progress.update(row.steps)
        return row.steps

    def write_steps(
        self,
        steps: dict[str, StepValues],
        *,
        metadata: dict[str, Any] | None = None,
        terminal: bool = False,
        split: str | None = None,
    ) -> int:
        """Write a recorded rollout as the next episode (number: one past the highest so far);
        return its number."""
        number = self._next_number
        self.write(Episode(number, steps, metadata or {}, terminal, split))
        return number

    def write_episodes(self, stream: EpisodeStream, executor: Executor | None = None) -> None:
        """Write every episode of ``stream`` (the writer stays open). With ``executor``, the stream's
        parts are read and encoded on its workers (``parts``) and only appended here, in order: the
        same bytes as without. A stream without parts cannot be spread (``ConfigError``)."""
        if executor is None:
            for episode in stream.episodes:
                self.write(episode)
            return
        if stream.parts is None:
            raise ConfigError("this stream cannot be spread over an executor (its reader gives no parts)", path=self.out)
        if self.schema is None:
            self.schema = stream.schema
        for encoded in encoded_parts(executor, stream.parts, self.schema, self.granularity, self._mtime, self._encode):
            self._append(encoded)

    def write_stream(self, stream: EpisodeStream, executor: Executor | None = None) -> WriteReport:
        """Write every episode of a format reader's stream (on ``executor``'s workers: see
        ``write_episodes``), keep its source files, and close."""
        if self.schema is None:
            self.schema = stream.schema
        self._source_files.update(stream.source_files)
        if self._progress is not None and stream.total_steps is not None:
            self._progress.total = stream.total_steps
        with self:
            self.write_episodes(stream, executor)
        assert self.report is not None
        return self.report

    # ----- finishing ------------------------------------------------------------------------------
    def close(self) -> WriteReport:
        """Close the shards, write the index and metadata, prepare, and move the dataset into place."""
        if self._closed:
            if self.report is None:
                raise ConfigError("the writer was aborted", path=self.out)
            return self.report
        self._closed = True
        try:
            self.report = self._finish()
        except BaseException as e:
            self._cleanup()
            if isinstance(e, OSError | sqlite3.Error) and not isinstance(e, ShardstoreError):  # a full disk
                raise from_library(e, self.out) from e
            raise
        return self.report

    def abort(self) -> None:
        """Throw away everything written; ``out`` is left as it was."""
        self._closed = True
        self._cleanup()

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
            return
        self.abort()
        if isinstance(ev, OSError | sqlite3.Error) and not isinstance(ev, ShardstoreError):  # a full disk
            raise from_library(ev, self.out) from ev

    def _cleanup(self) -> None:
        if self._progress is not None:
            self._progress.close()
        for shards in self._shards.values():
            try:
                shards.close()
            except OSError:
                pass
        self._index.close()
        self._staged.abort()

    def _finish(self) -> WriteReport:
        from ..prepare import prepare

        if self._progress is not None:
            self._progress.close()
        if not self._numbers or self.schema is None:
            raise EpisodeFormatError("no episodes were written", path=self.out)
        for shards in self._shards.values():
            shards.close()
        meta = os.path.join(self.staging, nvmeta.META_DIR)
        for rel, data in self._source_files.items():
            path = os.path.join(meta, SOURCE_DIR, safe_relpath(rel))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        self._index.add_source_files(self._source_files)
        self._index.finish()
        with open(os.path.join(meta, SCHEMA_JSON), "w") as f:
            f.write(self.schema.to_json(layout.layout_info(self.granularity)))
        splits = [*self._declared, *[s for s in self._shards if s not in self._declared]]
        prepare(
            self.staging,
            split_parts=[f"{s}:{re.escape(s)}-[0-9]+[.]tar$" for s in splits],
            sample_type="CrudeWebdataset",
            num_workers=self.num_workers,
        )
        if self._subflavors:
            _set_subflavors(os.path.join(meta, nvmeta.DATASET_YAML), self._subflavors)
        shard_names = [name for s in self._shards.values() for name in s.names]
        size = sum(os.path.getsize(os.path.join(self.staging, name)) for name in shard_names)
        self._staged.commit()
        return WriteReport(
            path=self.out,
            episodes=len(self._numbers),
            steps=self._steps,
            samples=self._samples,
            shards=len(shard_names),
            bytes=size,
            seconds=round(time.perf_counter() - self._t0, 3),
            splits=dict(self._split_counts),
        )


def _progress_bar(show: bool, total: int | None) -> Any:
    if not show:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="Writing episodes", file=sys.stderr, unit_scale=True)


def _members_mtime() -> int:
    """The tar members' mtime: now, or ``$SOURCE_DATE_EPOCH`` (the reproducible-builds convention)
    for imports that give the same bytes when run again."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return int(time.time())
    if not value.isdigit():
        raise ConfigError(f"must be a whole number of seconds, not {value!r}", member="SOURCE_DATE_EPOCH", noun="environment variable")
    return int(value)


def _set_subflavors(dataset_yaml: str, subflavors: Mapping[str, str]) -> None:
    """Add ``subflavors`` (Energon's constructor argument) to a staged ``dataset.yaml``."""
    import yaml

    with open(dataset_yaml, "rb") as f:
        doc = yaml.safe_load(f) or {}
    doc["subflavors"] = dict(subflavors)
    with open(dataset_yaml, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)


def _is_dataset(path: str) -> bool:
    return os.path.isdir(os.path.join(path, nvmeta.META_DIR))

"""JSONL datasets: one JSON object per line, indexed by ``<file>.jsonl.idx`` as in Energon 7.4.

The index is ``count + 1`` unsigned 64-bit offsets in the machine's byte order (Energon writes
``struct.pack("Q")``; little-endian on every machine it runs on): where each line's range starts,
then the file size. A range runs to the next one's start, so it holds the line's newline and the
blank lines after it; blank lines before the first object belong to the first range (Energon's
rule, kept so both tools write the same bytes). A sample's key is its index as a string, its one
part is ``json``; ``get("7")`` and ``read_file("7.json")`` find it, as Energon's JSONL file store does.

``JsonlDataset`` offers what ``Dataset`` offers for reading (``len``, ``[i]``, ``get``, ``get_many``,
``iter`` with the same sharding and shuffling, ``read_file``), so metadatasets blend JSONL files
and the inspection commands work on them.
"""

from __future__ import annotations

import json
import os
import posixpath
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .dataset import SampleRef, ShardRef
from .errors import ConfigError, DatasetNotPreparedError, DecodeError, SampleNotFoundError, StaleIndexError
from .samples import Sample
from .storage import ByteRange, Storage, is_remote_url, open_storage

__all__ = ["IDX_SUFFIX", "JsonlDataset", "JsonlReport", "idx_name", "is_jsonl", "prepare_jsonl", "split_url"]

#: Appended to the JSONL file's name: ``data.jsonl`` -> ``data.jsonl.idx``.
IDX_SUFFIX = ".idx"
_DTYPE = np.dtype("=u8")
#: Lines are read in pieces of this size when preparing (one range request each on S3).
_CHUNK = 8 << 20


def is_jsonl(url: str) -> bool:
    return os.fspath(url).endswith(".jsonl")


def split_url(url: str) -> tuple[str, str]:
    """``"s3://b/x/data.jsonl"`` -> (``"s3://b/x"``, ``"data.jsonl"``): the storage root and the file."""
    url = os.fspath(url)
    if is_remote_url(url):
        folder, name = posixpath.split(url)
        return folder, name
    folder, name = os.path.split(os.path.abspath(url))
    return folder, name


def idx_name(name: str) -> str:
    return name + IDX_SUFFIX


@dataclass
class JsonlReport:
    """What ``prepare`` did to a JSONL file."""

    path: str
    samples: int
    bytes: int
    seconds: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _lines(storage: Storage, name: str) -> Iterator[tuple[bytes, int]]:
    """Each line of the file (newline included) and its byte offset, read a piece at a time."""
    size = storage.size(name)
    pos = 0
    tail = b""
    while pos < size:
        chunk = storage.read_at(name, pos, min(_CHUNK, size - pos))
        start_of_buffer = pos - len(tail)
        pos += len(chunk)
        buf = tail + chunk
        start = 0
        while (nl := buf.find(b"\n", start)) >= 0:
            yield buf[start : nl + 1], start_of_buffer + start
            start = nl + 1
        tail = buf[start:]
    if tail:
        yield tail, size - len(tail)


def jsonl_offsets(storage: Storage, name: str) -> list[int]:
    """The offsets of ``name``'s index, by Energon's rules; every object line is also parsed, so a
    broken line is found now (``DecodeError`` naming its line number and byte offset), not in training."""
    offsets: list[int] = []
    last = 0
    end = 0
    for number, (line, offset) in enumerate(_lines(storage, name), start=1):
        end = offset + len(line)
        text = line.strip()
        if not text:
            if last:
                last = end
            continue
        where = f"line {number}"
        if not (text.startswith(b"{") and text.endswith(b"}")):
            raise DecodeError(f"{where} is not a JSON object ({{...}} on one line)", path=storage.url(name), offset=offset)
        try:
            json.loads(text)
        except ValueError as e:
            raise DecodeError(f"{where} is not valid JSON: {e}", path=storage.url(name), offset=offset) from None
        offsets.append(last)
        last = end
    if not offsets:
        raise ConfigError("the JSONL file holds no JSON object (Energon refuses it too)", path=storage.url(name))
    offsets.append(last)
    return offsets


def prepare_jsonl(url: str, *, storage_options: dict[str, Any] | None = None) -> JsonlReport:
    """Write ``<url>.idx`` (Energon's ``.jsonl.idx``) for the JSONL file at ``url``, atomically.

    Raises ``DecodeError`` for a line that is not one JSON object (naming line and byte offset),
    ``ConfigError`` for a file without any.
    """
    t0 = time.perf_counter()
    folder, name = split_url(url)
    storage = open_storage(folder, storage_options)
    offsets = jsonl_offsets(storage, name)
    storage.write_atomic(idx_name(name), np.asarray(offsets, dtype=_DTYPE).tobytes())
    return JsonlReport(storage.url(name), len(offsets) - 1, offsets[-1], round(time.perf_counter() - t0, 3))


class JsonlDataset:
    """An indexed JSONL file, read like a one-shard ``Dataset``: ``shardstore.open("data.jsonl")``.

    A sample is ``{"__key__": "7", "__shard__": "data.jsonl", "__index__": 7, "json": <the line's
    bytes>}``; with ``decode=True`` the ``json`` part is the parsed object.
    """

    def __init__(
        self,
        url: str,
        split: str | None = None,
        *,
        storage_options: dict[str, Any] | None = None,
        decode: bool | dict[str, Any] = False,
        **_ignored: Any,
    ) -> None:
        self.url = os.fspath(url)
        self.split = split
        self.storage_options = storage_options
        self.decode = decode
        folder, self.name = split_url(self.url)
        self.storage: Storage = open_storage(folder, storage_options)
        if not self.storage.exists(idx_name(self.name)):
            raise DatasetNotPreparedError(
                f"no {idx_name(self.name)}: run `shardstore prepare {self.url}`", path=self.storage.url(self.name)
            )
        self.offsets = _read_idx(self.storage, idx_name(self.name))
        if len(self.offsets) < 1:
            raise DatasetNotPreparedError("empty index", path=self.storage.url(idx_name(self.name)))
        size = self.storage.size(self.name)
        if int(self.offsets[-1]) != size:
            raise StaleIndexError(
                f"the file is {size} bytes, its index ends at {int(self.offsets[-1])}: rerun `shardstore prepare`",
                path=self.storage.url(self.name),
            )
        self.shard = ShardRef(self.name, 0, len(self.offsets) - 1)
        self.shards = [self.shard]
        self.excluded: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.shard.count

    def __repr__(self) -> str:
        return f"JsonlDataset({self.url!r}, samples={len(self)})"

    def _range(self, i: int) -> ByteRange:
        start = int(self.offsets[i])
        return ByteRange(start, int(self.offsets[i + 1]) - start)

    def _position(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"position {i} out of range for {n} samples")
        return i + n if i < 0 else i

    def _sample(self, i: int, data: bytes) -> Any:
        sample = Sample(__key__=str(i), __shard__=self.name, __index__=i, json=data)
        if self.decode is True or (isinstance(self.decode, dict) and "json" in self.decode):
            try:
                sample["json"] = json.loads(data)
            except ValueError as e:
                raise DecodeError(
                    f"sample {i} is not valid JSON: {e}", path=self.storage.url(self.name), offset=int(self.offsets[i])
                ) from None
        return sample

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            return self.get_many(range(*item.indices(len(self))))
        i = self._position(item)
        rng = self._range(i)
        return self._sample(i, self.storage.read_at(self.name, rng.offset, rng.size))

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    def _key_position(self, key: str) -> int:
        text = key[: -len(".json")] if key.endswith(".json") else key
        if not text.isdigit() or int(text) >= len(self) or (len(text) > 1 and text.startswith("0")):
            raise SampleNotFoundError(f"no sample {key!r}", path=self.storage.url(self.name), member=key)
        return int(text)

    def get(self, key: str) -> Any:
        """The sample with key ``key`` (its line index as a string, ``"7"``)."""
        return self[self._key_position(key)]

    def __contains__(self, key: object) -> bool:
        try:
            return isinstance(key, str) and not key.endswith(".json") and self._key_position(key) >= 0
        except SampleNotFoundError:
            return False

    def keys(self) -> Iterator[str]:
        return (str(i) for i in range(len(self)))

    def excluded_positions(self) -> list[int]:
        return []

    def locate(self, position: int) -> SampleRef:
        i = self._position(position)
        return SampleRef(self.shard, i, self._range(i), i)

    def member_range(self, name: str) -> tuple[str, ByteRange]:
        """(file, range) of member ``"7.json"``."""
        if not name.endswith(".json"):
            raise SampleNotFoundError(f"no member {name!r} (JSONL members are KEY.json)", path=self.url, member=name)
        return self.name, self._range(self._key_position(name))

    def read_file(self, name: str) -> bytes:
        _, rng = self.member_range(name)
        return self.storage.read_range(self.name, rng)

    def _read(self, refs: Sequence[SampleRef]) -> list[Any]:
        datas = self.storage.read_ranges([(self.name, r.range) for r in refs])
        return [self._sample(r.index, d) for r, d in zip(refs, datas, strict=True)]

    def get_many(self, items: Iterable[int | str]) -> list[Any]:
        refs = [self.locate(self._key_position(x) if isinstance(x, str) else x) for x in items]
        return self._read(refs)

    def _iter_range(self, start: int, stop: int, run: int, max_bytes: int) -> Iterator[Any]:
        """Positions ``start .. stop - 1`` in order, up to ``run`` lines (and ``max_bytes``) per read."""
        pos = start
        while pos < stop:
            base = int(self.offsets[pos])
            last = min(stop, pos + run)
            fits = int(np.searchsorted(self.offsets, base + max_bytes, side="right")) - 1
            last = max(pos + 1, min(last, fits))
            data = self.storage.read_at(self.name, base, int(self.offsets[last]) - base)
            for i in range(pos, last):
                lo, hi = int(self.offsets[i]) - base, int(self.offsets[i + 1]) - base
                yield self._sample(i, data[lo:hi])
            pos = last

    def iter(
        self,
        shuffle: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        worker_id: int | None = None,
        num_workers: int | None = None,
        start: int = 0,
        epoch: int = 0,
    ) -> Iterator[Any]:
        """Every line once, partitioned over ranks x workers exactly as ``Dataset.iter`` does."""
        from .sharding import iter_dataset

        return iter_dataset(
            self,  # type: ignore[arg-type]  # the reading interface iter_dataset uses
            shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
            worker_id=worker_id, num_workers=num_workers, start=start, epoch=epoch,
        )

    def close(self) -> None:
        """Nothing to release beyond what the storage caches (kept for ``Dataset``'s interface)."""


def _read_idx(storage: Storage, name: str) -> np.ndarray:
    local = storage.local_path(name)
    if local is not None:
        if os.path.getsize(local) == 0:
            return np.zeros(0, dtype=_DTYPE)
        return np.memmap(local, dtype=_DTYPE, mode="r")
    return np.frombuffer(storage.read(name), dtype=_DTYPE)

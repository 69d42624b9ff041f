"""Opened sources: a ``SourceSpec`` turned into its dataset (or joined datasets), subset window and aux stores.

``Source.read`` returns ``MetaSample``s: the dataset's sample tagged with ``__source__``,
``__subflavors__`` and ``aux`` (the source's file stores), so code downstream of a blend knows
where each sample came from without keeping any bookkeeping of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import yaml

from .. import nvmeta
from ..dataset import Dataset
from ..errors import AuxNotFoundError, ConfigError, ShardstoreError
from ..filestores import FileStore, FolderStore, IndexedTarStore
from ..samples import Sample
from ..storage import open_storage
from .config import AuxRef, Subset, Where
from .resolve import SourceSpec


class AuxStores(Mapping[str, FileStore]):
    """The aux stores of one source, by name; a name the YAML does not define raises
    ``AuxNotFoundError`` (a ``KeyError``) naming the YAML file and key."""

    def __init__(self, stores: dict[str, FileStore], where: Where) -> None:
        self._stores = stores
        self._where = where

    def __getitem__(self, name: str) -> FileStore:
        try:
            return self._stores[name]
        except KeyError:
            have = ", ".join(self._stores) or "none"
            raise AuxNotFoundError(
                f"no aux store named {name!r} for this dataset (defined: {have})", path=self._where.file,
                member=f"{self._where.key}.aux.{name}" if self._where.key else f"aux.{name}",
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)

    def __len__(self) -> int:
        return len(self._stores)

    def __repr__(self) -> str:
        return f"AuxStores({self._stores!r})"


class MetaSample(Sample):
    """A sample of a metadataset: the dataset's sample plus ``__source__``, ``__subflavors__``
    and ``aux`` (the source's file stores). For a join, one entry per joined dataset (its name,
    or ``"0"``, ``"1"``... for a list) holds that dataset's sample, or None where ``nonmatch: none``."""

    __slots__ = ("aux",)
    aux: AuxStores

    @property
    def source(self) -> str:
        return str(self["__source__"])

    @property
    def subflavors(self) -> dict[str, Any]:
        return dict(self["__subflavors__"])


def open_aux(ref: AuxRef, storage_options: dict[str, Any] | None) -> FileStore:
    """The file store an ``aux`` entry names; ``ConfigError`` at the entry's YAML key if it is not there."""
    where = ref.where
    if ref.folder:
        store = FolderStore(ref.url, storage_options=storage_options)
        if not store.exists():
            raise where.error(f"aux folder not found: {ref.url}")
        return store
    if nvmeta.dataset_kind(ref.url, storage_options) == nvmeta.DatasetKind.METADATASET:
        raise where.error(f"an aux store must be a prepared dataset or filesystem://folder, not a metadataset: {ref.url}")
    storage = open_storage(ref.url, storage_options)
    if not storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"):
        raise where.error(
            f"aux dataset not found or not prepared: {ref.url} (no {nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}); "
            "for a plain folder write filesystem://PATH"
        )
    try:
        return IndexedTarStore(ref.url, storage_options=storage_options)
    except ShardstoreError as e:
        raise where.error(f"aux dataset {ref.url} cannot be opened: {e}") from e


def check_reader_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` unchanged if every name is one a dataset and store take; a typo fails here, at open."""
    allowed = {"storage_options", "decode", "field_map", "allow_pickle", "trust_dataset_code"}
    unknown = set(options) - allowed
    if unknown:
        raise ConfigError(f"unknown reader options {sorted(unknown)}; allowed: {sorted(allowed)}")
    return options


def _open_dataset(url: str, split: str, split_config: str | None, dataset_config: str | None,
                  where: Where, options: dict[str, Any]) -> Dataset:
    try:
        if url.endswith(".jsonl"):  # a JSONL file: one sample per line, no splits (as in Energon)
            from ..jsonl import JsonlDataset

            return JsonlDataset(url, split, **options)  # type: ignore[return-value]
        ds = Dataset(url, split, split_config=split_config, **options)
    except ShardstoreError as e:
        raise (where / "path").error(f"cannot open dataset {url} (split {split!r}): {e}") from e
    if dataset_config is not None:
        rel = f"{nvmeta.META_DIR}/{dataset_config}"
        if not ds.storage.exists(rel):
            raise (where / "dataset_config").error(f"no {rel} in {url}")
        raw = yaml.safe_load(ds.storage.read(rel))
        if not isinstance(raw, dict):
            raise (where / "dataset_config").error(f"{rel} in {url} is not a mapping")
        ds.dataset_yaml = raw
    return ds


class _JoinTable:
    """Rows of a join: the primary's samples (in split order, minus excluded ones) matched by key to
    each other dataset, with ``nonmatch`` applied (error: raise; skip: drop the row; none: None)."""

    def __init__(self, spec: SourceSpec, datasets: list[Dataset]) -> None:
        primary, others = datasets[0], datasets[1:]
        keys: list[str] = []
        positions: list[int] = []
        matched: list[list[bool]] = [[] for _ in others]
        allowed = [{s.tar_file_id: s.name for s in d.shards} for d in others]
        start = 0
        assert spec.join is not None
        for shard in primary.shards:
            for key, _tid, index, _off, _size in primary.index.iter_samples(shard.tar_file_id):
                if f"{shard.name}/{key}" in primary.excluded:
                    continue
                hits = []
                for j, d in enumerate(others):
                    loc = d.index.locate(key)
                    ok = loc is not None and loc.tar_file_id in allowed[j]
                    ok = ok and f"{allowed[j].get(loc.tar_file_id)}/{key}" not in d.excluded  # type: ignore[union-attr]
                    hits.append(ok)
                if not self._keep(spec, hits, key):
                    continue
                keys.append(key)
                positions.append(start + index)
                for j, ok in enumerate(hits):
                    matched[j].append(ok)
            start += shard.count
        self.keys = keys
        self.positions = np.asarray(positions, dtype=np.int64)
        self.matched = [np.asarray(m, dtype=bool) for m in matched]

    @staticmethod
    def _keep(spec: SourceSpec, hits: list[bool], key: str) -> bool:
        assert spec.join is not None
        for ok, (name, path, _split, _cfg, nonmatch) in zip(hits, spec.join[1:], strict=True):
            if ok:
                continue
            if nonmatch == "skip":
                return False
            if nonmatch == "error":
                raise (spec.where / "join" / name).error(
                    f"sample {key!r} of the primary dataset has no match in {path} (nonmatch: error; "
                    "set nonmatch: skip or none to allow it)"
                )
        return True

    def __len__(self) -> int:
        return len(self.keys)


class Source:
    """One opened source: its dataset(s), subset window ``[start, end)``, aux stores and weight."""

    def __init__(self, spec: SourceSpec, options: dict[str, Any]) -> None:
        self.spec = spec
        self.name = spec.name
        storage_options = options.get("storage_options")
        if spec.join is None:
            self.dataset = _open_dataset(spec.path, spec.split_part, spec.split_config, spec.dataset_config, spec.where, options)
            self.datasets = [self.dataset]
            self.join: _JoinTable | None = None
            total = len(self.dataset)
        else:
            self.datasets = [
                _open_dataset(path, split, cfg, spec.dataset_config if i == 0 else None, spec.where / "join" / name, options)
                for i, (name, path, split, cfg, _nm) in enumerate(spec.join)
            ]
            self.dataset = self.datasets[0]
            self.join = _JoinTable(spec, self.datasets)
            total = len(self.join)
        self.total = total
        self.start, self.end = (spec.subset or Subset()).apply(total, spec.where)
        excluded = self.dataset.excluded_positions() if self.join is None else []
        self.skipped = [p - self.start for p in excluded if self.start <= p < self.end]
        self.aux = AuxStores({a.name: open_aux(a, storage_options) for a in spec.aux}, spec.where)

    def __len__(self) -> int:
        """Samples in the subset window (excluded ones counted, as Energon counts them)."""
        return self.end - self.start

    @property
    def weight(self) -> float | None:
        return self.spec.weight

    @property
    def repetitions(self) -> float | None:
        return self.spec.repetitions

    def read(self, slots: Sequence[int]) -> list[Any]:
        """Samples at window slots ``slots`` (``0 .. len-1``), in that order; ranges merged."""
        if self.join is None:
            samples = self.dataset.get_many([self.start + s for s in slots])
        else:
            samples = self._read_joined([self.start + s for s in slots])
        return [self._tag(s) for s in samples]

    def _read_joined(self, rows: list[int]) -> list[Any]:
        jt = self.join
        assert jt is not None and self.spec.join is not None
        primary = self.dataset.get_many([int(jt.positions[r]) for r in rows])
        parts: list[list[Any]] = [primary]
        for j, d in enumerate(self.datasets[1:]):
            want = [r for r in rows if jt.matched[j][r]]
            got = dict(zip(want, d.get_many([jt.keys[r] for r in want]), strict=True))
            parts.append([got.get(r) for r in rows])
        out = []
        for i, p in enumerate(primary):
            s = Sample(__key__=p["__key__"], __shard__=p["__shard__"], __index__=p["__index__"])
            for (name, *_rest), col in zip(self.spec.join, parts, strict=True):
                s[name] = col[i]
            out.append(s)
        return out

    def _tag(self, sample: Any) -> Any:
        if not isinstance(sample, dict):  # a typed sample (a field map): tagged as far as it allows
            for attr, value in (("__subflavors__", dict(self.spec.subflavors)), ("__source__", self.name), ("aux", self.aux)):
                try:
                    setattr(sample, attr, value)
                except (AttributeError, TypeError):
                    pass
            return sample
        out = MetaSample(sample)
        out["__source__"] = self.name
        out["__subflavors__"] = dict(self.spec.subflavors)
        out.aux = self.aux
        return out

    def close(self) -> None:
        """Release the descriptors and connections of its datasets and aux stores (reads reopen)."""
        for ds in self.datasets:
            ds.close()
        for store in self.aux.values():
            store.close()

    def __repr__(self) -> str:
        return f"Source({self.name!r}, samples={len(self)}, weight={self.weight}, repetitions={self.repetitions})"

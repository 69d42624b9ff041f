"""``metadataset_info`` and ``metadataset_check``: what a metadataset YAML resolves to, and whether it is whole.

Both report problems instead of raising them (only a YAML that cannot be parsed at all raises), so
one run tells the whole story: every split, every dataset and aux path, and with ``refs`` every
aux file the primary samples name.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, ShardstoreError
from ..filestores import IndexedTarStore
from .blend import epoch_samples
from .config import BLEND_EPOCHIZED, AuxRef, load_file
from .resolve import SourceSpec, flatten
from .sources import Source, open_aux


def _aux_summary(ref: AuxRef, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": ref.url, "kind": "folder" if ref.folder else "dataset"}
    try:
        store = open_aux(ref, storage_options)
        entry["resolves"] = True
        if isinstance(store, IndexedTarStore):
            entry["files"] = sum(store.dataset.index.part_counts().values())
    except ShardstoreError as e:
        entry["resolves"], entry["error"] = False, str(e)
    return entry


def _source_summary(spec: SourceSpec, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": spec.name, "path": spec.path, "split_part": spec.split_part, "weight": spec.weight,
        "repetitions": spec.repetitions, "subflavors": spec.subflavors,
    }
    if spec.join:
        out["join"] = [{"name": n, "path": p, "split_part": s, "nonmatch": nm} for n, p, s, _c, nm in spec.join]
        out["joiner"] = spec.joiner
    try:
        src = Source(replace(spec, aux=()), {"storage_options": storage_options})
        out.update(dataset_samples=src.total, samples=len(src) - len(src.skipped), subset=[src.start, src.end])
        if spec.repetitions is not None:  # what one blend_epochized epoch takes from it (one reader)
            out["epoch_samples"] = epoch_samples(src, spec.repetitions)
    except ShardstoreError as e:
        out["error"] = str(e)
    out["aux"] = {a.name: _aux_summary(a, storage_options) for a in spec.aux}
    return out


def metadataset_info(yaml_path: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A summary of every split: blend mode, sources (path, weight or repetitions, samples after the
    subset, per blend_epochized epoch, subflavors) and aux stores with whether each resolves. Problems are reported, not raised,
    except for a YAML that cannot be parsed at all."""
    url = os.fspath(yaml_path)
    mf = load_file(url, storage_options)
    splits: dict[str, Any] = {}
    for split in mf.splits:
        try:
            _mf, mode, specs = flatten(url, split, storage_options)
        except ConfigError as e:
            splits[split] = {"error": str(e)}
            continue
        sources = [_source_summary(s, storage_options) for s in specs]
        splits[split] = {"mode": mode, "samples": sum(s.get("samples", 0) for s in sources), "sources": sources}
        if mode == BLEND_EPOCHIZED:
            splits[split]["epoch_samples"] = sum(s.get("epoch_samples", 0) for s in sources)
    return {"path": url, "class": "MetadatasetV2" if mf.version == 2 else "Metadataset", "splits": splits}


_REF_RE = re.compile(r"^(?:(?P<store>[A-Za-z_][\w.-]*):)?(?P<part>[^\[\]:]+)(?P<path>(?:\[[^\[\]]+\])*)$")


def _parse_ref_spec(text: str) -> tuple[str | None, str, list[str | int]]:
    """``[STORE:]PART[field][0]`` -> (store or None, part, path)."""
    m = _REF_RE.match(text.strip())
    if m is None:
        raise ConfigError(f"invalid --ref {text!r}; write PART[field] (e.g. json[image]) or STORE:json[image]", member="--ref", noun="option")
    path: list[str | int] = [int(t) if t.isdigit() else t for t in re.findall(r"\[([^\[\]]+)\]", m.group("path"))]
    return m.group("store"), m.group("part"), path


def _ref_names(sample: Any, part: str, path: list[str | int]) -> list[str]:
    """The file names a sample's part refers to at ``path`` (a string or a list of strings)."""
    raw = sample.get(part) if isinstance(sample, dict) else None
    if raw is None:
        return []
    value: Any = raw
    if isinstance(raw, (bytes, bytearray)):
        text = bytes(raw).decode("utf-8", "replace")
        value = json.loads(text) if part.endswith("json") else text.strip()
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


@dataclass
class MetaCheckReport:
    """What ``metadataset_check`` found: problems (empty when all is well) and what it looked at."""

    url: str
    splits: int = 0
    sources: int = 0
    samples: int = 0
    references: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "splits": self.splits, "sources": self.sources, "samples": self.samples,
                "references": self.references, "problems": self.problems, "seconds": round(self.seconds, 3)}


def _check_refs(src: Source, refs: list[tuple[str | None, str, list[str | int]]], report: MetaCheckReport,
                max_problems: int, batch: int = 256) -> None:
    for lo in range(0, len(src), batch):
        slots = [s for s in range(lo, min(len(src), lo + batch)) if s not in set(src.skipped)]
        samples = src.read(slots)
        report.samples += len(samples)
        for store_name, part, path in refs:
            names: list[tuple[str, str]] = [(s["__key__"], n) for s in samples for n in _ref_names(s, part, path)]
            report.references += len(names)
            stores = [src.aux[store_name]] if store_name else list(src.aux.values())
            missing = list(range(len(names)))
            for store in stores:
                if not missing:
                    break
                found = store.exists_many([names[i][1] for i in missing])
                missing = [i for i, ok in zip(missing, found, strict=True) if not ok]
            for i in missing:
                if len(report.problems) < max_problems:
                    where = f"aux {store_name!r}" if store_name else f"aux stores {', '.join(src.aux) or '(none)'}"
                    report.problems.append(f"{src.name}: sample {names[i][0]}: {part}{''.join(f'[{p}]' for p in path)} "
                                           f"names {names[i][1]!r}, not found in {where}")


def metadataset_check(yaml_path: str, *, refs: Sequence[str] = (), split: str | None = None,
                      storage_options: dict[str, Any] | None = None, max_problems: int = 100) -> MetaCheckReport:
    """Check every split (or ``split``): every dataset and aux path resolves and, for each ``refs``
    entry (``json[image]``, or ``images:json[image]`` for one store), every primary sample's named
    files exist in the source's aux stores. Returns a report; raises only for an unparsable YAML."""
    t0 = time.perf_counter()
    url = os.fspath(yaml_path)
    report = MetaCheckReport(url)
    parsed = [_parse_ref_spec(r) for r in refs]
    mf = load_file(url, storage_options)
    for name in [split] if split else list(mf.splits):
        report.splits += 1
        try:
            _mf, _mode, specs = flatten(url, name, storage_options)
        except ConfigError as e:
            report.problems.append(f"split {name}: {e}")
            continue
        for spec in specs:
            report.sources += 1
            try:
                src = Source(spec, {"storage_options": storage_options})
            except ShardstoreError as e:
                report.problems.append(f"split {name}: {e}")
                continue
            if parsed:
                try:
                    _check_refs(src, parsed, report, max_problems)
                except ShardstoreError as e:
                    report.problems.append(f"split {name}: {spec.name}: {e}")
    report.seconds = time.perf_counter() - t0
    return report

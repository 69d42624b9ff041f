"""One split of a parsed metadataset flattened into ``SourceSpec`` leaves, as Energon's ``get_datasets`` does.

Nested metadataset YAMLs are loaded on the way (a cycle is refused), subflavors merged (outer levels
win), subset ranges composed, blend weights normalised and repetitions multiplied. Nothing is opened
here beyond the probe that tells a prepared dataset from a nested YAML, so ``metadataset_info`` and
``metadataset_check`` can report on a split whose datasets do not open. ``dataset_paths`` lists the
datasets of every split (a mounted metadataset shows one folder each).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from .. import nvmeta
from ..storage import is_remote_url
from .config import (
    BLEND,
    SINGLE,
    AuxRef,
    BlendNode,
    DatasetRef,
    JoinNode,
    MetaFile,
    Node,
    Subset,
    Where,
    folder_of,
    load_file,
    merge_subset,
)


@dataclass(frozen=True)
class SourceSpec:
    """One leaf of a metadataset split, as Energon's ``get_datasets`` resolves it.

    ``weight`` (blend, normalised to sum 1) or ``repetitions`` (blend_epochized) or neither (a single
    dataset); ``join`` holds ``(name, path, split_part, split_config, nonmatch)`` per joined dataset,
    the first being the primary.
    """

    name: str
    path: str
    split_part: str
    subflavors: dict[str, Any]
    subset: Subset | None
    weight: float | None
    repetitions: float | None
    dataset_config: str | None
    split_config: str | None
    aux: tuple[AuxRef, ...]
    where: Where
    join: tuple[tuple[str, str, str, str | None, str], ...] | None = None
    joiner: str | None = None


class _Traversal:
    """Walks the parsed tree of one split; loads nested YAMLs on the way (and refuses cycles)."""

    def __init__(self, storage_options: dict[str, Any] | None) -> None:
        self.storage_options = storage_options
        self.stack: list[str] = []

    def split(
        self, mf: MetaFile, split: str, subflavors: dict[str, Any], subset: Subset | None, where: Where | None
    ) -> tuple[str, list[SourceSpec]]:
        if mf.url in self.stack:
            raise (where or Where(mf.url)).error(f"metadataset includes itself: {' -> '.join(self.stack + [mf.url])}")
        node = mf.splits.get(split)
        if node is None:
            detail = f"no split {split!r} in {mf.url}; it has {', '.join(mf.splits)}"
            raise (where.error(detail) if where else Where(mf.url, "splits").error(detail))
        self.stack.append(mf.url)
        try:
            return self.node(node, split, subflavors, subset)
        finally:
            self.stack.pop()

    def node(self, node: Node, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        if isinstance(node, BlendNode):
            return self.blend(node, split, subflavors, subset)
        if isinstance(node, JoinNode):
            return SINGLE, [self.join(node, split, subflavors, subset)]
        return self.ref(node, split, subflavors, subset)

    def blend(self, node: BlendNode, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        subset = merge_subset(node.subset, subset, node.where)
        total = sum(e.weight for e in node.entries)
        out: list[SourceSpec] = []
        for entry in node.entries:
            mode, leaves = self.node(entry, split, subflavors, subset)
            if mode not in (SINGLE, node.mode):
                raise entry.where.error(f"cannot mix blend and blend_epochized: this entry is a {mode}, inside a {node.mode}")
            for leaf in leaves:
                if node.mode == BLEND:
                    leaf = replace(leaf, weight=(leaf.weight if leaf.weight is not None else 1.0) * entry.weight / total)
                else:
                    leaf = replace(leaf, repetitions=(leaf.repetitions or 1.0) * entry.repetitions)
                out.append(leaf)
        return node.mode, out

    def ref(self, ref: DatasetRef, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        merged = {**(ref.subflavors or {}), **subflavors}  # outer levels win, as in Energon
        subset = merge_subset(ref.subset, subset, ref.where)
        split = ref.split_part or split
        kind = nvmeta.dataset_kind(ref.path, self.storage_options)
        if kind == nvmeta.DatasetKind.METADATASET:
            for key in ("aux", "dataset_config", "split_config"):
                if getattr(ref, key):
                    raise (ref.where / key).error(f"{key} cannot be set on a reference to another metadataset")
            mf = load_file(ref.path, self.storage_options, ref.where / "path")
            return self.split(mf, split, merged, subset, ref.where / "path")
        if kind not in (nvmeta.DatasetKind.WEBDATASET, nvmeta.DatasetKind.JSONL):
            raise (ref.where / "path").error(f"no prepared dataset at {ref.path} (no .nv-meta/.info.json; run `shardstore prepare`)")
        spec = SourceSpec(
            name=ref.path, path=ref.path, split_part=split, subflavors=merged, subset=subset, weight=None,
            repetitions=None, dataset_config=ref.dataset_config, split_config=ref.split_config, aux=ref.aux,
            where=ref.where,
        )
        return SINGLE, [spec]

    def join(self, node: JoinNode, split: str, subflavors: dict[str, Any], subset: Subset | None) -> SourceSpec:
        merged = {**(node.subflavors or {}), **subflavors}
        subset = merge_subset(node.subset, subset, node.where)
        split = node.split_part or split
        parts = []
        for name, ref in node.entries:
            if nvmeta.dataset_kind(ref.path, self.storage_options) != nvmeta.DatasetKind.WEBDATASET:
                raise (ref.where / "path").error(f"a joined dataset must be a prepared dataset: {ref.path}")
            parts.append((name, ref.path, ref.split_part or split, ref.split_config, ref.nonmatch))
            merged = {**(ref.subflavors or {}), **merged}
        primary = node.entries[0][1]
        return SourceSpec(
            name=primary.path, path=primary.path, split_part=parts[0][2],
            subflavors=merged, subset=subset, weight=None, repetitions=None, dataset_config=primary.dataset_config,
            split_config=primary.split_config, aux=(), where=node.where, join=tuple(parts), joiner=node.joiner,
        )


def _short(path: str, root: str) -> str:
    """``path`` relative to the top YAML's folder when it lies inside it, else as it is."""
    if is_remote_url(path) or is_remote_url(root):
        return path[len(root) + 1 :] if path.startswith(root + "/") else path
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def flatten(url: str, split: str, storage_options: dict[str, Any] | None) -> tuple[MetaFile, str, list[SourceSpec]]:
    """The split's sources; each named by its path relative to the YAML (``#2``, ``#3`` for repeats)."""
    mf = load_file(url, storage_options)
    mode, specs = _Traversal(storage_options).split(mf, split, {}, None, None)
    root = folder_of(url)
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        if spec.join is None:
            name = _short(spec.path, root)
        else:
            name = "join(" + ", ".join(_short(p[1], root) for p in spec.join) + ")"
        seen[name] = seen.get(name, 0) + 1
        out.append(replace(spec, name=name if seen[name] == 1 else f"{name}#{seen[name]}"))
    return mf, mode, out


def dataset_paths(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Every prepared dataset the metadataset YAML at ``url`` reads, in any split, joined ones
    included: each path once, in the order the YAML first names it (what a mount shows).

    Raises ``ConfigError`` naming the file and key, as ``flatten`` does, for a YAML it does not
    accept or a dataset that is not prepared.
    """
    paths: list[str] = []
    for split in load_file(url, storage_options).splits:
        for spec in flatten(url, split, storage_options)[2]:
            for path in [spec.path, *(j[1] for j in spec.join or ())]:
                if path not in paths:
                    paths.append(path)
    return paths

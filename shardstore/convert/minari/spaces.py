"""Minari's serialized Gymnasium spaces (``metadata.json``'s ``observation_space`` and
``action_space``, 0.4's root attributes) read as plain JSON: no Gymnasium needed to import.

They say which fields are JPEG-encoded images, how Arrow's fixed-size lists reshape, and whether a
struct is a Tuple (Arrow names its members ``0``, ``1``...; HDF5 and the episode model
``_index_0``...). For a source without spaces (0.3, another format) ``infer`` builds them from the
field tree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...episodes.model import FieldSpec
from ...errors import EpisodeFormatError

__all__ = ["TOP", "parse", "space_at", "is_image", "is_tuple", "tuple_index", "infer", "dumps", "check_jpeg"]

#: The top-level fields that have a space, and the metadata key of it.
TOP = {"observations": "observation_space", "actions": "action_space"}
_INDEX = re.compile(r"^_index_(\d+)$")


def parse(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def tuple_index(name: str) -> int | None:
    m = _INDEX.match(name)
    return int(m.group(1)) if m else None


def space_at(spaces: Mapping[str, Any], path: Sequence[str]) -> dict[str, Any] | None:
    """The space of the field at ``path`` (``("observations", "pair", "_index_1")``), or None."""
    if not path or path[0] not in spaces:
        return None
    space = spaces[path[0]]
    for comp in path[1:]:
        if not isinstance(space, dict):
            return None
        if space.get("type") == "Dict":
            space = space.get("subspaces", {}).get(comp)
        elif space.get("type") == "Tuple":
            i = tuple_index(comp)
            if i is None and comp.isdigit():
                i = int(comp)
            subs = space.get("subspaces", [])
            space = subs[i] if i is not None and i < len(subs) else None
        else:
            return None
    return space if isinstance(space, dict) else None


def is_tuple(space: dict[str, Any] | None) -> bool:
    return isinstance(space, dict) and space.get("type") == "Tuple"


def is_image(space: dict[str, Any] | None) -> bool:
    """Minari's rule for a space it JPEG-encodes (``minari_storage.is_image_space``)."""
    if not isinstance(space, dict) or space.get("type") != "Box":
        return False
    shape = space.get("shape", [])
    return (
        len(shape) in (2, 3) and shape[0] >= 32 and shape[1] >= 32 and space.get("dtype") == "uint8"
        and bool(np.all(np.asarray(space.get("low")) == 0)) and bool(np.all(np.asarray(space.get("high")) == 255))
    )


def _leaf(spec: FieldSpec) -> dict[str, Any]:
    if spec.kind == "text":
        return {"type": "Text", "max_length": 4096, "min_length": 0,
                "charset": "".join(chr(c) for c in range(32, 127))}
    if spec.kind == "media":
        shape = list(spec.shape)
        return {"type": "Box", "dtype": "uint8", "shape": shape, "low": np.zeros(shape, int).tolist(),
                "high": np.full(shape, 255).tolist()}
    dtype = np.dtype(spec.dtype)
    lo: float
    hi: float
    if dtype.kind in "iu":
        lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    elif dtype.kind == "b":
        lo, hi = 0, 1
    else:
        lo, hi = -float("inf"), float("inf")
    shape = list(spec.shape)
    return {"type": "Box", "dtype": dtype.name, "shape": shape, "low": np.full(shape, lo).tolist(),
            "high": np.full(shape, hi).tolist()}


def infer(fields: Sequence[FieldSpec], top: str) -> dict[str, Any] | None:
    """A space for the fields under ``top`` (Dict for groups, Tuple when every member is
    ``_index_<i>``, Box/Text leaves); None when there is no such field."""
    tree: dict[str, Any] = {}
    for spec in fields:
        path = spec.source_path
        if path[0] != top:
            continue
        if len(path) == 1:
            return _leaf(spec)
        node = tree
        for comp in path[1:-1]:
            node = node.setdefault(comp, {})
        node[path[-1]] = spec
    return _build(tree) if tree else None


def _build(node: dict[str, Any]) -> dict[str, Any]:
    subs = {k: _leaf(v) if isinstance(v, FieldSpec) else _build(v) for k, v in node.items()}
    indices = [tuple_index(k) for k in subs]
    if all(i is not None for i in indices) and sorted(indices) == list(range(len(indices))):  # type: ignore[type-var]
        return {"type": "Tuple", "subspaces": [subs[f"_index_{i}"] for i in range(len(subs))]}
    return {"type": "Dict", "subspaces": subs}


def dumps(space: dict[str, Any]) -> str:
    return json.dumps(space)


def check_jpeg(rows: list[bytes], path: str, where: str) -> list[bytes]:
    """``rows`` if each is a JPEG (starts with its SOI marker): a field read as JPEG-encoded because
    its image space says so must hold JPEGs, not raw pixels under a space that lies about its shape."""
    for t, row in enumerate(rows):
        if row[:3] != b"\xff\xd8\xff":
            raise EpisodeFormatError(
                f"row {t} is not a JPEG ({len(row)} bytes starting {row[:4].hex() or 'empty'}): the image space's "
                "shape does not describe the stored rows", path=path, member=where, noun="")
    return rows

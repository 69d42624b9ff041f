"""TFDS's ``features.json`` as leaves, and back: the part of RLDS that says how an Example's flat
``/``-joined keys hold an episode.

TFDS writes a ``FeaturesDict`` as nested JSON: ``featuresDict.features`` for dicts, ``sequence``
for the ``steps`` dataset, and leaves ``tensor`` (``Tensor`` and ``Scalar``), ``image`` and
``text``. A leaf's values sit in one Example feature under its path: a ``steps/...`` leaf holds all
the episode's steps flattened (its length is the step count times the per-step size), any other
leaf (``episode_metadata/...``) holds one value. Floats travel as a ``float_list`` (float32, also
for float64 tensors: TFDS does the same), integers and bools as an ``int64_list``, strings, text
and encoded images as a ``bytes_list``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ...episodes.model import FLAG_FIELDS, FieldSpec, Schema
from ...errors import EpisodeFormatError, from_library

__all__ = ["STEPS", "Leaf", "LeafKind", "build_features_json", "leaf_to_field", "parse_features_json"]

STEPS = "steps"
LeafKind = Literal["tensor", "image", "text"]
ListKind = Literal["float_list", "int64_list", "bytes_list"]

_CLASS = "tensorflow_datasets.core.features."
_CLASSES = {
    "dict": _CLASS + "features_dict.FeaturesDict",
    "dataset": _CLASS + "dataset_feature.Dataset",
    "tensor": _CLASS + "tensor_feature.Tensor",
    "scalar": _CLASS + "scalar.Scalar",
    "image": _CLASS + "image_feature.Image",
    "text": _CLASS + "text_feature.Text",
}
_IMAGE_ENCODINGS = {"png": "png", "jpeg": "jpeg", "jpg": "jpeg"}


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf feature: its path from the root (``("steps", "observation", "image")``), kind,
    numpy dtype name (``float32``, ``bool``; ``uint8`` for images; ``str`` for text), per-value
    shape (``-1`` for a dimension TFDS leaves open, images only) and image encoding."""

    path: tuple[str, ...]
    kind: LeafKind
    dtype: str
    shape: tuple[int, ...] = ()
    encoding: str = ""

    @property
    def key(self) -> str:
        """The Example's feature key: the path joined with ``/``."""
        return "/".join(self.path)

    @property
    def in_steps(self) -> bool:
        return self.path[0] == STEPS

    @property
    def is_flag(self) -> bool:
        """One of the episode's top-level ``steps/is_first|is_last|is_terminal`` flags."""
        return len(self.path) == 2 and self.in_steps and self.path[1] in FLAG_FIELDS

    @property
    def list_kind(self) -> ListKind:
        """Which list of an Example ``Feature`` holds the values."""
        if self.kind != "tensor" or self.dtype in ("str", "string", "object"):
            return "bytes_list"
        return "float_list" if np.dtype(self.dtype).kind == "f" else "int64_list"

    @property
    def size(self) -> int:
        """Values per step (steps leaves) or in all (others); images and text count 1."""
        return 1 if self.kind != "tensor" else int(np.prod(self.shape, dtype=np.int64))


def parse_features_json(text: str | bytes, path: str = "features.json") -> list[Leaf]:
    """The leaves of a TFDS ``features.json``, in its order; raises ``EpisodeFormatError`` naming
    ``path`` and the feature for what RLDS episodes cannot hold (a nested sequence, a dynamic
    tensor shape, a feature kind TFDS writes that shardstore does not read)."""
    try:
        root = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's stack
        raise EpisodeFormatError(f"not JSON (or nested too deep): {type(e).__name__}: {e}", path=path) from e
    if not isinstance(root, dict) or "featuresDict" not in root:
        raise EpisodeFormatError("the root feature is not a FeaturesDict", path=path)
    leaves: list[Leaf] = []
    try:
        _walk(root, (), leaves, path)
    except (AttributeError, TypeError, KeyError, ValueError, RecursionError) as e:  # a node of the wrong JSON type
        if isinstance(e, EpisodeFormatError):
            raise
        raise EpisodeFormatError(f"malformed feature tree: {from_library(e).detail}", path=path) from e
    if not any(leaf.in_steps for leaf in leaves):
        raise EpisodeFormatError("no 'steps' dataset: not an RLDS dataset", path=path)
    return leaves


#: Deepest feature nesting read (RLDS nests episode / steps / observation / a camera: four or five).
MAX_DEPTH = 32


def _walk(node: Any, at: tuple[str, ...], leaves: list[Leaf], path: str) -> None:
    where = "/".join(at) or "(root)"
    if len(at) > MAX_DEPTH:
        raise EpisodeFormatError(f"features nested deeper than {MAX_DEPTH} levels", path=path,
                                 member="/".join(at[:4]) + "/...")
    if not isinstance(node, dict):
        raise EpisodeFormatError("a feature is not a JSON object", path=path, member=where)
    if "featuresDict" in node:
        children = node["featuresDict"].get("features", {})
        for name, child in children.items():
            if not name or "/" in name:
                raise EpisodeFormatError(f"invalid feature name {name!r}", path=path, member=where)
            _walk(child, (*at, name), leaves, path)
        return
    if "sequence" in node:
        if at != (STEPS,):
            raise EpisodeFormatError(
                "a sequence feature other than 'steps' is not supported", path=path, member=where
            )
        _walk(node["sequence"].get("feature", {}), at, leaves, path)
        return
    if not at:
        raise EpisodeFormatError("the root feature is not a FeaturesDict", path=path)
    leaves.append(_leaf(node, at, path, where))


def _leaf(node: dict[str, Any], at: tuple[str, ...], path: str, where: str) -> Leaf:
    try:
        if "tensor" in node or "scalar" in node:
            spec: dict[str, Any] = node.get("tensor") or node.get("scalar") or {}
            if spec.get("encoding", "none") != "none":
                raise EpisodeFormatError(
                    f"tensor encoding {spec['encoding']!r} is not supported", path=path, member=where
                )
            shape = _shape(spec)
            if any(d < 0 for d in shape):
                raise EpisodeFormatError(
                    f"dynamic tensor shape {list(shape)} is not supported", path=path, member=where
                )
            dtype = "str" if spec["dtype"] == "string" else np.dtype(spec["dtype"]).name
            return Leaf(at, "tensor", dtype, shape)
        if "image" in node:
            spec = node["image"]
            encoding = _IMAGE_ENCODINGS.get(spec.get("encodingFormat", "png"))
            if encoding is None:
                raise EpisodeFormatError(
                    f"image encoding {spec.get('encodingFormat')!r}", path=path, member=where
                )
            return Leaf(at, "image", np.dtype(spec.get("dtype", "uint8")).name, _shape(spec), encoding)
        if "text" in node:
            return Leaf(at, "text", "str")
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, EpisodeFormatError):
            raise
        raise EpisodeFormatError(f"invalid feature: {e}", path=path, member=where) from e
    kind = node.get("pythonClassName") or "/".join(k for k in node if k != "description") or "(empty)"
    raise EpisodeFormatError(f"feature kind {kind} is not supported", path=path, member=where)


def _shape(spec: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(d) for d in spec.get("shape", {}).get("dimensions", []))


def leaf_to_field(leaf: Leaf) -> FieldSpec:
    """The episode model's field for a steps leaf (not a flag): ``observation/image`` becomes
    ``observation.image`` with its path kept."""
    sub = leaf.path[1:]
    name = ".".join(sub)
    if leaf.kind == "image":
        return FieldSpec(name, "media", np.dtype(leaf.dtype).str, leaf.shape, sub, leaf.encoding)
    if leaf.kind == "text" or leaf.dtype == "str":
        return FieldSpec(name, "text", "", (), sub)
    return FieldSpec(name, "array", np.dtype(leaf.dtype).str, leaf.shape, sub)


def build_features_json(schema: Schema, metadata: Mapping[str, Any]) -> str:
    """A TFDS ``features.json`` for episodes of ``schema`` (from any format): array fields become
    ``Tensor``/``Scalar``, png or jpeg media ``Image``, text ``Text``, plus the three flags; the
    other top-level features come from one episode's ``metadata`` (numpy scalars and arrays become
    tensors, str text, nested dicts FeaturesDicts, anything else text holding its typed JSON). Raises ``EpisodeFormatError`` for what
    TFDS cannot hold (video fields, media in another encoding, a ``steps+1`` field)."""
    steps: dict[str, Any] = {}
    for f in schema.fields:
        where = f"field {f.name!r}"
        if f.rows != "steps":
            raise EpisodeFormatError("RLDS has one row per step; this field has one more", member=where, noun="")
        if f.kind == "array":
            node = _tensor_node(np.dtype(f.dtype), f.shape)
        elif f.kind == "media" and f.encoding in _IMAGE_ENCODINGS:
            node = {
                "image": {
                    "dtype": "uint8",
                    "encodingFormat": _IMAGE_ENCODINGS[f.encoding],
                    "shape": {"dimensions": [str(d) for d in f.shape]} if f.shape else {},
                },
                "pythonClassName": _CLASSES["image"],
            }
        elif f.kind == "text":
            node = {"pythonClassName": _CLASSES["text"], "text": {}}
        else:
            raise EpisodeFormatError(
                f"{f.kind} field encoded {f.encoding!r} has no TFDS feature", member=where, noun=""
            )
        _insert(steps, f.source_path, node)
    for flag in FLAG_FIELDS:
        steps[flag] = _tensor_node(np.dtype(bool), ())
    root = _metadata_nodes(metadata)
    root[STEPS] = {
        "pythonClassName": _CLASSES["dataset"],
        "sequence": {"feature": _dict_node(steps), "length": "-1"},
    }
    return json.dumps(_dict_node(root), indent=4, sort_keys=True)


def _metadata_nodes(metadata: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in metadata.items():
        if isinstance(value, Mapping):
            out[name] = _dict_node(_metadata_nodes(value))
        elif isinstance(value, str):
            out[name] = {"pythonClassName": _CLASSES["text"], "text": {}}
        elif isinstance(value, bool | int | float | np.generic | np.ndarray):
            arr = np.asarray(value)
            dtype = arr.dtype if isinstance(value, np.generic | np.ndarray) else _python_dtype(value)
            out[name] = _tensor_node(dtype, arr.shape)
        else:  # lists, None, bytes...: a Text feature holding the value as typed JSON
            out[name] = {"pythonClassName": _CLASSES["text"], "text": {}}
    return out


def _python_dtype(value: bool | int | float) -> np.dtype[Any]:
    return (
        np.dtype(bool)
        if isinstance(value, bool)
        else np.dtype(np.int64 if isinstance(value, int) else np.float32)
    )


def _tensor_node(dtype: np.dtype[Any], shape: Iterable[int]) -> dict[str, Any]:
    dims = [str(d) for d in shape]
    return {
        "pythonClassName": _CLASSES["tensor" if dims else "scalar"],
        "tensor": {"dtype": dtype.name, "encoding": "none", "shape": {"dimensions": dims} if dims else {}},
    }


def _dict_node(children: dict[str, Any]) -> dict[str, Any]:
    return {"featuresDict": {"features": children}, "pythonClassName": _CLASSES["dict"]}


def _insert(tree: dict[str, Any], path: tuple[str, ...], node: dict[str, Any]) -> None:
    for part in path[:-1]:
        child = tree.setdefault(part, _dict_node({}))
        tree = child["featuresDict"]["features"]
    tree[path[-1]] = node

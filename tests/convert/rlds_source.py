"""RLDS (TFDS TFRecord) folders for the tests, written from a small features spec the way TFDS lays
them out: ``features.json`` in TFDS's JSON, ``dataset_info.json``, and shards of
``tf.train.Example`` records framed here with ``struct`` and ``crc32c`` (not with shardstore's
framing code, so the reader is checked against an independent writer). The Example messages are
protobuf's (the class shardstore builds from TensorFlow's descriptors; the real TFDS reader checks
the layout in test_rlds_tfds.py).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
from PIL import Image

from shardstore.convert.rlds.tfrecord import example_class

T = "tensorflow_datasets.core.features."


@dataclass(frozen=True)
class Spec:
    """One leaf: path, kind (tensor/image/text), dtype, shape, image encoding."""

    path: str
    kind: str
    dtype: str = ""
    shape: tuple[int, ...] = ()
    encoding: str = ""


STEP_SPECS = [
    Spec("steps/observation/image", "image", "uint8", (6, 5, 3), "png"),
    Spec("steps/observation/wrist", "image", "uint8", (8, 8, 3), "jpeg"),
    Spec("steps/observation/state", "tensor", "float32", (4,)),
    Spec("steps/observation/joints", "tensor", "float64", (2,)),
    Spec("steps/observation/contact", "tensor", "bool", (2,)),
    Spec("steps/action", "tensor", "int16", (2, 2)),
    Spec("steps/counter", "tensor", "uint8", ()),
    Spec("steps/reward", "tensor", "float32", ()),
    Spec("steps/discount", "tensor", "float32", ()),
    Spec("steps/language_instruction", "text"),
    Spec("steps/is_first", "tensor", "bool", ()),
    Spec("steps/is_last", "tensor", "bool", ()),
    Spec("steps/is_terminal", "tensor", "bool", ()),
]
META_SPECS = [
    Spec("episode_metadata/episode_id", "tensor", "int64", ()),
    Spec("episode_metadata/file_path", "text"),
    Spec("episode_metadata/calib", "tensor", "float32", (2,)),
]
#: split -> shard -> episode lengths
LAYOUT = {"train": [[3, 1], [4], [2, 5]], "val": [[2], [3]]}


def features_json(specs: list[Spec]) -> str:
    """TFDS's JSON for a FeaturesDict with a ``steps`` Dataset."""
    root: dict[str, Any] = {}
    for s in specs:
        parts = s.path.split("/")
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _leaf(s)

    def wrap(tree: dict[str, Any], at: str) -> dict[str, Any]:
        children = {k: (v if "pythonClassName" in v else wrap(v, k)) for k, v in tree.items()}
        d = {"featuresDict": {"features": children}, "pythonClassName": T + "features_dict.FeaturesDict"}
        if at == "steps":
            return {
                "pythonClassName": T + "dataset_feature.Dataset",
                "sequence": {"feature": d, "length": "-1"},
            }
        return d

    return json.dumps(wrap(root, ""), indent=4, sort_keys=True)


def _leaf(s: Spec) -> dict[str, Any]:
    shape = {"dimensions": [str(d) for d in s.shape]} if s.shape else {}
    if s.kind == "image":
        return {
            "image": {"dtype": "uint8", "encodingFormat": s.encoding, "shape": shape},
            "pythonClassName": T + "image_feature.Image",
        }
    if s.kind == "text":
        return {"pythonClassName": T + "text_feature.Text", "text": {}}
    cls = "tensor_feature.Tensor" if s.shape else "scalar.Scalar"
    return {"pythonClassName": T + cls, "tensor": {"dtype": s.dtype, "encoding": "none", "shape": shape}}


def encode_image(arr: np.ndarray, encoding: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG" if encoding == "png" else "JPEG", quality=90)
    return buf.getvalue()


def make_episode(rng: np.random.Generator, n: int, eid: int, terminal: bool) -> dict[str, Any]:
    """Source values of one episode by feature path (steps values with a leading step axis)."""
    v: dict[str, Any] = {}
    for s in STEP_SPECS + META_SPECS:
        steps = s.path.startswith("steps/")
        lead = (n,) if steps else ()
        if s.path.endswith("is_first"):
            v[s.path] = np.arange(n) == 0
        elif s.path.endswith("is_last"):
            v[s.path] = np.arange(n) == n - 1
        elif s.path.endswith("is_terminal"):
            v[s.path] = (np.arange(n) == n - 1) & terminal
        elif s.kind == "image":
            v[s.path] = [
                encode_image(rng.integers(0, 256, s.shape, dtype=np.uint8), s.encoding) for _ in range(n)
            ]
        elif s.kind == "text":
            v[s.path] = [f"pick é {eid}.{t}" for t in range(n)] if steps else f"/data/ep{eid}.h5"
        elif s.dtype == "bool":
            v[s.path] = rng.integers(0, 2, (*lead, *s.shape)).astype(bool)
        elif np.dtype(s.dtype).kind == "f":
            v[s.path] = rng.standard_normal((*lead, *s.shape)).astype(np.float32).astype(s.dtype)
        else:
            info = np.iinfo(s.dtype)
            v[s.path] = rng.integers(max(info.min, -1000), min(info.max, 1000), (*lead, *s.shape)).astype(
                s.dtype
            )
    v["episode_metadata/episode_id"] = np.int64(eid)
    return v


def example_bytes(values: dict[str, Any], specs: list[Spec]) -> bytes:
    msg = example_class()()
    for s in specs:
        f = msg.features.feature[s.path]
        val = values[s.path]
        if s.kind != "tensor":
            f.bytes_list.value.extend(
                x.encode() if isinstance(x, str) else x for x in (val if isinstance(val, list) else [val])
            )
        elif np.dtype(s.dtype).kind == "f":
            f.float_list.value.extend(np.asarray(val, np.float32).ravel().tolist())
        else:
            f.int64_list.value.extend(np.asarray(val).astype(np.int64).ravel().tolist())
    return msg.SerializeToString(deterministic=True)


def masked(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def framed(payload: bytes) -> bytes:
    n = struct.pack("<Q", len(payload))
    return n + struct.pack("<I", masked(n)) + payload + struct.pack("<I", masked(payload))


def write_rlds_source(root: Path, name: str = "robo", seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Write ``root`` (a TFDS version folder) with the LAYOUT; return the source values per split."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    specs = STEP_SPECS + META_SPECS
    (root / "features.json").write_text(features_json(specs))
    values: dict[str, list[dict[str, Any]]] = {}
    splits = []
    eid = 0
    for split, shards in LAYOUT.items():
        values[split] = []
        nbytes = 0
        for i, lengths in enumerate(shards):
            with open(root / f"{name}-{split}.tfrecord-{i:05d}-of-{len(shards):05d}", "wb") as f:
                for n in lengths:
                    v = make_episode(rng, n, eid, terminal=eid % 2 == 0)
                    payload = example_bytes(v, specs)
                    f.write(framed(payload))
                    nbytes += len(payload)
                    values[split].append(v)
                    eid += 1
        splits.append(
            {
                "filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}",
                "name": split,
                "numBytes": str(nbytes),
                "shardLengths": [str(len(s)) for s in shards],
            }
        )
    info = {
        "fileFormat": "tfrecord",
        "moduleName": "robo.robo_dataset_builder",
        "name": name,
        "splits": splits,
        "version": "1.0.0",
        "description": "test data",
    }
    (root / "dataset_info.json").write_text(json.dumps(info, indent=2, sort_keys=True))
    return values

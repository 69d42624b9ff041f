"""RLDS exports against the real reader: ``tensorflow_datasets`` (with ``tensorflow-cpu``) in a venv
of its own (``.venv-tfds``, ``make tfds``; ``SHARDSTORE_TFDS_VENV`` names another) loads the
folders with ``tfds.builder_from_directory(...).as_dataset()`` and every value of every step is
compared. Skips when that venv is missing, except in CI, where it fails.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ci import in_ci
from PIL import Image
from rlds_source import META_SPECS, STEP_SPECS, write_rlds_source

from shardstore.convert.rlds import export_rlds, read_rlds, write_rlds

ROOT = Path(__file__).resolve().parents[2]
TFDS_PYTHON = Path(os.environ.get("SHARDSTORE_TFDS_VENV", ROOT / ".venv-tfds")) / "bin" / "python"
PEER = Path(__file__).with_name("tfds_peer.py")

pytestmark = pytest.mark.slow


def tfds_load(folder: Path, tmp_path: Path) -> dict[str, np.ndarray]:
    """Every value of the TFDS folder as the real tfds reads it (see tfds_peer.py)."""
    if not TFDS_PYTHON.exists():
        why = f"{TFDS_PYTHON} is missing (run `make tfds`)"
        if in_ci():
            pytest.fail(why + "; CI must run the TFDS reader tests")
        pytest.skip(why)
    dest = tmp_path / f"{folder.parent.name}.npz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [str(TFDS_PYTHON), str(PEER), str(folder), str(dest)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with np.load(dest) as z:
        return {k: z[k] for k in z.files}


def decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_tfds_reads_the_export(tmp_path: Path) -> None:
    src = tmp_path / "src" / "robo" / "1.0.0"
    values = write_rlds_source(src)
    out = tmp_path / "export" / "robo" / "1.0.0"
    write_rlds(read_rlds(str(src)), str(out))
    got = tfds_load(out, tmp_path)
    for split, episodes in values.items():
        for i, want in enumerate(episodes):
            n = len(want["steps/is_first"])
            assert int(got[f"{split}/{i}/__len__"]) == n
            for s in STEP_SPECS + META_SPECS:
                key = f"{split}/{i}/{s.path}"
                value = got[key]
                if s.kind == "image":
                    assert value.shape == (n, *s.shape) and value.dtype == np.uint8
                    ours = np.stack([decoded(b) for b in want[s.path]])
                    if s.encoding == "png":
                        np.testing.assert_array_equal(value, ours, err_msg=key)
                    else:  # TensorFlow's JPEG decoder (fast IDCT, its own upsampling) and Pillow's differ a little
                        diff = np.abs(value.astype(int) - ours)
                        assert diff.max() <= 12 and diff.mean() < 2, key
                elif s.kind == "text":
                    texts = want[s.path] if isinstance(want[s.path], list) else want[s.path]
                    assert value.astype(object).tolist() == (
                        [t.encode() for t in texts] if isinstance(texts, list) else texts.encode()
                    ), key
                else:
                    assert value.dtype == np.dtype(s.dtype), key
                    np.testing.assert_array_equal(value, want[s.path], err_msg=key)


def test_import_of_a_tfds_written_folder(tmp_path: Path) -> None:
    """A folder TFDS wrote itself (its own serializer, unordered map keys) reads as TFDS reads it and
    exports to Examples that parse equal."""
    if not TFDS_PYTHON.exists():
        tfds_load(tmp_path, tmp_path)  # skips or fails as above
    data = tmp_path / "data"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    res = subprocess.run(
        [str(TFDS_PYTHON), "-c", WRITE_WITH_TFDS, str(data)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    folder = data / "tfdsmade" / "1.0.0"
    theirs = tfds_load(folder, tmp_path)
    stream = read_rlds(str(folder))
    for ep in stream.episodes:
        split, i = ep.split, ep.index if ep.split == "train" else ep.index - 3
        assert int(theirs[f"{split}/{i}/__len__"]) == len(ep.steps["action"])
        np.testing.assert_array_equal(ep.steps["action"], theirs[f"{split}/{i}/steps/action"])
        assert ep.steps["action"].dtype == np.int16
        np.testing.assert_array_equal(
            ep.steps["observation.state"], theirs[f"{split}/{i}/steps/observation/state"]
        )
        np.testing.assert_array_equal(
            np.stack([decoded(b) for b in ep.steps["observation.image"]]),
            theirs[f"{split}/{i}/steps/observation/image"],
        )
        assert ep.terminal == bool(theirs[f"{split}/{i}/steps/is_terminal"][-1])
        assert (
            ep.metadata["episode_metadata"]["file_path"].encode()
            == theirs[f"{split}/{i}/episode_metadata/file_path"]
        )
    out = tmp_path / "back" / "1.0.0"
    write_rlds(read_rlds(str(folder)), str(out))
    assert (out / "features.json").read_bytes() == (folder / "features.json").read_bytes()
    for shard in sorted(folder.glob("*.tfrecord-*")):
        assert parsed(out / shard.name) == parsed(shard), shard.name


def parsed(path: Path) -> list[Any]:
    from shardstore.convert.rlds.tfrecord import iter_records, parse_example

    with open(path, "rb") as f:
        return [parse_example(r.payload, str(path), r.index) for r in iter_records(f, str(path))]


WRITE_WITH_TFDS = """
import sys
import numpy as np, tensorflow_datasets as tfds
f = tfds.features
feats = f.FeaturesDict({
  "steps": f.Dataset({
     "observation": f.FeaturesDict({"image": f.Image(shape=(8, 8, 3), encoding_format="png"),
                                  "state": f.Tensor(shape=(3,), dtype=np.float64)}),
     "action": f.Tensor(shape=(2, 2), dtype=np.int16),
     "reward": f.Scalar(dtype=np.float32),
     "is_first": f.Scalar(dtype=np.bool_), "is_last": f.Scalar(dtype=np.bool_), "is_terminal": f.Scalar(dtype=np.bool_),
     "language_instruction": f.Text(),
  }),
  "episode_metadata": f.FeaturesDict({"file_path": f.Text(), "episode_id": f.Scalar(dtype=np.int64)}),
})
rng = np.random.default_rng(0)
def gen(first, n):
  for e in range(first, first + n):
    L = 2 + e
    steps = [{"observation": {"image": rng.integers(0, 255, (8, 8, 3), dtype=np.uint8), "state": rng.standard_normal(3)},
              "action": rng.integers(-9, 9, (2, 2)).astype(np.int16), "reward": 0.5, "is_first": i == 0,
              "is_last": i == L - 1, "is_terminal": i == L - 1 and e % 2 == 0, "language_instruction": f"task {e}"}
             for i in range(L)]
    yield e, {"steps": steps, "episode_metadata": {"file_path": f"/data/{e}", "episode_id": e}}
tfds.dataset_builders.store_as_tfds_dataset(name="tfdsmade", version="1.0.0", features=feats, data_dir=sys.argv[1],
    split_datasets={"train": list(gen(0, 3)), "val": list(gen(3, 2))}, disable_shuffling=True)
"""


def test_tfds_reads_lerobot_to_rlds(tmp_path: Path) -> None:
    """The LeRobot -> RLDS output loads in tfds, with the mapping spec's feature spec and our values."""
    from test_lerobot_rlds_real import make_source

    ds = make_source(tmp_path, "v3.0")
    out = tmp_path / "rlds" / "lr" / "1.0.0"
    export_rlds(str(ds), str(out))
    got = tfds_load(out, tmp_path)
    spec = json.loads(str(got["__features__"]))["content"]["features"]  # as TFDS built them

    def leaf(node: dict[str, Any]) -> tuple[str, str, list[str]]:
        cls = node["pythonClassName"].rsplit(".", 1)[1]
        body = node.get("tensor") or node.get("image") or {}
        return cls, body.get("dtype", ""), body.get("shape", {}).get("dimensions", [])

    meta = {k: leaf(v) for k, v in spec["episode_metadata"]["featuresDict"]["features"].items()}
    assert meta == {
        "episode_id": ("Scalar", "int64", []),
        "source_dataset_version": ("Text", "", []),
        "source_episode_index": ("Scalar", "int64", []),
        "tasks": ("Text", "", []),
        "language_instruction": ("Text", "", []),
        "file_path": ("Text", "", []),
    }
    steps = spec["steps"]["sequence"]["feature"]["featuresDict"]["features"]
    obs = {k: leaf(v) for k, v in steps.pop("observation")["featuresDict"]["features"].items()}
    assert obs == {
        "image": ("Image", "uint8", ["16", "16", "3"]),
        "image_front": ("Image", "uint8", ["16", "16", "3"]),
        "state": ("Tensor", "float32", ["6"]),
    }
    assert {k: leaf(v) for k, v in steps.items()} == {
        "action": ("Tensor", "float32", ["6"]),
        "reward": ("Scalar", "float32", []),
        "discount": ("Scalar", "float32", []),
        "is_first": ("Scalar", "bool", []),
        "is_last": ("Scalar", "bool", []),
        "is_terminal": ("Scalar", "bool", []),
        "language_instruction": ("Text", "", []),
    }
    for i, ep in enumerate(read_rlds(str(out)).episodes):
        p = f"train/{i}/steps"
        np.testing.assert_array_equal(got[f"{p}/observation/state"], ep.steps["observation.state"])
        np.testing.assert_array_equal(got[f"{p}/action"], ep.steps["action"])
        np.testing.assert_array_equal(
            got[f"{p}/observation/image_front"],
            np.stack([decoded(b) for b in ep.steps["observation.image_front"]]),
        )
        assert got[f"{p}/is_first"].tolist() == [True] + [False] * (len(ep.steps["action"]) - 1)
        assert int(got[f"train/{i}/episode_metadata/episode_id"]) == i

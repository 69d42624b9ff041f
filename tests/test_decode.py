"""``decode``: the extension registry, pickle opt-in, custom decoder maps, field maps into typed
samples (dataset.yaml's or given), and the part descriptions of ``shardstore preview``."""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
import yaml
from PIL import Image

import shardstore
from shardstore import nvmeta
from shardstore.decode import access_field, decode_part, describe_part, parse_field_map
from shardstore.errors import ConfigError, DecodeError, MissingExtraError, PickleNotAllowedError
from shardstore.inspection import preview
from shardstore.samples import (
    SAMPLE_CLASSES,
    BaseSample,
    CaptioningSample,
    ImageClassificationSample,
    ImageSample,
    Sample,
    TextSample,
    VQASample,
    own_fields,
)


def _image_bytes(fmt: str, mode: str = "RGB", size: tuple[int, int] = (7, 5)) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(0)
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    pixels = rng.integers(0, 255, (size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels[:, :, 0] if mode == "L" else pixels, mode)
    buf = io.BytesIO()
    image.save(buf, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buf.getvalue(), np.asarray(Image.open(io.BytesIO(buf.getvalue())))


# ----- the registry -------------------------------------------------------------------------------


def test_basic_types() -> None:
    assert decode_part("txt", "héllo".encode()) == "héllo"
    assert decode_part("cls", b" 42\n") == 42
    assert decode_part("json", b'{"a": [1, 2]}') == {"a": [1, 2]}
    assert decode_part("msgpack", msgpack.packb({"x": [1, "y"]})) == {"x": [1, "y"]}
    assert decode_part("mp4", b"\x00\x00\x00 ftypisom") == b"\x00\x00\x00 ftypisom"
    assert decode_part("unknownext", b"\x01\x02") == b"\x01\x02"


def test_numpy_arrays_without_pickle() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = io.BytesIO()
    np.save(buf, arr)
    assert np.array_equal(decode_part("npy", buf.getvalue()), arr)
    buf = io.BytesIO()
    np.savez(buf, a=arr, b=np.array([1, 2]))
    got = decode_part("npz", buf.getvalue())
    assert set(got) == {"a", "b"} and np.array_equal(got["a"], arr)
    buf = io.BytesIO()
    np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DecodeError, match="npy"):  # an object array would need pickle: refused
        decode_part("npy", buf.getvalue())


@pytest.mark.parametrize(
    "part,fmt,mode", [("png", "PNG", "RGB"), ("PNG", "PNG", "RGBA"), ("jpg", "JPEG", "RGB"), ("jpeg", "JPEG", "L"), ("webp", "WEBP", "RGB"), ("seg.png", "PNG", "L")]
)
def test_images_decode_to_numpy(part: str, fmt: str, mode: str) -> None:
    data, want = _image_bytes(fmt, mode)
    got = decode_part(part, data)
    assert isinstance(got, np.ndarray) and got.dtype == np.uint8
    assert got.shape == want.shape and np.array_equal(got, want)
    assert got.flags.writeable  # torch.as_tensor would warn about a read-only array


def test_palette_images_become_rgb() -> None:
    image = Image.new("P", (4, 3))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    assert decode_part("png", buf.getvalue()).shape == (3, 4, 3)


def test_missing_pillow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = _image_bytes("PNG")
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` now fails as if not installed
    with pytest.raises(MissingExtraError, match=r"shardstore\[images\]"):
        decode_part("png", data)


def test_pickle_is_opt_in() -> None:
    data = pickle.dumps({"a": 1})
    for part in ("pyd", "pickle", "x.pkl"):
        with pytest.raises(PickleNotAllowedError, match="allow_pickle"):
            decode_part(part, data, where="s.tar", key="k")
        assert decode_part(part, data, allow_pickle=True) == {"a": 1}


def test_custom_map_wins_by_part_then_extension() -> None:
    decoders = {"txt": lambda b: b.decode().upper(), "a.txt": lambda b: "part-specific", "json": None}
    assert decode_part("txt", b"abc", decoders) == "ABC"  # type: ignore[arg-type]
    assert decode_part("a.txt", b"abc", decoders) == "part-specific"  # type: ignore[arg-type]
    assert decode_part("json", b"{}", decoders) == b"{}"  # type: ignore[arg-type]
    assert decode_part("cls", b"3", decoders) == 3  # type: ignore[arg-type]


def test_bad_bytes_raise_decode_error_naming_the_member() -> None:
    with pytest.raises(DecodeError) as info:
        decode_part("json", b"{nope", where="parts/a.tar", key="k7")
    assert "parts/a.tar" in str(info.value) and "k7.json" in str(info.value)
    with pytest.raises(DecodeError, match="jpg"):
        decode_part("jpg", b"not an image")


# ----- decoding through a dataset -------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def vqa_root(tmp_path: Path) -> Path:
    """One shard: images as png or jpg (alternating), nested json, a label, a pickle part."""
    root = tmp_path / "vqa"
    root.mkdir()
    with tarfile.open(root / "shard-0.tar", "w") as tar:
        for i in range(6):
            key = f"q{i:03d}"
            image, _ = _image_bytes("PNG" if i % 2 else "JPEG", size=(8 + i, 6))
            _add(tar, f"{key}.{'png' if i % 2 else 'jpg'}", image)
            meta = {"question": f"what is {i}?", "answers": [f"a{i}", "b"], "weights": [0.75, 0.25], "nested": {"deep": [i, -i]}}
            _add(tar, f"{key}.json", json.dumps(meta).encode())
            _add(tar, f"{key}.cls", str(i % 3).encode())
            _add(tar, f"{key}.pyd", pickle.dumps({"i": i}))
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    return root


def test_decode_true_decodes_every_part_but_pickle(vqa_root: Path) -> None:
    raw = shardstore.open(str(vqa_root))
    assert isinstance(raw[0]["json"], bytes)
    ds = shardstore.open(str(vqa_root), decode=True)
    with pytest.raises(PickleNotAllowedError) as info:
        ds[0]
    assert "q000.pyd" in str(info.value) and "shard-0.tar" in str(info.value)
    ds = shardstore.open(str(vqa_root), decode={"pyd": None})
    sample = ds[1]
    assert isinstance(sample, Sample) and sample["__key__"] == "q001"
    assert sample["png"].shape == (6, 9, 3) and sample["cls"] == 1 and sample["json"]["answers"] == ["a1", "b"]
    assert sample["pyd"] == raw[1]["pyd"]
    ds = shardstore.open(str(vqa_root), decode=True, allow_pickle=True)
    assert ds.get("q004")["pyd"] == {"i": 4}
    assert [s["cls"] for s in ds.iter()] == [0, 1, 2, 0, 1, 2]


def test_explicit_field_map_with_alternatives_and_nesting(vqa_root: Path) -> None:
    fmap = {
        "image": "jpg,png",
        "context": "json[question]",
        "answers": "json[answers]",
        "answer_weights": "json[weights]",
    }
    ds = shardstore.open(str(vqa_root), field_map=fmap)
    samples = list(ds.iter())
    assert all(type(s) is VQASample for s in samples)
    s3 = samples[3]
    assert s3.__key__ == "q003" and s3.context == "what is 3?" and s3.answers == ["a3", "b"]
    assert s3.image.shape == (6, 11, 3) and s3.answer_weights == [0.75, 0.25]
    assert s3.__restore_key__ == ("Webdataset", 3)
    (source,) = s3.__sources__  # type: ignore[misc]
    assert source.shard_name == "shard-0.tar" and source.file_names == ("q003.json", "q003.png")
    # nested list access, and an int label via cls; the type is inferred from the fields
    ds = shardstore.open(str(vqa_root), field_map={"image": "png,jpg", "label": "json[nested][deep][1]"})
    s = ds[2]
    assert type(s) is ImageClassificationSample and s.label == -2 and s.label_name is None


def test_field_map_type_choice(vqa_root: Path) -> None:
    assert type(shardstore.open(str(vqa_root), field_map={"image": "jpg,png"})[0]) is ImageSample
    assert type(shardstore.open(str(vqa_root), field_map={"text": "json[question]"})[0]) is TextSample
    named = shardstore.open(str(vqa_root), field_map={"__class__": "ImageClassificationSample", "image": "jpg,png"})
    assert type(named[0]) is ImageClassificationSample
    for bad in (
        {"image": "jpg", "colour": "json"},  # no type has `colour`
        {"__class__": "CaptioningSample", "image": "jpg"},  # caption is required
        {"__class__": "NoSuchSample", "image": "jpg"},
        {"image": "jpg[", "caption": "txt"},  # bad syntax
        {"image": ""},
    ):
        with pytest.raises(ConfigError):
            shardstore.open(str(vqa_root), field_map=bad)[0]


def test_field_map_that_finds_nothing(vqa_root: Path) -> None:
    ds = shardstore.open(str(vqa_root), field_map={"image": "jpg", "caption": "json[question]"})
    assert ds[0].caption == "what is 0?"
    with pytest.raises(DecodeError) as info:  # q001 has a png, not a jpg
        ds[1]
    assert "q001" in str(info.value) and "'jpg'" in str(info.value)


def test_field_access_rules() -> None:
    sample = {"__key__": "k", "json": {"a": [{"b": 5}], "s": "x"}, "txt": "t"}
    assert access_field(sample, parse_field_map({"f": "json[a][0][b]"})["f"]) == 5
    assert access_field(sample, parse_field_map({"f": "png,txt"})["f"]) == "t"
    assert access_field(sample, parse_field_map({"f": "json[a][7],json[s]"})["f"]) == "x"
    assert parse_field_map({"f": "json[a][0],txt"})["f"] == [["json", "a", "0"], ["txt"]]
    with pytest.raises(DecodeError):
        access_field(sample, parse_field_map({"f": "json[s][0]"})["f"])


def _write_dataset_yaml(root: Path, content: dict[str, object]) -> None:
    (root / ".nv-meta" / "dataset.yaml").write_text(yaml.safe_dump(content, sort_keys=False))


def test_field_map_true_uses_dataset_yaml(make_shards: Callable[..., Path]) -> None:
    root = make_shards(shards=1, samples=4, real_images=True, min_kb=1, max_kb=2)
    shardstore.prepare(
        str(root), split_ratio="1,0,0", num_workers=1, sample_type="CaptioningSample", field_map={"image": "jpg", "caption": "txt"}
    )
    ds = shardstore.open(str(root), field_map=True)
    s = ds[2]
    assert type(s) is CaptioningSample and s.caption.startswith("caption 0 2 ")
    assert s.image.ndim == 3 and s.image.shape[2] == 3
    assert ds.get("s00000_000002").caption == s.caption
    # decode=True alone leaves the raw mapping form (decoded), never a typed sample
    plain = shardstore.open(str(root), decode=True)[2]
    assert isinstance(plain, Sample) and plain["txt"] == s.caption and np.array_equal(plain["jpg"], s.image)
    # Energon's older form names the dataset class instead of the sample class
    _write_dataset_yaml(root, {"__module__": "megatron.energon", "__class__": "CaptioningWebdataset", "field_map": {"image": "jpg", "caption": "txt"}})
    assert type(shardstore.open(str(root), field_map=True)[0]) is CaptioningSample
    # the crude form has no field map: decoded mappings
    _write_dataset_yaml(root, {"__module__": "megatron.energon", "__class__": "CrudeWebdataset"})
    crude = shardstore.open(str(root), field_map=True)[0]
    assert isinstance(crude, Sample) and isinstance(crude["json"], dict)
    # a sample_loader is Python code from the dataset: refused
    _write_dataset_yaml(root, {"sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"}, "sample_loader": "x.py:load", "part_filter": "x.py:parts"})
    with pytest.raises(ConfigError, match="sample_loader"):
        shardstore.open(str(root), field_map=True)[0]
    (root / ".nv-meta" / "dataset.yaml").unlink()
    with pytest.raises(ConfigError, match="no dataset.yaml"):
        shardstore.open(str(root), field_map=True)[0]


def test_subflavors_from_dataset_yaml(make_shards: Callable[..., Path]) -> None:
    root = make_shards(shards=1, samples=2, min_kb=1, max_kb=1)
    shardstore.prepare(str(root), split_ratio="1,0,0", num_workers=1)
    _write_dataset_yaml(
        root,
        {"sample_type": {"__module__": "megatron.energon", "__class__": "TextSample"}, "field_map": {"text": "txt"}, "subflavors": {"source": "synthetic"}},
    )
    s = shardstore.open(str(root), field_map=True)[1]
    assert type(s) is TextSample and s.__subflavors__ == {"source": "synthetic"}


# ----- the sample classes --------------------------------------------------------------------------


def test_sample_classes_match_nvmeta_sample_types() -> None:
    for name, spec in nvmeta.SAMPLE_TYPES.items():
        if name == "CrudeWebdataset":
            assert name not in SAMPLE_CLASSES
            continue
        cls = SAMPLE_CLASSES[name]
        assert own_fields(cls) == list(spec), name
        assert name == "Sample" or cls.__name__ == name
        assert [f.name for f in dataclasses.fields(cls)][:4] == ["__key__", "__restore_key__", "__subflavors__", "__sources__"]
    s = CaptioningSample(__key__="k", image=None, caption="c")
    assert isinstance(s, BaseSample) and pickle.loads(pickle.dumps(s)) == s


# ----- descriptions and preview ----------------------------------------------------------------------


def test_describe_part() -> None:
    data, _ = _image_bytes("PNG", "RGBA", size=(10, 4))
    assert describe_part("png", data) == f"image PNG 10x4 RGBA, shape (4, 10, 4), {len(data)} bytes"
    assert describe_part("txt", b"hello") == "'hello'"
    assert describe_part("json", b'{"a":1}') == '{"a": 1}'
    assert describe_part("cls", b"7") == "7"
    assert describe_part("mp4", b"1234") == "4 bytes"
    assert describe_part("jpg", b"garbage") == "7 bytes, not a readable image"
    assert describe_part("json", b"{bad") == "4 bytes (does not decode as .json)"
    assert describe_part("txt", b"x" * 500, width=20) == "'" + "x" * 16 + "..."
    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 3), dtype=np.int16))
    assert describe_part("npy", buf.getvalue()) == "array shape (2, 3) dtype int16"


def test_preview_and_cli(vqa_root: Path) -> None:
    items = list(preview(str(vqa_root), n=2))
    assert [i.key for i in items] == ["q000", "q001"]
    assert items[1].parts["png"].startswith("image PNG 9x6 RGB, shape (6, 9, 3)")
    assert items[1].parts["json"].startswith('{"question": "what is 1?"')
    assert items[1].parts["pyd"].endswith("bytes")  # never unpickled for a preview
    out = subprocess.run(
        [str(Path(sys.executable).parent / "shardstore"), "preview", str(vqa_root), "-n", "3", "--split", "train"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("q00") == 3 and "q003" not in out.stdout
    assert "image JPEG 8x6 RGB, shape (6, 8, 3)" in out.stdout and "what is 2?" in out.stdout
    bad = subprocess.run(
        [str(Path(sys.executable).parent / "shardstore"), "preview", str(vqa_root.parent)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 1 and "prepare" in bad.stderr and "Traceback" not in bad.stderr

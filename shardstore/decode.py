"""Turning a sample's bytes into values: an extension -> decoder registry, Energon's field maps,
and short human descriptions of parts (``shardstore preview`` in ``inspection`` shows them).

The extension of a part is the last dotted component of its name, lower-cased (``seg.png`` ->
``png``), as webdataset (and so Energon) decides it. Decoders: json, txt (str), cls (int),
npy/npz (numpy, ``allow_pickle=False``), images (numpy arrays via Pillow, the ``images`` extra; JPEGs
through simplejpeg when installed, bit-equal and ~3x faster),
msgpack; videos and unknown extensions stay bytes. Pickle runs code from the data, so ``pickle``,
``pyd`` and ``pkl`` parts decode only with ``allow_pickle=True``, and then through the restricted
unpickler of ``safepickle`` (numpy arrays, scalars, dtypes and builtin types; anything else is
refused by name). A caller who trusts more passes its own decoder: ``decode={"pickle": pickle.loads}``.

A field map (Energon's syntax: ``{"image": "jpg,png", "caption": "json[meta][0]"}``) picks values
out of the decoded parts and builds the typed sample of ``shardstore.samples``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from . import safepickle
from .errors import ConfigError, DecodeError, MissingExtraError, PickleNotAllowedError, ShardstoreError
from .loaders import DatasetCode, refuse_dataset_code
from .samples import BaseSample, Sample, SourceInfo, own_fields, sample_class

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = [
    "Decoder",
    "DEFAULT_DECODERS",
    "PICKLE_EXTENSIONS",
    "extension",
    "decode_part",
    "decode_sample",
    "parse_field_map",
    "access_field",
    "SamplePlan",
    "plan_for",
    "finish_sample",
    "describe_part",
    "describe_sample",
]

#: ``bytes -> value``; ``None`` in a custom map means "leave this part as bytes".
Decoder = Callable[[bytes], Any]


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _int(data: bytes) -> int:
    return int(data.decode("utf-8").strip())


def _json(data: bytes) -> Any:
    return json.loads(data)


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)  # type: ignore[no-any-return]


def _npz(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError as e:
        raise MissingExtraError(f"decoding images needs Pillow: pip install 'shardstore[images]' ({e})") from e
    return Image


def _image(data: bytes) -> np.ndarray:
    """An image as a numpy array: (H, W) for grey, (H, W, 3) RGB or (H, W, 4) RGBA, as stored.

    Writable (``np.array``, not ``np.asarray``, whose array over Pillow's bytes is read-only):
    ``torch.as_tensor`` and in-place transforms take it without a copy or a warning.
    """
    image = _pillow().open(io.BytesIO(data))
    if image.mode not in ("L", "RGB", "RGBA", "I;16", "I", "F"):
        alpha = image.mode in ("LA", "PA", "RGBa") or "transparency" in image.info
        image = image.convert("RGBA" if alpha else "RGB")
    return np.array(image)


#: JPEG colour spaces (``simplejpeg.decode_jpeg_header``'s names) that simplejpeg decodes to the
#: same array as Pillow, and the target it is asked for; CMYK and YCCK files go to Pillow.
_SIMPLEJPEG_SPACES = {"YCbCr": "RGB", "RGB": "RGB", "Gray": "GRAY"}


@cache
def _simplejpeg() -> Any:
    """The ``simplejpeg`` module, or None when it is not installed (Pillow then decodes JPEGs)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def _jpeg(data: bytes) -> np.ndarray:
    """A JPEG as ``_image`` decodes it, but through simplejpeg when it is installed: the same
    libjpeg-turbo decode (ISLOW IDCT, fancy upsampling, as Pillow sets it), without Pillow's
    per-image file object, plugin lookup and RGB -> RGBX -> RGB copies: ~50 us instead of ~160 us for a
    128x128 frame (tools/bench/rlds.py). The arrays are equal to Pillow's bit for bit
    (tests/test_decode_jpeg.py pins it for every chroma subsampling, grey and progressive files).

    simplejpeg's strict mode refuses what libjpeg only warns about (extra bytes, a premature end);
    such files, CMYK/YCCK ones and non-JPEG bytes under a JPEG name go to Pillow, which decodes or
    names the damage exactly as before.
    """
    sj = _simplejpeg()
    if sj is not None:
        try:
            target = _SIMPLEJPEG_SPACES.get(sj.decode_jpeg_header(data)[2])
            if target is not None:
                out = sj.decode_jpeg(data, colorspace=target)
                return out.reshape(out.shape[:2]) if target == "GRAY" else out  # type: ignore[no-any-return]
        except ValueError:
            pass
    return _image(data)


def _msgpack(data: bytes) -> Any:
    try:
        import msgpack
    except ImportError as e:
        raise MissingExtraError(f"decoding msgpack needs msgpack: pip install msgpack ({e})") from e
    return msgpack.unpackb(data, raw=False)


def _bytes(data: bytes) -> bytes:
    return data


_IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "jpe", "jfif", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm", "pbm", "pnm")
_VIDEO_EXTENSIONS = ("mp4", "avi", "mov", "mkv", "webm", "flac", "mp3", "wav", "ogg", "m4a")

#: Extension -> decoder, the defaults of ``decode=True`` (webdataset's names for the same things).
DEFAULT_DECODERS: dict[str, Decoder] = {
    **dict.fromkeys(("txt", "text", "transcript"), _text),
    **dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "id"), _int),
    **dict.fromkeys(("json", "jsn"), _json),
    "npy": _npy,
    "npz": _npz,
    **dict.fromkeys(("msgpack", "mpk", "mp"), _msgpack),
    **dict.fromkeys(_IMAGE_EXTENSIONS, _image),
    **dict.fromkeys(("jpg", "jpeg", "jpe", "jfif"), _jpeg),
    **dict.fromkeys(_VIDEO_EXTENSIONS, _bytes),
}
#: Extensions that need unpickling: decoded only when ``allow_pickle=True`` (by ``safepickle.loads``).
PICKLE_EXTENSIONS = frozenset({"pickle", "pyd", "pkl"})


def extension(part: str) -> str:
    """The extension that picks a part's decoder: its last dotted component, lower-cased."""
    return part.rsplit(".", 1)[-1].lower()


def _decoder(part: str, custom: Mapping[str, Decoder | None] | None, allow_pickle: bool) -> Decoder | None:
    ext = extension(part)
    if custom:
        for name in (part, ext):
            if name in custom:
                return custom[name]
    if ext in PICKLE_EXTENSIONS:
        if not allow_pickle:
            raise PickleNotAllowedError(
                f"part {part!r} would need pickle to decode, which runs code from the data; "
                "pass allow_pickle=True if you trust this dataset",
                member=part,
            )
        return safepickle.loads
    return DEFAULT_DECODERS.get(ext)


def decode_part(
    part: str,
    data: bytes,
    decoders: Mapping[str, Decoder | None] | None = None,
    *,
    allow_pickle: bool = False,
    where: str | None = None,
    key: str | None = None,
) -> Any:
    """Decode one part's bytes by its extension; ``decoders`` (by part name or extension) win.

    Raises ``PickleNotAllowedError``, ``MissingExtraError`` (Pillow, msgpack), or ``DecodeError``
    naming ``where`` (the shard) and the member when the bytes are not what the extension says.
    """
    member = f"{key}.{part}" if key is not None else part
    try:
        fn = _decoder(part, decoders, allow_pickle)
    except PickleNotAllowedError as e:
        raise PickleNotAllowedError(e.detail, path=where, member=member) from None
    if fn is None:
        return data
    try:
        return fn(data)
    except ShardstoreError as e:
        if e.path is None and e.member is None:  # a decoder's own error learns where it happened
            raise type(e)(e.detail, path=where, member=member, offset=e.offset) from None
        raise
    except Exception as e:  # noqa: BLE001 - any decoder failure becomes one typed error
        raise DecodeError(f"cannot decode as .{extension(part)}: {type(e).__name__}: {e}", path=where, member=member) from e


def decode_sample(
    sample: Mapping[str, Any],
    decoders: Mapping[str, Decoder | None] | None = None,
    *,
    allow_pickle: bool = False,
    parts: set[str] | None = None,
) -> Sample:
    """A copy of ``sample`` with its parts decoded (only ``parts`` if given; the rest stay bytes)."""
    out = Sample(sample)
    where, key = sample.get("__shard__"), sample.get("__key__")
    for name, value in sample.items():
        if name.startswith("__") or not isinstance(value, (bytes, bytearray, memoryview)):
            continue
        if parts is None or name in parts:
            out[name] = decode_part(name, bytes(value), decoders, allow_pickle=allow_pickle, where=where, key=key)
    return out


# ----- field maps ---------------------------------------------------------------------------------

_OPTION_RE = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]+\])*)$")

#: One way to get a field: part name followed by keys/indices, e.g. ``["json", "a", "0"]``.
Access = list[str]


def parse_field_map(field_map: Mapping[str, str]) -> dict[str, list[Access]]:
    """``{"image": "jpg,png", "caption": "json[a][0]"}`` -> ``{"image": [["jpg"], ["png"]], "caption": [["json", "a", "0"]]}``."""
    out: dict[str, list[Access]] = {}
    for field, spec in field_map.items():
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"field map value for {field!r} must be a part name, got {spec!r}", member=field)
        options = []
        for option in spec.split(","):
            m = _OPTION_RE.match(option.strip())
            if m is None:
                raise ConfigError(f"invalid field access {option!r} (use part, part[key][0], or a,b)", member=field)
            options.append([m.group(1)] + re.findall(r"\[([^\[\]]+)\]", m.group(2)))
        out[field] = options
    return out


_MISSING = object()


def _follow(value: Any, path: Access) -> Any:
    for step in path:
        if isinstance(value, Mapping):
            value = value.get(step, _MISSING)
        elif isinstance(value, (list, tuple, np.ndarray)):
            try:
                value = value[int(step)]
            except (ValueError, IndexError):
                return _MISSING
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def access_field(sample: Mapping[str, Any], options: list[Access]) -> Any:
    """The first option that resolves in ``sample`` (Energon's ``a,b`` alternatives).

    Raises ``DecodeError`` naming the sample and the parts it has when none does.
    """
    for path in options:
        value = _follow(sample, path)
        if value is not _MISSING:
            return value
    tried = ",".join(p[0] + "".join(f"[{s}]" for s in p[1:]) for p in options)
    parts = [k for k in sample if not str(k).startswith("__")]
    raise DecodeError(f"field map {tried!r} finds nothing; the sample has parts {parts}", member=sample.get("__key__"))


@dataclass(frozen=True)
class SamplePlan:
    """What ``finish_sample`` does to each sample of a dataset, worked out once per dataset."""

    decoders: Mapping[str, Decoder | None] | None
    allow_pickle: bool
    sample_cls: type[BaseSample] | None
    fields: dict[str, list[Access]] | None
    subflavors: dict[str, Any] | None
    dataset_path: str
    #: The dataset's own sample_loader and part_filter (``trust_dataset_code=True`` only).
    code: DatasetCode | None = None

    @property
    def parts(self) -> set[str] | None:
        """Parts the field map reads (the only ones decoded when there is one), else None (all)."""
        if self.fields is None:
            return None
        return {option[0] for options in self.fields.values() for option in options}


def _yaml_type(dataset_yaml: Mapping[str, Any] | None, where: str) -> tuple[str | None, dict[str, str] | None]:
    """(sample class name, field map) from dataset.yaml; (None, None) for the crude form."""
    if not dataset_yaml:
        raise ConfigError("the dataset has no dataset.yaml: pass field_map={...} instead of True", path=where)
    if "sample_loader" in dataset_yaml:
        raise refuse_dataset_code(where)
    if isinstance(dataset_yaml.get("sample_type"), Mapping):
        name = str(dataset_yaml["sample_type"].get("__class__"))
    else:
        name = str(dataset_yaml.get("__class__", ""))
        if name == "CrudeWebdataset":
            return None, None
        if name.endswith("Webdataset"):  # Energon's older form: CaptioningWebdataset -> CaptioningSample
            name = name[: -len("Webdataset")] + "Sample"
    fmap = dataset_yaml.get("field_map")
    if not isinstance(fmap, Mapping):
        raise ConfigError("dataset.yaml has no field_map", path=where, member="field_map", noun="key")
    return name, {str(k): str(v) for k, v in fmap.items()}


def _infer_type(fields: set[str]) -> str:
    """The sample class a map's fields fit best: all required fields given, no unknown one, fewest extras."""
    from . import nvmeta

    fitting = []
    for name, spec in nvmeta.SAMPLE_TYPES.items():
        names = {f for f, _ in spec}
        required = {f for f, req in spec if req}
        if spec and required <= fields <= names:
            fitting.append((len(names), name))
    if not fitting:
        raise ConfigError(
            f"no sample type has the fields {sorted(fields)}; name one with '__class__' in the field map",
            member="field_map", noun="key",
        )
    return min(fitting)[1]


def _check_fields(cls: type[BaseSample], fields: set[str], where: str) -> None:
    spec = own_fields(cls)
    unknown = fields - {f for f, _ in spec}
    missing = {f for f, req in spec if req} - fields
    if unknown or missing:
        raise ConfigError(
            f"field map does not fit {cls.__name__} (fields {[f for f, _ in spec]}): "
            + (f"unknown {sorted(unknown)} " if unknown else "")
            + (f"missing {sorted(missing)}" if missing else ""),
            path=where,
            member="field_map", noun="key",
        )


def plan_for(ds: Dataset) -> SamplePlan:
    """Resolve ``decode``, ``field_map`` and ``dataset.yaml`` into a ``SamplePlan``.

    ``field_map=True`` takes sample type and map from ``dataset.yaml``; a dict is used as given
    (its sample type: ``"__class__"`` in the map, else dataset.yaml's when the map fits it, else
    the type whose fields it fits). Raises ``ConfigError`` for a map that fits no type.
    """
    decoders = ds.decode if isinstance(ds.decode, Mapping) else None
    where = ds.storage.url(".nv-meta/dataset.yaml")
    yaml_cfg = ds.dataset_yaml or {}
    subflavors = yaml_cfg.get("subflavors") if isinstance(yaml_cfg.get("subflavors"), dict) else None
    cls_name: str | None = None
    fmap: dict[str, str] | None = None
    trusted = getattr(ds, "trust_dataset_code", False)
    if ds.field_map in (True, None) and trusted and "sample_loader" in yaml_cfg:
        from .loaders import load_dataset_code

        sample_type = yaml_cfg.get("sample_type")
        cls = sample_class(str(sample_type.get("__class__"))) if isinstance(sample_type, Mapping) else None
        if cls is None:
            raise ConfigError("dataset.yaml names a sample_loader but no known sample_type", path=where, member="sample_type", noun="key")
        code = load_dataset_code(ds.storage, yaml_cfg)
        return SamplePlan(decoders, ds.allow_pickle, cls, None, subflavors, ds.url, code)
    if ds.field_map is True:
        cls_name, fmap = _yaml_type(ds.dataset_yaml, where)
    elif isinstance(ds.field_map, Mapping):
        fmap = {str(k): v for k, v in ds.field_map.items() if k != "__class__"}
        cls_name = ds.field_map.get("__class__")
        if cls_name is None and ds.dataset_yaml and isinstance(ds.dataset_yaml.get("sample_type"), Mapping):
            yaml_cls = sample_class(str(ds.dataset_yaml["sample_type"].get("__class__")))
            if yaml_cls is not None and {f for f, r in own_fields(yaml_cls) if r} <= set(fmap) <= {f for f, _ in own_fields(yaml_cls)}:
                cls_name = yaml_cls.__name__
        cls_name = cls_name or _infer_type(set(fmap))
    elif ds.field_map not in (None, False):
        raise ConfigError(f"field_map must be a dict, True or None, got {ds.field_map!r}", member="field_map", noun="key")
    cls = None
    fields = None
    if fmap is not None:
        cls = sample_class(str(cls_name))
        if cls is None:
            raise ConfigError(f"unknown sample type {cls_name!r}", path=where, member="sample_type", noun="key")
        fields = parse_field_map(fmap)
        _check_fields(cls, set(fields), where)
    return SamplePlan(decoders, ds.allow_pickle, cls, fields, subflavors, ds.url)


def _plan(ds: Dataset) -> SamplePlan:
    plan: SamplePlan | None = ds.__dict__.get("_sample_plan")
    if plan is None:
        plan = plan_for(ds)
        ds.__dict__["_sample_plan"] = plan  # a benign race: every thread computes the same plan
    return plan


def finish_sample(ds: Dataset, sample: Sample) -> Any:
    """Decode a raw sample as ``ds`` asks, and build its typed sample if a field map is in force."""
    plan = _plan(ds)
    if plan.code is not None:
        return _load_with_code(plan, plan.code, sample)
    if plan.fields is None and not ds.decode and ds.field_map is not True:
        return sample  # field_map=True on a crude dataset still decodes, as Energon's crude reader does
    decoded = decode_sample(sample, plan.decoders, allow_pickle=plan.allow_pickle, parts=plan.parts)
    if plan.sample_cls is None or plan.fields is None:
        return decoded
    key = decoded["__key__"]
    values = {}
    for field, options in plan.fields.items():
        try:
            values[field] = access_field(decoded, options)
        except DecodeError as e:
            raise DecodeError(e.detail, path=decoded.get("__shard__"), member=key) from None
    index = decoded.get("__index__")
    restore = index if index is not None else key
    used = sorted(p for p in (plan.parts or ()) if p in decoded)
    source = SourceInfo(
        dataset_path=plan.dataset_path,
        index=restore,
        shard_name=str(decoded.get("__shard__")),
        file_names=tuple(f"{key}.{p}" for p in used),
    )
    return plan.sample_cls(
        __key__=key,
        __restore_key__=("Webdataset", restore),
        __subflavors__=plan.subflavors,
        __sources__=(source,),
        **values,
    )


def _load_with_code(plan: SamplePlan, code: DatasetCode, sample: Sample) -> Any:
    """Energon's sample_loader path: the parts ``part_filter`` keeps, decoded, go to ``sample_loader``,
    whose fields (with the bookkeeping ones) build the dataset's sample type."""
    keep = {p for p in sample if not str(p).startswith("__") and code.part_filter(p)}
    decoded = decode_sample(sample, plan.decoders, allow_pickle=plan.allow_pickle, parts=keep)
    raw = {k: v for k, v in decoded.items() if k in keep or str(k).startswith("__")}
    key = raw["__key__"]
    index = raw.get("__index__")
    restore = index if index is not None else key
    raw["__restore_key__"] = ("Webdataset", restore)
    source = SourceInfo(
        dataset_path=plan.dataset_path, index=restore, shard_name=str(raw.get("__shard__")),
        file_names=tuple(f"{key}.{p}" for p in sorted(keep)),
    )
    raw["__sources__"] = (source,)
    try:
        fields = dict(code.sample_loader(raw))
    except Exception as e:
        raise DecodeError(f"the dataset's sample_loader failed: {type(e).__name__}: {e}", path=raw.get("__shard__"), member=key) from e
    for bookkeeping in ("__key__", "__restore_key__", "__subflavors__", "__sources__"):
        fields.pop(bookkeeping, None)
    assert plan.sample_cls is not None
    return plan.sample_cls(
        __key__=key, __restore_key__=("Webdataset", restore), __subflavors__=plan.subflavors, __sources__=(source,), **fields
    )


# ----- descriptions for people ----------------------------------------------------------------------


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _describe_image(data: bytes) -> str:
    try:
        image = _pillow().open(io.BytesIO(data))
    except MissingExtraError:
        return f"image, {len(data)} bytes (install shardstore[images] to see its shape)"
    except Exception:  # noqa: BLE001 - a preview must not stop on one bad file
        return f"{len(data)} bytes, not a readable image"
    w, h = image.size
    bands = len(image.getbands())
    shape = (h, w) if bands == 1 else (h, w, bands)
    return f"image {image.format or '?'} {w}x{h} {image.mode}, shape {shape}, {len(data)} bytes"


def describe_part(part: str, data: bytes, width: int = 120) -> str:
    """One line saying what a part holds: text and JSON shown (clipped), images as size and shape,
    arrays as shape and dtype, anything else as its size. Never raises on bad data."""
    ext = extension(part)
    try:
        if ext in _IMAGE_EXTENSIONS:
            return _describe_image(data)
        if ext in ("json", "jsn"):
            return _clip(json.dumps(json.loads(data), ensure_ascii=False, separators=(", ", ": ")), width)
        if DEFAULT_DECODERS.get(ext) in (_text, _int):
            return _clip(repr(DEFAULT_DECODERS[ext](data)), width)
        if ext == "npy":
            arr = _npy(data)
            return f"array shape {arr.shape} dtype {arr.dtype}"
        if ext == "npz":
            arrays = _npz(data)
            return _clip("npz " + ", ".join(f"{k}: {v.shape} {v.dtype}" for k, v in arrays.items()), width)
    except Exception:  # noqa: BLE001 - fall back to the size
        return f"{len(data)} bytes (does not decode as .{ext})"
    return f"{len(data)} bytes"


def part_value(part: str, data: bytes) -> Any:
    """What a part holds as a JSON value (``preview --json``): a json part's value, a text part's
    string, an int part's number; anything else (images, arrays, bytes) its ``describe_part`` line,
    unclipped. Never raises on bad data."""
    ext = extension(part)
    try:
        if ext in ("json", "jsn"):
            return json.loads(data)
        if DEFAULT_DECODERS.get(ext) in (_text, _int):
            return DEFAULT_DECODERS[ext](data)
    except (ValueError, RecursionError):
        pass
    return describe_part(part, data, width=1 << 62)


def sample_values(sample: Mapping[str, Any]) -> dict[str, Any]:
    """``{part: part_value}`` for the parts of a raw sample, in tar order."""
    return {
        name: part_value(name, bytes(value))
        for name, value in sample.items()
        if not name.startswith("__") and isinstance(value, (bytes, bytearray, memoryview))
    }


def describe_sample(sample: Mapping[str, Any], width: int = 120) -> dict[str, str]:
    """``{part: description}`` for the parts of a raw sample, in tar order."""
    return {
        name: describe_part(name, bytes(value), width)
        for name, value in sample.items()
        if not name.startswith("__") and isinstance(value, (bytes, bytearray, memoryview))
    }

"""TFRecord files and ``tf.train.Example`` messages, without TensorFlow.

A TFRecord file is a run of records, each framed as: the payload's length (u64, little-endian), the
masked CRC-32C of those 8 bytes (u32), the payload, the masked CRC-32C of the payload (u32). Both
CRCs are checked on read, so a flipped bit in a length or a payload is an error naming the file,
the record and its byte offset, never a silently wrong episode (the ``tfrecord`` package's reader
skips them). A TFDS shard's payloads are serialized ``tf.train.Example`` messages; their classes are
built here from descriptors at runtime (protobuf's own runtime, no generated module, no ``protoc``),
in a private descriptor pool so that a TensorFlow imported in the same process does not clash.
Serialization is deterministic (map keys sorted), so writing the same episodes twice gives the same
bytes.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

from ...errors import MissingExtraError, TFRecordFormatError

__all__ = ["Record", "example_class", "frame", "iter_records", "masked_crc", "parse_example", "serialize"]

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


def _crc32c() -> Any:
    try:
        import crc32c
    except ImportError as e:  # pragma: no cover - the extra is installed with the tests
        raise MissingExtraError("TFRecord files need crc32c: pip install 'shardstore[convert]'") from e
    return crc32c.crc32c


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C: the CRC rotated right by 15 bits plus a constant (so that a CRC of
    data holding CRCs is not degenerate)."""
    return _mask(_crc32c()(data))


def frame(payload: bytes) -> bytes:
    """One TFRecord record: header, payload, footer."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc(length)) + payload + _FOOTER.pack(masked_crc(payload))


@dataclass(frozen=True, slots=True)
class Record:
    """One record's payload, its number in the file and the byte offset of its header."""

    index: int
    offset: int
    payload: bytes


def iter_records(f: IO[bytes], path: str) -> Iterator[Record]:
    """The records of an open TFRecord file, both CRCs checked.

    Raises ``TFRecordFormatError`` naming ``path``, the record and its offset on a CRC mismatch
    (length or payload) or a file that ends inside a record.
    """
    crc = _crc32c()
    index = offset = 0
    size = _size(f)
    while True:
        header = f.read(_HEADER.size)
        if not header:
            return
        error = functools.partial(TFRecordFormatError, path=path, member=f"record {index}", noun="", offset=offset)
        if len(header) < _HEADER.size:
            raise error(f"truncated record: the file ends {len(header)} bytes into its 12-byte header")
        (length,) = struct.unpack("<Q", _crc_checked(header, 8, crc, error, "length CRC mismatch (corrupt record header)"))
        left = size - offset - _HEADER.size
        if length + _FOOTER.size > left:  # checked before reading: a length is a size to allocate
            raise error(f"truncated record: {length} payload bytes announced, the file has {max(left, 0)} bytes left "
                        f"for its {length + _FOOTER.size} remaining bytes")
        body = f.read(length + _FOOTER.size)
        if len(body) < length + _FOOTER.size:
            raise error(f"truncated record: {length} payload bytes announced, the file ends after "
                        f"{len(body)} of its {length + _FOOTER.size} remaining bytes")
        payload = _crc_checked(body, length, crc, error, "payload CRC mismatch (corrupt record data)")
        yield Record(index, offset, payload)
        index += 1
        offset += _HEADER.size + length + _FOOTER.size


def _crc_checked(chunk: bytes, n: int, crc: Callable[[bytes], int],
                 error: Callable[[str], TFRecordFormatError], mismatch: str) -> bytes:
    """The first ``n`` bytes of ``chunk`` (a record's length, or its payload), checked against the
    masked CRC-32C that follows them in ``chunk``; ``error(mismatch)`` is raised when they differ."""
    data = chunk[:n]
    (expected,) = _FOOTER.unpack_from(chunk, n)
    if _mask(crc(data)) != expected:
        raise error(mismatch)
    return data


def _size(f: IO[bytes]) -> int:
    """The file's size (its end found by seeking; the position kept): what a record's length is
    checked against. A stream that cannot seek gets ``MAX_RECORD`` past where it is."""
    try:
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
        return int(end) - here
    except (OSError, ValueError, AttributeError):
        return MAX_RECORD


#: Largest record read from a stream whose size is unknown (one episode: RLDS keeps an episode per
#: record, and the TFDS writers shard at a few hundred MB).
MAX_RECORD = 1 << 31


def _mask(crc: int) -> int:
    """A CRC rotated right by 15 bits plus TFRecord's constant."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@cache
def example_class() -> Any:
    """The ``tf.train.Example`` message class (with ``Features``, ``Feature``, ``BytesList``,
    ``FloatList``, ``Int64List`` as in TensorFlow's ``example.proto``/``feature.proto``)."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as e:  # pragma: no cover - the extra is installed with the tests
        raise MissingExtraError("tf.train.Example needs protobuf: pip install 'shardstore[convert]'") from e
    fdp = descriptor_pb2.FileDescriptorProto(
        name="shardstore/tf_example.proto", package="tensorflow", syntax="proto3"
    )
    f = descriptor_pb2.FieldDescriptorProto
    for name, ftype in (
        ("BytesList", f.TYPE_BYTES),
        ("FloatList", f.TYPE_FLOAT),
        ("Int64List", f.TYPE_INT64),
    ):
        msg = fdp.message_type.add(name=name)
        msg.field.add(name="value", number=1, type=ftype, label=f.LABEL_REPEATED)
    feature = fdp.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        (("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")), start=1
    ):
        feature.field.add(
            name=name,
            number=number,
            type=f.TYPE_MESSAGE,
            type_name=f".tensorflow.{type_name}",
            label=f.LABEL_OPTIONAL,
            oneof_index=0,
        )
    features = fdp.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    entry.field.add(
        name="value", number=2, type=f.TYPE_MESSAGE, type_name=".tensorflow.Feature", label=f.LABEL_OPTIONAL
    )
    features.field.add(
        name="feature",
        number=1,
        type=f.TYPE_MESSAGE,
        type_name=".tensorflow.Features.FeatureEntry",
        label=f.LABEL_REPEATED,
    )
    example = fdp.message_type.add(name="Example")
    example.field.add(
        name="features",
        number=1,
        type=f.TYPE_MESSAGE,
        type_name=".tensorflow.Features",
        label=f.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def parse_example(payload: bytes, path: str, record: int) -> Any:
    """``payload`` parsed as a ``tf.train.Example``; a payload that is not one (does not parse, or
    carries fields an Example has not) raises ``TFRecordFormatError`` naming the file and record."""
    from google.protobuf.message import DecodeError
    from google.protobuf.unknown_fields import UnknownFieldSet

    msg = example_class()()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise TFRecordFormatError(
            f"not a tf.train.Example ({e})", path=path, member=f"record {record}", noun=""
        ) from e
    if len(UnknownFieldSet(msg)) or len(UnknownFieldSet(msg.features)):
        raise TFRecordFormatError(
            "not a tf.train.Example (fields an Example has not)", path=path, member=f"record {record}", noun=""
        )
    return msg


def serialize(msg: Any) -> bytes:
    """``msg`` serialized deterministically (map keys in sorted order): byte-stable output."""
    return bytes(msg.SerializeToString(deterministic=True))

"""What a read returns.

``Sample`` is the raw form: a plain mapping of part name -> bytes plus ``__key__``, ``__shard__``
and ``__index__``, the keys Energon's crude samples carry. The dataclasses below are the typed
forms a field map produces; their class and field names are Energon's (``CaptioningSample(image,
caption)``, ...), so code written against Energon's samples reads shardstore's unchanged. Field
lists follow ``nvmeta.SAMPLE_TYPES`` (a test checks the two agree, and agree with Energon).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Sample",
    "SourceInfo",
    "BaseSample",
    "CaptioningSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQASample",
    "VidQASample",
    "SAMPLE_CLASSES",
    "sample_class",
    "own_fields",
]


class Sample(dict[str, Any]):
    """A sample: ``{"__key__": ..., "__shard__": ..., "__index__": ..., "jpg": b"...", ...}``.

    A dict (so it pickles, compares and prints like one) with attribute shortcuts for the
    three bookkeeping entries and ``parts`` for the part names.
    """

    __slots__ = ()

    @property
    def key(self) -> str:
        return str(self["__key__"])

    @property
    def shard(self) -> str:
        return str(self["__shard__"])

    @property
    def index(self) -> int | None:
        """The position in the split; None for a sample fetched by key from outside the split."""
        value = self["__index__"]
        return None if value is None else int(value)

    @property
    def parts(self) -> list[str]:
        return [k for k in self if not k.startswith("__")]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceInfo:
    """Where a typed sample came from (Energon's ``SourceInfo`` fields)."""

    dataset_path: str
    index: int | str
    shard_name: str
    file_names: tuple[str, ...]


@dataclass(kw_only=True)
class BaseSample:
    """Fields every typed sample has: Energon's ``Sample`` base class.

    ``__restore_key__`` is ``("Webdataset", position)`` as in Energon, so a sample can be found
    again; ``__sources__`` names the dataset, shard and member files it was built from.
    """

    __key__: str
    __restore_key__: tuple[Any, ...] = ()
    __subflavors__: dict[str, Any] | None = None
    __sources__: tuple[SourceInfo, ...] | None = None


@dataclass(kw_only=True)
class CaptioningSample(BaseSample):
    """An image and its caption."""

    image: Any
    caption: str


@dataclass(kw_only=True)
class ImageClassificationSample(BaseSample):
    """An image with an optional class id and class name."""

    image: Any
    label: int | None = None
    label_name: str | None = None


@dataclass(kw_only=True)
class ImageSample(BaseSample):
    """An image alone."""

    image: Any


@dataclass(kw_only=True)
class InterleavedSample(BaseSample):
    """A sequence of images and texts."""

    sequence: list[Any]


@dataclass(kw_only=True)
class MultiChoiceVQASample(BaseSample):
    """An image, a question (context), answer choices and the index of the right one."""

    image: Any
    context: str
    choices: list[str] | None = None
    correct_choice_idx: int = 0


@dataclass(kw_only=True)
class OCRSample(BaseSample):
    """An image, its text, and optional boxes/texts per block, line, word and character."""

    image: Any
    text: str
    block_boxes: Any = None
    block_classes: Any = None
    block_text: list[str] | None = None
    lines_boxes: Any = None
    lines_text: list[str] | None = None
    words_boxes: Any = None
    words_text: list[str] | None = None
    chars_boxes: Any = None
    chars_text: list[str] | None = None


@dataclass(kw_only=True)
class SimilarityInterleavedSample(BaseSample):
    """Images and texts with a similarity matrix between them."""

    images: list[Any]
    texts: list[str]
    audio: list[Any] | None = None
    video: list[Any] | None = None
    similarity_matrix: Any = None
    matched_text_indices: list[int] | None = None


@dataclass(kw_only=True)
class TextSample(BaseSample):
    """A text alone."""

    text: str


@dataclass(kw_only=True)
class VQASample(BaseSample):
    """An image, a question (context), and optional answers with weights."""

    image: Any
    context: str
    answers: list[str] | None = None
    answer_weights: Any = None


@dataclass(kw_only=True)
class VidQASample(BaseSample):
    """A video (left as bytes), a question (context), and optional answers with weights."""

    video: Any
    context: str
    answers: list[str] | None = None
    answer_weights: Any = None


#: Energon class name -> dataclass. ``Sample`` is Energon's base class (no fields of its own).
SAMPLE_CLASSES: dict[str, type[BaseSample]] = {
    "CaptioningSample": CaptioningSample,
    "ImageClassificationSample": ImageClassificationSample,
    "ImageSample": ImageSample,
    "InterleavedSample": InterleavedSample,
    "MultiChoiceVQASample": MultiChoiceVQASample,
    "OCRSample": OCRSample,
    "Sample": BaseSample,
    "SimilarityInterleavedSample": SimilarityInterleavedSample,
    "TextSample": TextSample,
    "VQASample": VQASample,
    "VidQASample": VidQASample,
}


def sample_class(name: str) -> type[BaseSample] | None:
    """The dataclass for an Energon sample class name, or None if shardstore has no such type."""
    return SAMPLE_CLASSES.get(name)


def own_fields(cls: type[BaseSample]) -> list[tuple[str, bool]]:
    """``(field, required)`` of a sample class, without the bookkeeping fields of ``BaseSample``."""
    base = {f.name for f in dataclasses.fields(BaseSample)}
    return [
        (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
        if f.name not in base
    ]

"""``check rlds``: the validation rules of the LeRobot -> RLDS mapping spec, run on any RLDS folder.

The spec (``lerobot-to-rlds.md``, "Validation Rules") has three groups, each checked here on every
record of every shard:

- schema: every key of ``features.json`` present (and the RLDS flags declared), shapes and dtypes
  as declared (a value list of the right kind and a whole number of steps; images decode to the
  declared shape), no NaN or Inf in numeric tensors;
- content: ``is_first`` on step 0 alone, ``is_last`` on the last step alone (and ``is_terminal``
  only there), images uint8 in [0, 255] (they decode as 8-bit), state and action finite;
- cross-validation: the records of each shard against ``dataset_info.json``'s ``shardLengths``;
  and, when a conversion report lies beside the folder (``<DIR>.report.json``, written by
  ``export rlds``), episode count, per-episode step counts and total steps against its input.

Problems are collected, not raised: the report says what failed where (file, record, field) and
goes on with the next record; a framing error ends its shard (the next record's start is lost).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ...episodes.problems import progress as progress_bar
from ...errors import EpisodeFormatError, ShardstoreError, TFRecordFormatError
from ...storage import open_storage
from .api import DATASET_INFO_JSON, FEATURES_JSON, decode_example, read_rlds_info
from .features import Leaf
from .tfrecord import iter_records, parse_example

__all__ = ["RldsCheckReport", "check_rlds", "report_path"]

#: Problems kept per rule in the report (the count goes on).
MAX_KEPT = 50
RULES = {
    "format.tfrecord": "records framed with valid CRCs, each a tf.train.Example (TFRecord itself, not in the spec)",
    "schema.required_keys": "all required keys present",
    "schema.shapes": "tensor shapes match the specification",
    "schema.dtypes": "dtypes match the specification",
    "schema.finite": "no NaN or Inf values in numeric tensors",
    "content.is_first": "is_first True only for step[0]",
    "content.is_last": "is_last True only for step[-1] (is_terminal only there)",
    "content.image_range": "image values in [0, 255] for uint8",
    "content.state_action_finite": "state/action values finite",
    "cross.episode_count": "episode count in output == episode count in input",
    "cross.step_counts": "step count per episode matches",
    "cross.total_steps": "total steps across all episodes match",
}


@dataclass(slots=True)
class RldsCheckReport:
    """What ``check_rlds`` found: per rule ``pass``/``fail``/``skipped`` (with why), the problems
    (rule, file, record, field, detail), counts per split and the cross-validation source."""

    folder: str
    rules: dict[str, str] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)
    problem_counts: dict[str, int] = field(default_factory=dict)
    splits: dict[str, dict[str, int]] = field(default_factory=dict)
    cross_source: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem_counts

    def add(self, rule: str, detail: str, file: str = "", record: int | None = None, fld: str = "") -> None:
        self.problem_counts[rule] = self.problem_counts.get(rule, 0) + 1
        if self.problem_counts[rule] <= MAX_KEPT:
            self.problems.append(
                {"rule": rule, "file": file, "record": record, "field": fld, "detail": detail}
            )

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), ok=self.ok)

    def text(self) -> str:
        """The report as lines a person reads."""
        lines = [f"RLDS check of {self.folder}: {'OK' if self.ok else 'FAILED'}"]
        for split, c in self.splits.items():
            lines.append(
                f"  split {split}: " + ", ".join(f"{c[k]} {k[:-1] if c[k] == 1 else k}" for k in ("episodes", "steps", "shards"))
            )
        for rule, desc in RULES.items():
            lines.append(f"  [{self.rules.get(rule, 'pass'):>7}] {rule}: {desc}")
        for p in self.problems:
            where = ", ".join(
                x
                for x in (
                    p["file"],
                    f"record {p['record']}" if p["record"] is not None else "",
                    f"field {p['field']!r}" if p["field"] else "",
                )
                if x
            )
            lines.append(f"  {p['rule']}: {where}: {p['detail']}")
        hidden = sum(self.problem_counts.values()) - len(self.problems)
        if hidden > 0:
            lines.append(f"  ... and {hidden} more problems")
        return "\n".join(lines)


def report_path(folder: str, suffix: str = "json") -> str:
    """Where a conversion report of ``folder`` lies: beside it, ``<folder>.report.<suffix>``."""
    return f"{folder.rstrip('/')}.report.{suffix}"


def check_rlds(
    folder: str, *, decode_images: bool = True, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> RldsCheckReport:
    """Run the spec's rules on the RLDS folder ``folder`` (a TFDS version folder, local or any fsspec
    URL) and return the report. Raises only when the folder has no readable ``dataset_info.json``
    or ``features.json`` (nothing to check against). ``progress``: a bar of shards on stderr.
    ``decode_images=False`` reads each image's header alone (format, mode, size: what the shape and
    8-bit rules need) and not its pixels: for a writer checking images it has just encoded itself,
    where decoding them again would test the encoder, not the data (and cost a tenth of the export)."""
    storage = open_storage(folder, storage_options)
    info = read_rlds_info(storage.read(DATASET_INFO_JSON), storage.read(FEATURES_JSON), folder)
    report = RldsCheckReport(folder)
    declared = {leaf.key for leaf in info.leaves}
    for flag in ("steps/is_first", "steps/is_last"):
        if flag not in declared:
            report.add("schema.required_keys", "RLDS flag not declared", FEATURES_JSON, None, flag)
    steps_seen: list[int] = []
    for split in info.splits:
        report.splits.setdefault(split.name, {"episodes": 0, "steps": 0, "shards": len(split.shard_lengths)})
    shards = [(split, i, length) for split in info.splits for i, length in enumerate(split.shard_lengths)]
    for split, i, length in progress_bar(shards, len(shards), "shard", "Checking RLDS", progress):
        counts = report.splits[split.name]
        name = split.shard_name(info.name, i)
        got = 0
        for n in _check_shard(storage, name, info.leaves, report, decode_images):
            got += 1
            if n is not None:
                counts["steps"] += n
                steps_seen.append(n)
        counts["episodes"] += got
        if got != length:
            report.add("cross.episode_count", f"{got} records where shardLengths says {length}", name)
    _cross_with_report(folder, steps_seen, report)
    for rule in RULES:
        report.rules.setdefault(rule, "fail" if report.problem_counts.get(rule) else "pass")
    return report


def _check_shard(
    storage: Any, name: str, leaves: tuple[Leaf, ...], report: RldsCheckReport, decode_images: bool
) -> Iterator[int | None]:
    """The step count of each record of ``name`` (None for a record that does not decode)."""
    try:
        f = storage.open(name)
    except (OSError, ShardstoreError) as e:
        report.add("cross.episode_count", f"shard missing or unreadable ({e})", name)
        return
    with f:
        records = iter_records(f, name)
        while True:
            try:
                rec = next(records)
            except StopIteration:
                return
            except TFRecordFormatError as e:
                report.add(
                    "format.tfrecord",
                    e.detail + " (the rest of the shard is unreadable)",
                    name,
                    _record_no(e.member),
                )
                return
            try:
                msg = parse_example(rec.payload, name, rec.index)
                ep = decode_example(msg, leaves, name, rec.index, rec.index)
            except (TFRecordFormatError, EpisodeFormatError) as e:
                report.add(_rule_of(e), e.detail, name, rec.index, _field_of(e.member))
                yield None
                continue
            n = len(next(iter(ep.steps.values()))) if ep.steps else 0
            _check_values(ep, leaves, name, rec.index, report, decode_images)
            yield n


def _check_values(
    ep: Any, leaves: tuple[Leaf, ...], name: str, record: int, report: RldsCheckReport, decode_images: bool
) -> None:
    for leaf in leaves:
        if leaf.is_flag:
            continue
        value = ep.steps.get(".".join(leaf.path[1:])) if leaf.in_steps else _meta(ep.metadata, leaf.path)
        if (
            leaf.kind == "tensor"
            and isinstance(value, np.ndarray | np.generic)
            and np.dtype(leaf.dtype).kind == "f"
        ):
            bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
            if bad:
                rule = (
                    "content.state_action_finite" if leaf.path[-1] in ("state", "action") else "schema.finite"
                )
                report.add(rule, f"{bad} NaN/Inf values", name, record, leaf.key)
        elif leaf.kind == "image" and value:
            _check_images(value, leaf, name, record, report, decode_images)


def _check_images(
    images: list[bytes], leaf: Leaf, name: str, record: int, report: RldsCheckReport, decode: bool
) -> None:
    from PIL import Image

    for t, data in enumerate(images):
        try:
            im = Image.open(io.BytesIO(data))  # the header: format, mode, size
            if decode:
                im.load()
        except Exception as e:  # noqa: BLE001 - any decoder failure is a finding about the data
            report.add("schema.shapes", f"step {t}: image does not decode ({e})", name, record, leaf.key)
            return
        if im.mode not in ("L", "RGB", "RGBA", "P", "1"):
            report.add(
                "content.image_range", f"step {t}: image mode {im.mode} is not 8-bit", name, record, leaf.key
            )
            return
        channels = len(im.getbands())
        shape = (im.height, im.width, channels)
        want = leaf.shape
        if want and any(w not in (-1, s) for w, s in zip(want, shape, strict=False)):
            report.add(
                "schema.shapes",
                f"step {t}: image {list(shape)} where features.json says {list(want)}",
                name,
                record,
                leaf.key,
            )
            return


def _meta(tree: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _cross_with_report(folder: str, steps: list[int], report: RldsCheckReport) -> None:
    path = report_path(folder)
    if not os.path.exists(path):
        for rule in ("cross.step_counts", "cross.total_steps"):
            report.rules[rule] = "skipped"
        report.cross_source = "dataset_info.json shardLengths (no conversion report beside the folder)"
        return
    with open(path) as f:
        conv = json.load(f)
    if "episodes" not in conv:  # a conversion's field mapping only: no per-episode counts to hold against
        for rule in ("cross.step_counts", "cross.total_steps"):
            report.rules[rule] = "skipped"
        report.cross_source = f"dataset_info.json shardLengths ({path} has no per-episode counts)"
        return
    report.cross_source = path
    written = [e for e in conv.get("episodes", []) if e.get("status") == "ok"]
    if len(written) != len(steps):
        report.add(
            "cross.episode_count", f"{len(steps)} episodes where the conversion wrote {len(written)}", path
        )
    for i, (e, n) in enumerate(zip(written, steps, strict=False)):
        if e.get("steps_in") != n:
            report.add(
                "cross.step_counts",
                f"episode {i} (source episode {e.get('source_episode_index')}): "
                f"{n} steps where the input had {e.get('steps_in')}",
                path,
            )
    want = sum(int(e.get("steps_in", 0)) for e in written)
    if sum(steps) != want:
        report.add("cross.total_steps", f"{sum(steps)} steps where the input had {want}", path)


def _rule_of(e: ShardstoreError) -> str:
    d = e.detail
    if "tf.train.Example" in d:
        return "format.tfrecord"
    if "is_first" in d:
        return "content.is_first"
    if "is_last" in d or "is_terminal" in d:
        return "content.is_last"
    if "needs a" in d or "range of" in d or "not UTF-8" in d:
        return "schema.dtypes"
    if ("steps" in d and "where" in d) or "shape" in d or "whole number" in d:
        return "schema.shapes"
    return "schema.required_keys"


def _record_no(member: str | None) -> int | None:
    if member and member.startswith("record "):
        return int(member.split(",")[0].split()[1])
    return None


def _field_of(member: str | None) -> str:
    if member and "field '" in member:
        return member.split("field '", 1)[1].rstrip("'")
    return ""

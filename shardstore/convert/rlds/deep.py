"""``shardstore check rlds PATH --deep``: the mapping spec's rules (``check.py``: every record's
TFRecord CRCs, ``features.json``'s keys, shapes and dtypes against each record, images decoded,
NaN/Inf, ``is_first``/``is_last``, ``shardLengths``) as the report every format's check gives
(``episodes.problems``): a problem per finding with its rule, shard, record and field."""

from __future__ import annotations

from typing import Any

from ...episodes.problems import FormatReport
from .check import check_rlds

__all__ = ["check_deep"]


def check_deep(
    src: str, *, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> FormatReport:
    """Every rule of ``check_rlds`` on the RLDS folder ``src`` (local or fsspec URL), images
    decoded; ``progress``: a bar of shards on stderr."""
    found = check_rlds(src, decode_images=True, storage_options=storage_options, progress=progress)
    report = FormatReport(src, "RLDS", version=src.rstrip("/").rsplit("/", 1)[-1], deep=True, unit="steps")
    report.ran(*found.rules)
    for name, split in found.splits.items():
        report.episodes += split["episodes"]
        report.frames += split["steps"]
        report.parts[f"split {name}"] = dict(split)
    for p in found.problems:
        report.add(
            "error", p["rule"], p["detail"], file=p["file"] or None, episode=p["record"], field=p["field"] or None,
            expected=_RULE_EXPECTS.get(p["rule"]),
        )
    for rule, count in found.problem_counts.items():
        kept = sum(q["rule"] == rule for q in found.problems)
        if count > kept:
            report.suppressed[rule] = report.suppressed.get(rule, 0) + count - kept
    report.finish()
    return report


#: What each rule expects, said once (the spec's wording).
_RULE_EXPECTS = {
    "format.tfrecord": "records framed with valid CRCs, each a tf.train.Example",
    "schema.required_keys": "every key of features.json in every record",
    "schema.shapes": "the shape features.json declares",
    "schema.dtypes": "the dtype features.json declares",
    "schema.finite": "finite values",
    "content.is_first": "is_first true on step 0 only",
    "content.is_last": "is_last true on the last step only (is_terminal only there)",
    "content.image_range": "8-bit images",
    "content.state_action_finite": "finite state and action",
    "cross.episode_count": "as many records as shardLengths says",
    "cross.step_counts": "the conversion's input step counts",
    "cross.total_steps": "the conversion's input total",
}

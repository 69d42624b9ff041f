"""``check_rlds``: the spec's rules on any RLDS folder, problems collected with file, record, field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rlds_source import (
    META_SPECS,
    STEP_SPECS,
    Spec,
    example_bytes,
    features_json,
    framed,
    make_episode,
    write_rlds_source,
)

from shardstore.convert.rlds.check import RULES, check_rlds

SHARD = "robo-train.tfrecord-00000-of-00003"


def test_clean_folder_passes(tmp_path: Path) -> None:
    root = tmp_path / "robo" / "1.0.0"
    write_rlds_source(root)
    report = check_rlds(str(root))
    assert report.ok and report.problems == []
    assert report.splits == {
        "train": {"episodes": 5, "steps": 15, "shards": 3},
        "val": {"episodes": 2, "steps": 5, "shards": 2},
    }
    assert set(report.rules) == set(RULES)
    assert report.rules["cross.episode_count"] == "pass" and report.rules["cross.step_counts"] == "skipped"
    assert json.loads(json.dumps(report.to_json()))["ok"] is True


def test_problems_are_collected(tmp_path: Path) -> None:
    root = tmp_path / "robo" / "1.0.0"
    write_rlds_source(root)
    rng = np.random.default_rng(3)
    specs = STEP_SPECS + META_SPECS
    nan = make_episode(rng, 3, 0, terminal=True)
    nan["steps/observation/state"][1, 0] = np.nan
    nan["steps/action"] = nan["steps/action"]  # untouched
    nan["steps/observation/joints"][2, 1] = np.inf
    flags = make_episode(rng, 3, 1, terminal=False)
    flags["steps/is_last"] = np.array([True, False, True])
    small = make_episode(rng, 2, 2, terminal=False)
    from rlds_source import encode_image

    small["steps/observation/image"][1] = encode_image(np.zeros((4, 4, 3), np.uint8), "png")
    # shard 0 announces 2 records; holds 3 (one of them not an Example) -> counted, not fatal
    (root / SHARD).write_bytes(
        b"".join(framed(example_bytes(v, specs)) for v in (nan, flags)) + framed(b"\x12\x03abc")
    )
    (root / "robo-train.tfrecord-00001-of-00003").write_bytes(framed(example_bytes(small, specs))[:-3])
    report = check_rlds(str(root))
    assert not report.ok
    found = {(p["rule"], p["file"], p["record"], p["field"]) for p in report.problems}
    assert ("content.state_action_finite", SHARD, 0, "steps/observation/state") in found
    assert ("schema.finite", SHARD, 0, "steps/observation/joints") in found
    assert ("content.is_last", SHARD, 1, "steps/is_last") in found
    assert ("format.tfrecord", SHARD, 2, "") in found
    assert ("cross.episode_count", SHARD, None, "") in found
    assert ("format.tfrecord", "robo-train.tfrecord-00001-of-00003", 0, "") in found  # truncated
    text = report.text()
    assert "FAILED" in text and "[   fail] content.is_last" in text


def test_image_shape_and_missing_flag(tmp_path: Path) -> None:
    root = tmp_path / "robo" / "1.0.0"
    write_rlds_source(root)
    wrong = Spec("steps/observation/image", "image", "uint8", (7, 5, 3), "png")
    specs = [wrong if s.path == wrong.path else s for s in STEP_SPECS + META_SPECS]
    (root / "features.json").write_text(features_json(specs))
    shapes = [p for p in check_rlds(str(root)).problems if p["rule"] == "schema.shapes"]
    assert shapes and "step 0: image [6, 5, 3] where features.json says [7, 5, 3]" == shapes[0]["detail"]
    assert shapes[0]["field"] == "steps/observation/image" and shapes[0]["record"] == 0
    # the header alone (a writer checking images it encoded itself) still sees the shape
    headers = [p for p in check_rlds(str(root), decode_images=False).problems if p["rule"] == "schema.shapes"]
    assert [p["detail"] for p in headers] == [p["detail"] for p in shapes]
    # an RLDS flag not declared at all (its values in the records are then undeclared too)
    (root / "features.json").write_text(features_json([s for s in specs if s.path != "steps/is_first"]))
    found = {(p["rule"], p["file"], p["field"], p["detail"]) for p in check_rlds(str(root)).problems}
    assert ("schema.required_keys", "features.json", "steps/is_first", "RLDS flag not declared") in found
    assert ("schema.required_keys", SHARD, "steps/is_first", "feature not in features.json") in found


def test_a_body_that_does_not_decode_is_found_by_decoding_only(tmp_path: Path) -> None:
    from rlds_source import encode_image

    root = tmp_path / "robo" / "1.0.0"
    write_rlds_source(root)
    ep = make_episode(np.random.default_rng(5), 2, 0, terminal=True)
    png = encode_image(np.random.default_rng(6).integers(0, 256, (6, 5, 3), dtype=np.uint8), "png")
    ep["steps/observation/image"][1] = png[:-30]  # header intact, image data and end cut
    (root / SHARD).write_bytes(framed(example_bytes(ep, STEP_SPECS + META_SPECS)) * 2)
    decoded = [p for p in check_rlds(str(root)).problems if p["rule"] == "schema.shapes"]
    assert decoded and "step 1: image does not decode" in decoded[0]["detail"]
    assert not [p for p in check_rlds(str(root), decode_images=False).problems if p["rule"] == "schema.shapes"]

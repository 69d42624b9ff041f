"""The same metadataset YAML in shardstore and in the real megatron-energon 7.4.1: same blend mode,
weights or repetitions, the same sample keys per source in the same order (subsets applied), the same
subflavors, and the same bytes from the aux stores (a prepared tar dataset and a plain folder)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from energon_peer import missing_peer
from make_polylithic import make_polylithic

from shardstore.metadataset import open_metadataset

pytestmark = pytest.mark.compat

try:  # the peer: a test-only dependency (extra `compat`)
    from megatron.energon import WorkerConfig
    from megatron.energon.metadataset.loader import load_dataset
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

V2 = "__module__: megatron.energon\n__class__: MetadatasetV2\n"

YAMLS = {
    "blend": V2 + """
        splits:
          train:
            blend:
              - weight: 1
                path: primary_a
                subset: {range: [10%, 60%]}
                subflavors: {origin: a, extra: 1}
                aux: {images: aux_tar, photos: "filesystem://aux_folder"}
              - weight: 2.5
                path: nested_v1.yaml
                subflavors: {origin: nested}
              - weight: 3
                path: primary_c
                subset: {range: [5, 30]}
                aux: {images: aux_tar}
        """,
    "epochized": V2 + """
        splits:
          train:
            blend_epochized:
              - {repetitions: 2, path: primary_a, aux: {images: aux_tar}}
              - {repetitions: 0.5, path: primary_b, subset: {range: [0%, 50%]}}
            subset: {range: [25%, 75%]}
        """,
    "single": V2 + """
        splits:
          train: {path: primary_b, subflavors: {only: true}, aux: {photos: "filesystem://aux_folder"}}
        """,
    "legacy_v1": """
        splits:
          train:
            datasets:
              - {weight: 2, path: primary_b, subflavor: legacy}
              - {weight: 1, path: primary_c}
        """,
}


@pytest.fixture(scope="module")
def poly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("poly-compat")
    paths = make_polylithic(str(root), primaries=3, samples=40, images=60, photos=30, shards=2)
    (root / "nested_v1.yaml").write_text(
        "splits:\n  train:\n    datasets:\n      - {weight: 1, path: primary_b, subflavors: {origin: inner, y: 2}}\n"
    )
    for name, text in YAMLS.items():
        head = V2 if text.startswith(V2) else ""
        (root / f"{name}.yaml").write_text(head + textwrap.dedent(text[len(head) :]))
    return paths


def energon_sources(path: str) -> tuple[str, list[dict[str, Any]]]:
    """Energon's view: blend mode and, per loaded dataset, weight, repetitions, keys, subflavors, aux."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    loaded = load_dataset(path).get_datasets(training=False, split_part="train", worker_config=wc)
    out = []
    wc.worker_activate(0)
    try:
        for ld in loaded.datasets:
            samples = list(ld.dataset.build())
            out.append(
                {
                    "weight": ld.weight,
                    "repetitions": ld.repetitions,
                    "keys": [s["__key__"] for s in samples],
                    "subflavors": [s["__subflavors__"] for s in samples],
                    "json": [s["json"] for s in samples],
                    "aux": ld.aux or {},
                }
            )
    finally:
        wc.worker_deactivate()
    return loaded.blend_mode.value, out


MODES = {"dataset_weight": "blend", "sample_repetitions": "blend_epochized", "none": "single"}


@pytest.mark.parametrize("name", list(YAMLS))
def test_same_sources_keys_subflavors_and_aux_as_energon(poly: dict[str, Any], name: str) -> None:
    path = str(Path(poly["root"]) / f"{name}.yaml")
    mode, theirs = energon_sources(path)
    md = open_metadataset(path)
    assert MODES[mode] == md.mode
    assert len(theirs) == len(md.sources)
    for src, ref in zip(md.sources, theirs, strict=True):
        if ref["weight"] is not None:
            assert src.weight == pytest.approx(ref["weight"])
        if ref["repetitions"] is not None:
            assert src.repetitions == pytest.approx(ref["repetitions"])
        ours = src.read(range(len(src)))
        assert [s["__key__"] for s in ours] == ref["keys"], src.name
        assert [s["__subflavors__"] for s in ours] == [dict(x) for x in ref["subflavors"]]
        assert [json.loads(s["json"]) for s in ours] == [j if isinstance(j, dict) else json.loads(j) for j in ref["json"]]
        assert sorted(src.aux) == sorted(ref["aux"])
        for sample in ours[:5]:
            rec = json.loads(sample["json"])
            for store, field in (("images", "image"), ("photos", "photo")):
                if store in src.aux:
                    data, _info = ref["aux"][store][rec[field]]
                    assert sample.aux[store][rec[field]] == data


def test_energon_reads_our_aux_index_by_member_name(poly: dict[str, Any]) -> None:
    """Every aux member, through Energon's WebdatasetFileStore on the shardstore-prepared aux dataset."""
    from megatron.energon.cache.file_store import WebdatasetFileStore
    from megatron.energon.epathlib import EPath

    theirs = WebdatasetFileStore(EPath(poly["aux_tar"]))
    ours = open_metadataset(poly["meta"]).sources[0].aux["images"]
    names = [f"images/{i:05d}.jpg" for i in range(60)]
    assert ours.get_many(names) == [theirs[n][0] for n in names]

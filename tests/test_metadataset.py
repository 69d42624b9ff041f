"""Metadatasets (Energon's MetadatasetV2 YAML and the legacy v1 form) over real prepared datasets."""

from __future__ import annotations

import collections
import io
import itertools
import json
import math
import pickle
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from make_polylithic import make_polylithic, media_bytes, write_primary

import shardstore
from shardstore.errors import AuxNotFoundError, ConfigError
from shardstore.metadataset import (
    BLEND,
    BLEND_EPOCHIZED,
    MetaSample,
    dataset_paths,
    interleave,
    metadataset_check,
    metadataset_info,
    open_metadataset,
)

SAMPLES = 40  # per primary dataset: keys {tag}_000000 .. {tag}_000039, 20 per shard


@pytest.fixture(scope="module")
def poly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Primaries a, b, c (40 samples each) naming images of aux_tar (60) and photos of aux_folder (30)."""
    root = tmp_path_factory.mktemp("poly")
    return make_polylithic(str(root), primaries=3, samples=SAMPLES, images=60, photos=30, shards=2)


def write_yaml(poly: dict[str, Any], name: str, text: str) -> str:
    path = Path(poly["root"]) / name
    head = V2 if text.startswith(V2) else ""
    path.write_text(head + textwrap.dedent(text[len(head) :]))
    return str(path)


def keys(tag: str, idx: Any) -> list[str]:
    return [f"{tag}_{i:06d}" for i in idx]


def one_pass(md: Any, **kw: Any) -> list[Any]:
    return list(md.iter(repeat=False, **kw))


V2 = "__module__: megatron.energon\n__class__: MetadatasetV2\n"


# ----- blending and aux -----------------------------------------------------------------------------
def test_blend_yields_samples_with_aux_from_a_tar_dataset_and_a_folder(poly: dict[str, Any]) -> None:
    md = open_metadataset(poly["meta"])  # make_polylithic's own YAML: weights 1, 2, 3
    assert md.mode == BLEND and [s.name for s in md.sources] == ["primary_a", "primary_b", "primary_c"]
    assert [round(s.weight, 6) for s in md.sources] == [round(1 / 6, 6), round(2 / 6, 6), round(3 / 6, 6)]
    samples = one_pass(md)
    assert len(samples) == len(md) == 3 * SAMPLES
    got = collections.Counter((s["__source__"], s["__key__"]) for s in samples)
    assert set(got.values()) == {1}
    for tag in "abc":
        assert sorted(k for src, k in got if src == f"primary_{tag}") == keys(tag, range(SAMPLES))
    for s in samples:
        assert isinstance(s, MetaSample)
        rec = json.loads(s["json"])
        assert s.subflavors == {"origin": s["__key__"][0]} == s["__subflavors__"]
        assert s.aux["images"][rec["image"]] == media_bytes("image", int(rec["image"][7:12]))
        assert s.aux["photos"][rec["photo"]] == media_bytes("photo", int(rec["photo"][7:12]))
        assert rec["image"] in s.aux["images"] and s.aux["photos"].get("photos/none.png") is None


def test_blend_weights_hold_over_20000_draws(poly: dict[str, Any]) -> None:
    path = write_yaml(poly, "weights.yaml", V2 + """
        splits:
          train:
            blend:
              - {weight: 1, path: primary_a}
              - {weight: 3, path: primary_b}
              - {weight: 6.0, path: primary_c}
        """)
    md = open_metadataset(path)
    n = 20_000
    counts = collections.Counter(i for i, _ in itertools.islice(md.plan(seed=7), n))
    for i, p in enumerate([0.1, 0.3, 0.6]):
        sigma = math.sqrt(n * p * (1 - p))
        assert abs(counts[i] - n * p) < 5 * sigma, (i, counts)
    # the draws repeat each source's samples: every key of a turns up, in order of its passes
    slots_a = [slot for i, slot in itertools.islice(md.plan(seed=7), n) if i == 0]
    assert slots_a[:SAMPLES] == list(range(SAMPLES)) and slots_a[SAMPLES : 2 * SAMPLES] == list(range(SAMPLES))


def test_blend_is_deterministic_and_readers_partition_the_samples(poly: dict[str, Any]) -> None:
    md = open_metadataset(poly["meta"])
    first = list(itertools.islice(md.plan(seed=1, shuffle=True), 500))
    assert first == list(itertools.islice(md.plan(seed=1, shuffle=True), 500))
    assert first != list(itertools.islice(md.plan(seed=2, shuffle=True), 500))
    assert list(itertools.islice(md.plan(rank=0, world_size=2), 100)) != list(
        itertools.islice(md.plan(rank=1, world_size=2), 100)
    )
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    for rank in range(2):
        for worker in range(3):
            for s in md.iter(repeat=False, shuffle=True, seed=5, rank=rank, world_size=2, worker_id=worker, num_workers=3):
                seen[(s["__source__"], s["__key__"])] += 1
    assert len(seen) == 3 * SAMPLES and set(seen.values()) == {1}


def test_blend_epochized_yields_exact_counts(poly: dict[str, Any]) -> None:
    path = write_yaml(poly, "epochized.yaml", V2 + """
        splits:
          train:
            blend_epochized:
              - {repetitions: 2, path: primary_a}
              - {repetitions: 0.5, path: primary_b}
              - {path: primary_c}
        """)
    md = open_metadataset(path)
    assert md.mode == BLEND_EPOCHIZED and [s.repetitions for s in md.sources] == [2.0, 0.5, 1.0]
    for shuffle in (False, True):
        samples = list(md.iter(shuffle=shuffle, seed=3))  # blend_epochized: one epoch by default
        assert len(samples) == len(md) == 80 + 20 + 40
        per_key = collections.Counter(s["__key__"] for s in samples)
        assert all(per_key[k] == 2 for k in keys("a", range(SAMPLES)))
        assert sum(1 for k in per_key if k.startswith("b_")) == 20 and all(
            per_key[k] == 1 for k in per_key if k[0] in "bc"
        )
        assert sorted(k for k in per_key if k.startswith("c_")) == keys("c", range(SAMPLES))
    # per reader: floor(r * its share), whatever the number of readers
    total = 0
    for worker in range(3):
        got = collections.Counter(i for i, _ in md.plan(worker_id=worker, num_workers=3))
        share = [len(range(SAMPLES * worker // 3, SAMPLES * (worker + 1) // 3))] * 3
        assert [got[0], got[1], got[2]] == [2 * share[0], math.floor(share[1] * 0.5), share[2]]
        total += sum(got.values())
    assert total == 80 + sum(math.floor(len(range(SAMPLES * w // 3, SAMPLES * (w + 1) // 3)) * 0.5) for w in range(3)) + 40
    # repeat=True: the next epoch follows, with the same counts
    two = list(itertools.islice(md.plan(repeat=True), 2 * len(md)))
    assert collections.Counter(i for i, _ in two[len(md) :]) == collections.Counter({0: 80, 1: 20, 2: 40})


def test_resume_start_and_cook(poly: dict[str, Any]) -> None:
    path = write_yaml(poly, "cook.yaml", V2 + """
        splits:
          train:
            blend_epochized:
              - {repetitions: 1.5, path: primary_a, aux: {images: aux_tar}}
              - {path: primary_b, aux: {images: aux_tar}}
        """)
    md = open_metadataset(path)

    def cook(s: MetaSample) -> tuple[str, bytes]:
        return s["__key__"], s.aux["images"][json.loads(s["json"])["image"]]

    full = list(md.iter(shuffle=True, seed=9, cook=cook))
    assert len(full) == 60 + 40 and all(isinstance(x, tuple) and len(x[1]) > 600 for x in full)
    assert list(md.iter(shuffle=True, seed=9, cook=cook, start=37)) == full[37:]


# ----- subsets, subflavors, nesting, splits ---------------------------------------------------------
def test_subsets_as_written(poly: dict[str, Any]) -> None:
    path = write_yaml(poly, "subsets.yaml", V2 + """
        splits:
          train:
            blend:
              - {path: primary_a, subset: {range: [0%, 50%]}}
              - {path: primary_b, subset: {range: [10, 15]}}
              - {path: primary_c, subset: {range: [30, end]}}
        """)
    md = open_metadataset(path)
    got = {s.name: sorted(x["__key__"] for x in one_pass(md) if x["__source__"] == s.name) for s in md.sources}
    assert got == {
        "primary_a": keys("a", range(0, 20)),
        "primary_b": keys("b", range(10, 15)),
        "primary_c": keys("c", range(30, 40)),
    }
    # a blend's subset composes with its entries' (Energon's merge): [50%,100%] within [0%,50%] -> 50%..75%;
    # an absolute entry range applies first, then the blend's ratio: [10, 30) then its first half
    sub = write_yaml(poly, "subsets2.yaml", V2 + """
        splits:
          train:
            blend:
              - {path: primary_a, subset: {range: [50%, 100%]}}
              - {path: primary_b, subset: {range: [10, 30]}}
            subset: {range: [0%, 50%]}
        """)
    md2 = open_metadataset(sub)
    assert [(s.start, s.end) for s in md2.sources] == [(20, 30), (10, 20)]


def test_subflavors_nesting_and_legacy_v1(poly: dict[str, Any]) -> None:
    write_yaml(poly, "inner_v1.yaml", """
        splits:
          train:
            datasets:
              - {weight: 1, path: primary_a, subflavor: legacy, subflavors: {level: inner, y: 2}}
              - {weight: 3, path: primary_b, subflavors: {level: inner}}
        """)
    path = write_yaml(poly, "outer.yaml", V2 + """
        splits:
          train:
            blend:
              - {weight: 1, path: inner_v1.yaml, subflavors: {level: outer, x: 1}}
              - {weight: 1, path: primary_c, subflavors: {level: direct}}
        """)
    md = open_metadataset(path)
    assert [s.name for s in md.sources] == ["primary_a", "primary_b", "primary_c"]
    assert [s.weight for s in md.sources] == [0.125, 0.375, 0.5]
    assert [s.spec.subflavors for s in md.sources] == [
        {"__subflavor__": "legacy", "level": "outer", "y": 2, "x": 1},
        {"level": "outer", "x": 1},
        {"level": "direct"},
    ]
    s = next(x for x in md.iter() if x["__source__"] == "primary_a")
    assert s["__subflavors__"]["level"] == "outer"
    assert open_metadataset(str(Path(poly["root"]) / "inner_v1.yaml")).version == 1


def test_split_part_split_config_and_dataset_config(poly: dict[str, Any], tmp_path: Path) -> None:
    d = tmp_path / "d"
    write_primary(str(d), "d", 20, 60, 30, shards=2)
    shardstore.prepare(str(d), split_ratio="1,1,0", num_workers=1, sample_type="CrudeWebdataset")
    (d / ".nv-meta" / "split_alt.yaml").write_text("split_parts:\n  train: [parts/d-000001.tar]\n  mine: [parts/d-000000.tar]\n")
    (d / ".nv-meta" / "dataset_alt.yaml").write_text("__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {a: 1}\n")
    path = tmp_path / "m.yaml"
    path.write_text(V2 + textwrap.dedent(f"""
        splits:
          train:
            blend:
              - {{path: {d}, split_part: val}}
              - {{path: d, split_config: split_alt.yaml}}
              - {{path: d, split_config: split_alt.yaml, split_part: mine, dataset_config: dataset_alt.yaml}}
        """))
    md = open_metadataset(str(path))
    got = [sorted(x["__key__"] for x in md.sources[i].read(range(len(md.sources[i])))) for i in range(3)]
    assert got == [keys("d", range(10, 20)), keys("d", range(10, 20)), keys("d", range(0, 10))]
    assert md.sources[2].dataset.dataset_yaml["subflavors"] == {"a": 1}
    path.write_text(V2 + "splits:\n  train: {path: d, split_config: nope.yaml}\n")
    with pytest.raises(ConfigError) as err:
        open_metadataset(str(path))
    assert err.value.path == str(path) and err.value.member == "splits.train.path" and "nope.yaml" in str(err.value)


def test_excluded_samples_are_skipped(tmp_path: Path) -> None:
    d = tmp_path / "x"
    write_primary(str(d), "x", 10, 5, 5, shards=1)
    shardstore.prepare(str(d), split_ratio="1,0,0", num_workers=1)
    split = d / ".nv-meta" / "split.yaml"
    split.write_text(split.read_text().replace("exclude: []", "exclude:\n- parts/x-000000.tar/x_000003"))
    path = tmp_path / "m.yaml"
    path.write_text(V2 + "splits:\n  train:\n    blend_epochized:\n      - {path: x, repetitions: 2}\n")
    md = open_metadataset(str(path))
    got = collections.Counter(s["__key__"] for s in md.iter(shuffle=True))
    assert "x_000003" not in got and len(got) == 9 and set(got.values()) == {2}
    assert len(md) == 18


# ----- joins ---------------------------------------------------------------------------------------
def _tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def join_data(tmp_path: Path) -> Path:
    """main: k000..k009 (json); extra: txt for all but k003 and k007."""
    _tar(tmp_path / "main" / "m.tar", {f"k{i:03d}.json": json.dumps({"i": i}).encode() for i in range(10)})
    _tar(tmp_path / "extra" / "e.tar", {f"k{i:03d}.txt": f"text {i}".encode() for i in range(10) if i not in (3, 7)})
    for name in ("main", "extra"):
        shardstore.prepare(str(tmp_path / name), split_ratio="1,0,0", num_workers=1)
    return tmp_path


def _join_yaml(root: Path, nonmatch: str, form: str = "dict") -> str:
    if form == "dict":
        join = f"join:\n      main: {{path: main}}\n      extra: {{path: extra, nonmatch: {nonmatch}}}\n"
    else:
        join = f"join:\n      - {{path: main}}\n      - {{path: extra, nonmatch: {nonmatch}}}\n"
    path = root / f"join-{nonmatch}-{form}.yaml"
    path.write_text(
        V2 + "splits:\n  train:\n    " + join + "    joiner: {__module__: evil_joiner_module, __class__: Joiner}\n"
    )
    return str(path)


def test_join_nonmatch_error(join_data: Path) -> None:
    path = _join_yaml(join_data, "error")
    with pytest.raises(ConfigError) as err:
        open_metadataset(path)
    assert err.value.path == path and err.value.member == "splits.train.join.extra" and "k003" in str(err.value)
    assert "evil_joiner_module" not in sys.modules  # recorded, never imported


def test_join_nonmatch_skip_and_none(join_data: Path) -> None:
    skip = open_metadataset(_join_yaml(join_data, "skip"))
    got = list(skip.iter())
    assert [s["__key__"] for s in got] == [f"k{i:03d}" for i in range(10) if i not in (3, 7)]
    for s in got:
        i = int(s["__key__"][1:])
        assert json.loads(s["main"]["json"]) == {"i": i} and s["extra"]["txt"] == f"text {i}".encode()
    assert skip.sources[0].spec.joiner == "evil_joiner_module.Joiner"
    none = open_metadataset(_join_yaml(join_data, "none", form="list"))
    got = list(none.iter())
    assert [s["__key__"] for s in got] == [f"k{i:03d}" for i in range(10)]
    assert got[3]["1"] is None and got[7]["1"] is None and got[4]["1"]["txt"] == b"text 4"
    assert "evil_joiner_module" not in sys.modules


def test_join_inside_a_blend_with_subset(join_data: Path) -> None:
    path = join_data / "jb.yaml"
    path.write_text(V2 + textwrap.dedent("""
        splits:
          train:
            blend:
              - weight: 2
                join: {main: {path: main}, extra: {path: extra, nonmatch: skip}}
                joiner: {__module__: x, __class__: Y}
                subset: {range: [0%, 50%]}
                subflavors: {kind: joined}
              - {weight: 1, path: main}
        """))
    md = open_metadataset(str(path))
    assert [round(s.weight, 3) for s in md.sources] == [0.667, 0.333]
    assert [s.name for s in md.sources] == ["join(main, extra)", "main"]
    assert len(md.sources[0]) == 4  # half of the 8 joined rows
    joined = [s for s in md.iter(repeat=False) if s["__source__"].startswith("join(")]
    assert [s["__key__"] for s in joined] == ["k000", "k001", "k002", "k004"]
    assert all(s["__subflavors__"] == {"kind": "joined"} for s in joined)


def test_dataset_paths_lists_each_dataset_once(join_data: Path) -> None:
    """Every split, joined datasets included, each dataset once in the order first named."""
    path = join_data / "paths.yaml"
    join = "{join: [{path: extra}, {path: main}], joiner: {__module__: x, __class__: Y}}"
    path.write_text(V2 + f"splits:\n  train: {{path: extra}}\n  val: {join}\n")  # main: only joined, in val
    assert dataset_paths(str(path)) == [str(join_data / "extra"), str(join_data / "main")]
    with pytest.raises(ConfigError):
        dataset_paths(_join_yaml(join_data, "maybe"))


# ----- bad input --------------------------------------------------------------------------------------
BAD = [
    ("unknown entry key", "blend:\n      - {path: primary_a, wieght: 2}", "splits.train.blend[0].wieght", "unknown key"),
    ("wrong weight type", "blend:\n      - {path: primary_a, weight: heavy}", "splits.train.blend[0].weight", "number"),
    ("bool weight", "blend:\n      - {path: primary_a, weight: true}", "splits.train.blend[0].weight", "number"),
    ("subflavors list", "blend:\n      - {path: primary_a, subflavors: [1]}", "splits.train.blend[0].subflavors", "dict"),
    ("aux not a mapping", "blend:\n      - {path: primary_a, aux: [aux_tar]}", "splits.train.blend[0].aux", "mapping"),
    ("missing aux dataset", "blend:\n      - {path: primary_a, aux: {images: no_such_aux}}", "splits.train.blend[0].aux.images", "not found"),
    ("missing aux folder", "blend:\n      - {path: primary_a, aux: {photos: 'filesystem://nowhere'}}", "splits.train.blend[0].aux.photos", "not found"),
    ("aux folder not prepared", "blend:\n      - {path: primary_a, aux: {photos: aux_folder}}", "splits.train.blend[0].aux.photos", "filesystem://"),
    ("aux path type", "blend:\n      - {path: primary_a, aux: {x: 3}}", "splits.train.blend[0].aux.x", "string"),
    ("missing dataset", "blend:\n      - {path: nowhere}", "splits.train.blend[0].path", "no prepared dataset"),
    ("missing nested yaml", "blend:\n      - {path: nowhere.yaml}", "splits.train.blend[0].path", "not found"),
    ("bad subset", "blend:\n      - {path: primary_a, subset: {range: [0%, 150%]}}", "splits.train.blend[0].subset.range", "100%"),
    ("percent end", "blend:\n      - {path: primary_a, subset: {range: [10%, end]}}", "splits.train.blend[0].subset.range", "percentage"),
    ("subset too big", "blend:\n      - {path: primary_a, subset: {range: [0, 999]}}", "splits.train.blend[0].subset", "does not fit"),
    ("repetitions 0", "blend_epochized:\n      - {path: primary_a, repetitions: 0}", "splits.train.blend_epochized[0].repetitions", "> 0"),
    ("weight in epochized", "blend_epochized:\n      - {path: primary_a, weight: 1}", "splits.train.blend_epochized[0].weight", "unknown key"),
    ("split not mapping", "[1, 2]", "splits.train", "mapping"),
    ("empty split", "{}", "splits.train", "blend, blend_epochized, join, path"),
    ("join no joiner", "join: {a: {path: primary_a}, b: {path: primary_b}}", "splits.train.joiner", "joiner"),
    ("primary nonmatch", "join: [{path: primary_a, nonmatch: skip}, {path: primary_b}]\n    joiner: {__module__: m, __class__: C}", "splits.train.join[0].nonmatch", "primary"),
    ("nonmatch value", "join: [{path: primary_a}, {path: primary_b, nonmatch: maybe}]\n    joiner: {__module__: m, __class__: C}", "splits.train.join[1].nonmatch", "one of"),
]


@pytest.mark.parametrize("body,member,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_yaml_names_file_and_key(poly: dict[str, Any], body: str, member: str, message: str) -> None:
    path = write_yaml(poly, "bad.yaml", V2 + "splits:\n  train:\n    " + body + "\n")
    with pytest.raises(ConfigError) as err:
        open_metadataset(path)
    assert err.value.path == path, str(err.value)
    assert err.value.member == member, str(err.value)
    assert message in str(err.value) and path in str(err.value)


@pytest.mark.parametrize(
    "text,member",
    [
        ("__module__: megatron.energon\n__class__: MetadatasetV3\nsplits: {train: {path: primary_a}}\n", "__class__"),
        ("__module__: os\n__class__: MetadatasetV2\nsplits: {train: {path: primary_a}}\n", "__module__"),
        (V2 + "splitz: {train: {path: primary_a}}\n", "splitz"),
        (V2 + "splits: []\n", "splits"),
        (V2 + "splits: {val: {path: primary_a}}\n", "splits"),
        (V2 + "splits: {train: {blend: [{path: epo.yaml}]}}\n", "splits.train.blend[0]"),
        (V2 + "splits: {train: {blend: [{path: self.yaml}]}}\n", "splits.train.blend[0].path"),
    ],
)
def test_bad_top_level(poly: dict[str, Any], text: str, member: str) -> None:
    write_yaml(poly, "epo.yaml", V2 + "splits: {train: {blend_epochized: [{path: primary_a}]}}\n")
    path = write_yaml(poly, "self.yaml", text)
    with pytest.raises(ConfigError) as err:
        open_metadataset(path)
    assert err.value.path == path and err.value.member == member, str(err.value)


def test_aux_name_not_found_names_yaml_and_key(poly: dict[str, Any]) -> None:
    md = open_metadataset(poly["meta"])
    s = next(iter(md))
    with pytest.raises(AuxNotFoundError) as err:
        s.aux["imagez"]
    assert isinstance(err.value, KeyError)
    assert err.value.path == poly["meta"] and err.value.member.endswith(".aux.imagez")
    assert "images, photos" in str(err.value)


def test_reader_options_are_checked(poly: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="reader options"):
        open_metadataset(poly["meta"], shuffle=True)


def test_meta_sample_pickles(poly: dict[str, Any]) -> None:
    s = next(iter(open_metadataset(poly["meta"])))
    copy = pickle.loads(pickle.dumps(s))
    assert copy == s and copy.aux["images"]["images/00001.jpg"] == media_bytes("image", 1)


# ----- interleave ----------------------------------------------------------------------------------
def test_interleave_datasets(poly: dict[str, Any]) -> None:
    dss = [shardstore.open(p) for p in poly["primaries"].values()]
    got = list(interleave(dss, seed=1, longest=True))
    assert len(got) == 3 * SAMPLES
    for k, tag in enumerate("abc"):
        assert [s["__key__"] for s in got if s["__source__"] == k] == keys(tag, range(SAMPLES))
    short = list(interleave(dss, seed=1))  # stops when the first source runs out
    assert len(short) < 3 * SAMPLES and max(collections.Counter(s["__source__"] for s in short).values()) == SAMPLES
    assert [s["__key__"] for s in interleave(dss, seed=1)] == [s["__key__"] for s in short]
    parts = [list(interleave(dss, longest=True).iter(worker_id=w, num_workers=2)) for w in range(2)]
    assert sorted(s["__key__"] for p in parts for s in p) == sorted(s["__key__"] for s in got)


def test_interleave_proportions(poly: dict[str, Any]) -> None:
    n = 20_000
    uniform = collections.Counter(x for x in itertools.islice(interleave([itertools.repeat(i) for i in range(4)], seed=3), n))
    weighted = collections.Counter(
        x for x in itertools.islice(interleave([itertools.repeat(0), itertools.repeat(1)], weights=[1, 4]), n)
    )
    for counts, probs in ((uniform, [0.25] * 4), (weighted, [0.2, 0.8])):
        for i, p in enumerate(probs):
            assert abs(counts[i] - n * p) < 5 * math.sqrt(n * p * (1 - p)), counts
    with pytest.raises(ConfigError):
        interleave([[1], [2]], weights=[1])
    with pytest.raises(ConfigError):
        interleave([])


# ----- info and check ----------------------------------------------------------------------------------
def test_info_summarises_every_split(poly: dict[str, Any]) -> None:
    path = write_yaml(poly, "info.yaml", V2 + """
        splits:
          train:
            blend:
              - {weight: 1, path: primary_a, aux: {images: aux_tar, photos: 'filesystem://aux_folder'}}
              - {weight: 3, path: primary_b, subset: {range: [0%, 25%]}, aux: {images: missing_aux}}
          val:
            path: nowhere
        """)
    info = metadataset_info(path)
    train = info["splits"]["train"]
    assert info["class"] == "MetadatasetV2" and train["mode"] == "blend" and train["samples"] == SAMPLES + 10
    a, b = train["sources"]
    assert (a["weight"], b["weight"]) == (0.25, 0.75) and b["samples"] == 10 and b["subset"] == [0, 10]
    assert a["aux"]["images"] == {"path": poly["aux_tar"], "kind": "dataset", "resolves": True, "files": 60}
    assert a["aux"]["photos"]["resolves"] is True and a["aux"]["photos"]["kind"] == "folder"
    assert b["aux"]["images"]["resolves"] is False and "missing_aux" in b["aux"]["images"]["error"]
    assert "nowhere" in info["splits"]["val"]["error"]


def test_check_finds_missing_referenced_files(poly: dict[str, Any], tmp_path: Path) -> None:
    ok = metadataset_check(poly["meta"], refs=["json[image]", "photos:json[photo]"])
    assert ok.ok and ok.samples == 3 * SAMPLES and ok.references == 2 * 3 * SAMPLES, ok.problems
    # a primary naming 60 images of which the aux store has only 30
    bad = tmp_path / "bad"
    write_primary(str(bad), "z", 30, images=60, photos=30, shards=1)
    shardstore.prepare(str(bad), split_ratio="1,0,0", num_workers=1)
    path = tmp_path / "m.yaml"
    small = tmp_path / "small_aux"
    from make_polylithic import write_aux_tar

    write_aux_tar(str(small), 30, shards=1)
    shardstore.prepare(str(small), split_ratio="1,0,0", num_workers=1)
    path.write_text(V2 + "splits:\n  train:\n    path: bad\n    aux: {images: small_aux}\n")
    report = metadataset_check(str(path), refs=["json[image]"])
    expected = [
        s for s in shardstore.open(str(bad)) if int(json.loads(s["json"])["image"][7:12]) >= 30
    ]
    assert expected and len(report.problems) == len(expected)
    assert expected[0]["__key__"] in report.problems[0] and "images/000" in report.problems[0]
    missing_store = metadataset_check(str(path), refs=["photos:json[photo]"])
    assert not missing_store.ok and "photos" in missing_store.problems[0]


# ----- CLI ---------------------------------------------------------------------------------------------
def test_cli_info_and_check_on_a_metadataset(poly: dict[str, Any]) -> None:
    from click.testing import CliRunner

    from shardstore.cli import main

    run = CliRunner().invoke
    r = run(main, ["info", poly["meta"]])
    assert r.exit_code == 0, r.output
    assert "train: blend, 3 sources, 120 samples" in r.output and "primary_b  [train] weight 0.3333, 40 samples" in r.output
    assert f"aux images: dataset {poly['aux_tar']}, 60 files -- ok" in r.output
    r = run(main, ["info", poly["meta"], "--json"])
    assert json.loads(r.output)["splits"]["train"]["samples"] == 120
    r = run(main, ["check", poly["meta"], "--ref", "json[image]", "--ref", "photos:json[photo]"])
    assert r.exit_code == 0 and "OK (3 sources, 120 samples, 240 references" in r.output, r.output
    r = run(main, ["check", poly["meta"], "--ref", "images:json[photo]"])
    assert r.exit_code == 1 and r.output.count("problem:") == 100 and "not found in aux 'images'" in r.output
    r = run(main, ["check", poly["aux_tar"], "--ref", "json[image]"])
    assert r.exit_code == 2 and "--ref applies to a metadataset" in r.output
    bad = write_yaml(poly, "cli-bad.yaml", V2 + "splits:\n  train: {path: primary_a, aux: {images: gone}}\n")
    r = run(main, ["info", bad])
    assert r.exit_code == 0 and "aux images: dataset" in r.output and "MISSING" in r.output
    r = run(main, ["check", bad, "--json"])
    assert r.exit_code == 1 and "splits.train.aux.images" in json.loads(r.output)["problems"][0]
    r = run(main, ["check", write_yaml(poly, "cli-bad2.yaml", V2 + "splits: {train: {path: a, wat: 1}}\n")])
    assert r.exit_code == 1 and "shardstore: error:" in r.output and "wat" in r.output


def test_dataloader_workers_split_a_metadataset(poly: dict[str, Any]) -> None:
    """Inside torch DataLoader workers the worker id and count are picked up by themselves."""
    torch = pytest.importorskip("torch")

    md = open_metadataset(poly["meta"])
    assert [s.name for s in pickle.loads(pickle.dumps(md)).sources] == [s.name for s in md.sources]

    class Stream(torch.utils.data.IterableDataset):  # type: ignore[misc]
        def __iter__(self) -> Any:
            return md.iter(repeat=False, shuffle=True, seed=4, cook=lambda s: (s["__source__"], s["__key__"]))

    loader = torch.utils.data.DataLoader(
        Stream(), num_workers=2, batch_size=None, multiprocessing_context="fork"
    )
    got = collections.Counter(tuple(x) for x in loader)
    assert len(got) == 3 * SAMPLES and set(got.values()) == {1}


def test_reader_options_decode_and_typed_samples(poly: dict[str, Any]) -> None:
    decoded = next(iter(open_metadataset(poly["meta"], decode=True)))
    assert isinstance(decoded, MetaSample) and isinstance(decoded["json"], dict)
    assert decoded.aux["images"][decoded["json"]["image"]][:6] == b"image-"
    typed = next(iter(open_metadataset(poly["meta"], field_map={"text": "txt"}, decode=True)))
    assert type(typed).__name__ == "TextSample" and typed.text.endswith("sample 0")
    assert typed.__subflavors__ == {"origin": typed.__key__[0]} and typed.__source__.startswith("primary_")
    assert typed.aux["photos"].get("photos/00001.png") == media_bytes("photo", 1)

"""Polylithic datasets on the S3 test server: a metadataset YAML, its primaries, an aux tar dataset and
an aux folder all in a bucket (and a local YAML pointing into the bucket), read with range requests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from make_polylithic import make_polylithic, media_bytes

from shardstore.errors import ConfigError, PathEscapeError, SampleNotFoundError
from shardstore.filestores import FolderStore, IndexedTarStore
from shardstore.metadataset import metadataset_check, metadataset_info, open_metadataset

pytestmark = pytest.mark.s3

SAMPLES = 20


@pytest.fixture(scope="module")
def local_poly(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return make_polylithic(str(tmp_path_factory.mktemp("poly-s3")), primaries=2, samples=SAMPLES, images=40, photos=20)


@pytest.fixture
def remote(local_poly: dict[str, Any], s3_url: Callable[[str], str], upload: Callable[..., str]) -> str:
    """The whole polylithic folder (YAML, primaries, aux_tar with its .nv-meta, aux_folder) in the bucket."""
    return upload(local_poly["root"], s3_url("poly"))


def check_samples(md: Any) -> None:
    samples = list(md.iter(repeat=False))
    assert len(samples) == 2 * SAMPLES
    assert sorted(s["__key__"] for s in samples) == sorted(
        f"{t}_{i:06d}" for t in "ab" for i in range(SAMPLES)
    )
    for s in samples:
        rec = json.loads(s["json"])
        assert s.aux["images"][rec["image"]] == media_bytes("image", int(rec["image"][7:12]))
        assert s.aux["photos"][rec["photo"]] == media_bytes("photo", int(rec["photo"][7:12]))
        assert s["__subflavors__"] == {"origin": s["__key__"][0]}


def test_yaml_datasets_and_aux_all_on_s3(remote: str, storage_options: dict[str, Any]) -> None:
    md = open_metadataset(f"{remote}/meta.yaml", storage_options=storage_options)
    assert [s.dataset.url for s in md.sources] == [f"{remote}/primary_a", f"{remote}/primary_b"]
    images, photos = md.sources[0].aux["images"], md.sources[0].aux["photos"]
    assert isinstance(images, IndexedTarStore) and images.url == f"{remote}/aux_tar"
    assert isinstance(photos, FolderStore) and photos.url == f"{remote}/aux_folder"
    check_samples(md)


def test_local_yaml_pointing_into_the_bucket(
    remote: str, storage_options: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "meta.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        + "".join(
            f"      - path: {remote}/primary_{t}\n        subflavors: {{origin: {t}}}\n"
            f"        aux: {{images: {remote}/aux_tar, photos: 'filesystem+{remote}/aux_folder'}}\n"
            for t in "ab"
        )
    )
    check_samples(open_metadataset(str(path), storage_options=storage_options))


def test_stores_on_s3_batch_and_refuse_escapes(remote: str, storage_options: dict[str, Any]) -> None:
    images = IndexedTarStore(f"{remote}/aux_tar", storage_options=storage_options)
    names = [f"images/{i:05d}.jpg" for i in (39, 0, 7, 8, 9, 21)]
    assert images.get_many(names) == [media_bytes("image", int(n[7:12])) for n in names]
    assert "images/00099.jpg" not in images and images.get("images/00099.jpg") is None
    photos = FolderStore(f"{remote}/aux_folder", storage_options=storage_options)
    assert photos.exists() and not FolderStore(f"{remote}/nothing_here", storage_options=storage_options).exists()
    wanted = [f"photos/{i:05d}.png" for i in (19, 3, 3, 0)]
    assert photos.get_many(wanted) == [media_bytes("photo", int(n[7:12])) for n in wanted]
    assert "photos/00020.png" not in photos and "photos" not in photos
    with pytest.raises(SampleNotFoundError):
        photos["photos/00020.png"]
    for bad in ("../poly/meta.yaml", "/shardstore-test/x", "photos/../../x"):
        with pytest.raises(PathEscapeError):
            photos[bad]


def test_bad_aux_paths_on_s3(remote: str, storage_options: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {remote}/primary_a\n    aux: {{images: {remote}/no_aux, photos: 'filesystem+{remote}/no_folder'}}\n"
    )
    with pytest.raises(ConfigError) as err:
        open_metadataset(str(path), storage_options=storage_options)
    assert err.value.path == str(path) and err.value.member == "splits.train.aux.images"
    info = metadataset_info(str(path), storage_options=storage_options)
    aux = info["splits"]["train"]["sources"][0]["aux"]
    assert aux["images"]["resolves"] is False and aux["photos"]["resolves"] is False


def test_check_references_on_s3(
    local_poly: dict[str, Any], s3_url: Callable[[str], str], upload: Callable[..., str], storage_options: dict[str, Any],
    tmp_path: Path,
) -> None:
    copy = tmp_path / "poly"
    shutil.copytree(local_poly["root"], copy)
    for p in sorted((copy / "aux_folder" / "photos").iterdir())[10:]:
        p.unlink()  # half the photos gone
    remote = upload(copy, s3_url("poly"))
    report = metadataset_check(f"{remote}/meta.yaml", refs=["json[image]", "photos:json[photo]"], storage_options=storage_options)
    missing = [
        s["__key__"] for s in open_metadataset(local_poly["meta"]).iter(repeat=False)
        if int(json.loads(s["json"])["photo"][7:12]) >= 10
    ]
    assert report.samples == 2 * SAMPLES and report.references == 4 * SAMPLES
    assert missing and len(report.problems) == len(missing)
    assert all("photos/000" in p and "not found in aux 'photos'" in p for p in report.problems)

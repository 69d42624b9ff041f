"""Energon 7.4's last prepare flags and command names: ``--dataset-yaml-name``, ``--tmp-path`` (its S3
half is in tests/s3/test_parity_s3.py) and ``lint`` as another name of ``check``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigError


def test_dataset_yaml_name_writes_that_file_and_keeps_dataset_yaml(make_shards) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=5)
    shardstore.prepare(str(path), split_ratio="1,0,0", sample_type="CrudeWebdataset", num_workers=1)
    first = (path / ".nv-meta" / "dataset.yaml").read_bytes()
    result = CliRunner().invoke(
        main,
        ["prepare", str(path), "--split-ratio", "1,0,0", "--force-overwrite", "--non-interactive", "--sample-type",
         "CaptioningSample", "--field-map", '{"image": "jpg", "caption": "txt"}', "--dataset-yaml-name", "typed.yaml", "-q"],
    )
    assert result.exit_code == 0, result.output
    assert (path / ".nv-meta" / "dataset.yaml").read_bytes() == first  # the other config stays
    typed = (path / ".nv-meta" / "typed.yaml").read_text()
    assert "CaptioningSample" in typed and "field_map" in typed


@pytest.mark.parametrize("name", ["../escape.yaml", "a/b.yaml", "index.sqlite", ".info.json", ""])
def test_dataset_yaml_name_must_be_a_plain_name(make_shards, name: str) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=1, samples=3)
    with pytest.raises(ConfigError, match="dataset-yaml-name"):
        shardstore.prepare(str(path), split_ratio="1,0,0", sample_type="CrudeWebdataset", dataset_yaml_name=name)
    assert not (path / ".nv-meta").exists() and not (path.parent / "escape.yaml").exists()


def test_tmp_path_is_ignored_for_a_local_dataset(make_shards, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As in Energon: the local folder for building the index is for remote datasets only."""
    path = make_shards(shards=1, samples=3)
    scratch = tmp_path / "scratch"
    shardstore.prepare(str(path), split_ratio="1,0,0", tmp_path=str(scratch))
    assert (path / ".nv-meta" / "index.sqlite").is_file()
    assert not scratch.exists()


def test_lint_is_check(prepared: Path) -> None:
    lint = CliRunner().invoke(main, ["lint", str(prepared), "--json"])
    check = CliRunner().invoke(main, ["check", str(prepared), "--json"])
    assert lint.exit_code == check.exit_code == 0, lint.output
    assert '"ok": true' in lint.stdout
    (prepared / "parts" / "data-000001.tar").unlink()
    broken = CliRunner().invoke(main, ["lint", str(prepared)])
    assert broken.exit_code == 1 and "data-000001.tar" in broken.stdout

"""dataset.yaml's ``sample_loader``/``part_filter`` (code shipped with the data) run only with
``trust_dataset_code=True`` / ``--trust-dataset-code``; without it nothing of the module runs and a typed
read says why. The loader is written here; it leaves a marker file whenever its module is imported."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigError, PathEscapeError

LOADER = '''
import json, pathlib
MARK = pathlib.Path(__file__).resolve().parent.parent / "loader-ran"
MARK.write_text("imported")

def sample_loader(raw):
    parts = sorted(k for k in raw if not k.startswith("__"))
    MARK.write_text(json.dumps(parts))
    return dict(text=raw["txt"].upper() + " / " + raw["__key__"])

def part_filter(part):
    return part == "txt"
'''


def with_dataset_code(prepared: Path, loader: str) -> Path:
    """``prepared`` as a dataset of Energon's legacy form: ``TextSample``s built by ``loader``'s
    ``sample_loader`` from the parts its ``part_filter`` keeps (``.nv-meta/sample_loader.py``)."""
    meta = prepared / ".nv-meta"
    (meta / "dataset.yaml").write_text(textwrap.dedent("""\
        sample_type:
          __module__: megatron.energon
          __class__: TextSample
        sample_loader: sample_loader.py:sample_loader
        part_filter: sample_loader.py:part_filter
        """))
    (meta / "sample_loader.py").write_text(loader)
    return prepared


@pytest.fixture
def coded(prepared: Path) -> Path:
    return with_dataset_code(prepared, LOADER)


def test_nothing_runs_without_the_opt_in(coded: Path) -> None:
    raw = shardstore.open(str(coded))[0]
    assert set(raw.parts) == {"jpg", "txt", "json"}
    with pytest.raises(ConfigError, match="trust_dataset_code=True") as err:
        shardstore.open(str(coded), field_map=True)[0]
    assert "comes with the dataset" in str(err.value)
    out = CliRunner().invoke(main, ["preview", str(coded), "-n", "1", "--json"])
    assert out.exit_code == 0 and "txt" in json.loads(out.stdout)[0]["parts"]
    info = CliRunner().invoke(main, ["info", str(coded)])
    assert "sample_loader.py:sample_loader" in info.stdout
    assert not (coded / "loader-ran").exists()


def test_the_loader_runs_with_the_opt_in(coded: Path) -> None:
    ds = shardstore.open(str(coded), trust_dataset_code=True)
    sample = ds[3]
    assert type(sample).__name__ == "TextSample"
    key = sample.__key__
    assert sample.text == shardstore.open(str(coded))[3]["txt"].decode().upper() + " / " + key
    assert json.loads((coded / "loader-ran").read_text()) == ["txt"]  # part_filter: only txt reached the loader
    assert sample.__sources__[0].file_names == (f"{key}.txt",)
    assert len([s for s in ds.iter(num_workers=1, worker_id=0)]) == len(ds)
    out = CliRunner().invoke(main, ["preview", str(coded), "-n", "1", "--trust-dataset-code"])
    assert out.exit_code == 0, out.output
    assert "text" in out.stdout and " / " in out.stdout


def test_a_loader_outside_nv_meta_is_refused(coded: Path) -> None:
    (coded / "evil.py").write_text(LOADER)
    text = (coded / ".nv-meta" / "dataset.yaml").read_text().replace("sample_loader.py:sample_loader", "../evil.py:sample_loader")
    (coded / ".nv-meta" / "dataset.yaml").write_text(text)
    with pytest.raises(PathEscapeError):
        shardstore.open(str(coded), trust_dataset_code=True)[0]
    assert not (coded / "loader-ran").exists()


def test_part_filter_as_a_list(coded: Path) -> None:
    text = (coded / ".nv-meta" / "dataset.yaml").read_text().replace("part_filter: sample_loader.py:part_filter", "part_filter: [txt, json]")
    (coded / ".nv-meta" / "dataset.yaml").write_text(text)
    assert shardstore.open(str(coded), trust_dataset_code=True)[0].text.endswith(" / s00000_000000")
    assert json.loads((coded / "loader-ran").read_text()) == ["json", "txt"]

"""The error edge (issue 20, point 6): every exception of a library shardstore drives becomes a typed
``ShardstoreError`` carrying the original as ``__cause__`` (``errors.from_library``,
``errors.library_errors``) and, on the command line, one line ``shardstore: error: ...`` with exit
code 1, never a traceback; malformed JSON fields of LeRobot and RLDS sources are named by file and
field; a full disk (a real tmpfs of 1 MiB, mounted here) is a clear error that leaves OUT as it
was and no staging behind, and never crashes the process."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ci import in_ci
from episode_datasets import write_episode_dataset
from make_episode_wds import rollouts, write_shard

from shardstore.errors import (
    ConfigError,
    DecodeError,
    IndexCorruptError,
    ShardstoreError,
    StorageError,
    from_library,
    library_errors,
)

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardstore.cli", *map(str, args)],
        env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), capture_output=True, text=True, timeout=300,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The command failed with exit code 1 and one line ``shardstore: error: ...`` holding every
    ``expected`` text; returns the line."""
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    line = proc.stderr
    assert line.startswith("shardstore: error: ") and line.count("\n") == 1, line
    for text in expected:
        assert text in line, (text, line)
    return line


# ----- the library's own exceptions, raised for real, become typed errors -------------------------
def _raised(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the point: whatever the library raises)
        return e
    raise AssertionError("did not raise")


def _library_exceptions(tmp_path: Path) -> Iterator[tuple[str, BaseException, type[ShardstoreError]]]:
    import av
    import h5py
    import pyarrow.parquet as pq

    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00not a file of any format\xff" * 40)
    yield "json", _raised(lambda: json.loads('{"fps": }')), ConfigError
    yield "utf-8", _raised(lambda: b"ok \xff".decode()), DecodeError
    yield "sqlite3", _raised(lambda: sqlite3.connect(garbage).execute("SELECT 1 FROM info").fetchall()), IndexCorruptError
    yield "pyarrow", _raised(lambda: pq.read_table(garbage)), DecodeError
    yield "h5py open", _raised(lambda: h5py.File(garbage, "r")), StorageError
    with h5py.File(tmp_path / "f.h5", "w") as f:
        f["x"] = np.arange(3)
    with h5py.File(tmp_path / "f.h5", "r") as f:
        yield "h5py KeyError", _raised(lambda: f["missing"]), DecodeError
    yield "PyAV", _raised(lambda: av.open(str(garbage))), DecodeError
    yield "RecursionError", _raised(lambda: json.loads("[" * 100_000 + "]" * 100_000)), DecodeError
    yield "MemoryError", _raised(lambda: np.empty(2**62, dtype=np.uint8)), StorageError
    yield "OSError", _raised(lambda: open(tmp_path / "absent")), StorageError


def test_library_exceptions_become_typed_one_line_errors_with_their_cause(tmp_path: Path) -> None:
    for name, exc, kind in _library_exceptions(tmp_path):
        with pytest.raises(kind) as info, library_errors(str(tmp_path / "data.bin"), "episode 3, field 'fps'"):
            raise exc
        err = info.value
        assert err.__cause__ is exc, name
        assert "\n" not in str(err) and len(str(err)) < 700, (name, str(err))
        assert str(err).startswith(f"{tmp_path / 'data.bin'}, member \"episode 3, field 'fps'\"") or str(err).startswith(
            f"{tmp_path / 'data.bin'}, member 'episode 3, field \\'fps\\''"
        ), (name, str(err))
        bare = from_library(exc)  # without a place: what the exception itself names
        assert isinstance(bare, kind) and "\n" not in str(bare), name
    assert from_library(_raised(lambda: open(tmp_path / "absent"))).path == str(tmp_path / "absent")
    own = ConfigError("x", path="p")
    assert from_library(own) is own


def test_the_cli_edge_maps_a_library_exception_that_escapes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The last resort: an exception no reader converted (injected here, since the readers convert
    the ones they meet) still prints one line naming what it can, with exit code 1."""
    from click.testing import CliRunner

    import shardstore.convert.minari as minari_pkg
    from shardstore.cli import main

    for name, exc, _ in _library_exceptions(tmp_path):
        def fail(*args: Any, _exc: BaseException = exc, **kwargs: Any) -> Any:
            raise _exc

        monkeypatch.setattr(minari_pkg, "export_minari", fail)
        result = CliRunner().invoke(main, ["export", "minari", str(tmp_path), str(tmp_path / "out")])
        assert result.exit_code == 1, (name, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardstore: error: ") and "Traceback" not in result.output, name


# ----- malformed JSON fields name the file and the field --------------------------------------------
@pytest.fixture(scope="module")
def lerobot_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from make_lerobot import make_lerobot

    root = tmp_path_factory.mktemp("lerobot")
    cams = {"observation.images.top": "h264"}
    return {v: Path(make_lerobot(str(root / v), version=v, episodes=2, frames=[4, 3], size=16, cameras=cams))
            for v in ("v2.1", "v3.0")}


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    obj = json.loads(path.read_text())
    edit(obj)
    path.write_text(json.dumps(obj))


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(obj: dict[str, Any]) -> None:
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    return edit


@pytest.mark.parametrize(("version", "keys", "value", "field"), [
    ("v2.1", ("fps",), "fast", "fps must be"),
    ("v3.0", ("fps",), float("nan"), "fps must be"),
    ("v3.0", ("features", "observation.state", "shape"), ["six"], "feature 'observation.state': shape must be"),
    ("v2.1", ("features", "observation.state", "dtype"), None, "features.observation.state.dtype: "),
    ("v2.1", ("data_path",), 5, "data_path: "),
    ("v3.0", ("splits",), "train", "splits: "),
])
def test_malformed_lerobot_info_fields(
    lerobot_sources: dict[str, Path], tmp_path: Path, version: str, keys: tuple[str, ...], value: Any, field: str
) -> None:
    src = tmp_path / "src"
    shutil.copytree(lerobot_sources[version], src)
    _edit_json(src / "meta" / "info.json", _set(*keys, value=value))
    one_line_error(_cli("import", "lerobot", src, tmp_path / "out"), f"{src / 'meta' / 'info.json'}", field)
    assert not (tmp_path / "out").exists()
    check = _cli("check", "lerobot", src)
    assert check.returncode == 1 and "Traceback" not in check.stderr and field.rstrip(": ") in check.stdout


def test_a_length_that_is_not_a_number(lerobot_sources: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(lerobot_sources["v2.1"], src)
    episodes = src / "meta" / "episodes.jsonl"
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    rows[1]["length"] = "twelve"
    episodes.write_text("".join(json.dumps(r) + "\n" for r in rows))
    one_line_error(_cli("import", "lerobot", src, tmp_path / "out"), str(episodes), "row 2: 'length' is 'twelve'")


def test_a_corrupt_parquet_is_named_by_import_and_listed_by_check(lerobot_sources: dict[str, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(lerobot_sources["v3.0"], src)
    data = next((src / "data").rglob("*.parquet"))
    data.write_bytes(data.read_bytes()[:-200])
    one_line_error(_cli("import", "lerobot", src, tmp_path / "out"), str(data))
    check = _cli("check", "lerobot", src)
    assert check.returncode == 1 and "Traceback" not in check.stderr and str(data) in check.stdout


@pytest.mark.parametrize(("edit", "field"), [
    (_set("splits", value="train"), "splits"),
    (lambda o: o["splits"][0].update(shardLengths=[None]), "splits[0].shardLengths"),
    (lambda o: o["splits"][0].update(name=5), "splits[0]"),
])
def test_malformed_rlds_dataset_info(tmp_path: Path, edit: Callable[[dict[str, Any]], None], field: str) -> None:
    src = tmp_path / "robo" / "1.0.0"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_rlds.py"), str(src), "--episodes", "3", "--val", "1"],
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _edit_json(src / "dataset_info.json", edit)
    one_line_error(_cli("import", "rlds", src, tmp_path / "out"), str(src / "dataset_info.json"), repr(field))


# ----- a full disk --------------------------------------------------------------------------------------
@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 1 MiB (a real ENOSPC), unmounted after."""
    folder = tmp_path / "small"
    folder.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        if in_ci():
            pytest.fail(f"cannot mount a tmpfs: {proc.stderr}")
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 2.5 MB of incompressible steps: more than the full disk holds in any format."""
    return write_episode_dataset(tmp_path_factory.mktemp("big") / "ds", 8, 200, width=400)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_episode_dataset(tmp_path_factory.mktemp("small") / "ds", 2, 3, seed=1)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["minari", "rlds", "lerobot", "episode-wds"])
def test_an_export_onto_a_full_disk(full_disk: Path, big_dataset: Path, small_dataset: Path, fmt: str) -> None:
    """The old export stays whole, the error is one line naming the disk's error, nothing of the
    failed run is left, and the process ends normally (``export minari`` died of SIGSEGV here)."""
    out = full_disk / "x"
    rate = ["--fps", "10", "--task", "reach"] if fmt == "lerobot" else []  # the datasets state neither
    assert _cli("export", fmt, small_dataset, out, *rate).returncode == 0
    before = _tree(out)
    proc = _cli("export", fmt, big_dataset, out, "--force", *rate)
    one_line_error(proc, "No space left on device")
    assert _tree(out) == before
    assert sorted(p.name for p in full_disk.iterdir() if not p.name.startswith("x.report.")) == ["x"]


def test_an_import_onto_a_full_disk(full_disk: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_shard(src / "shard-000000.tar", {}, rollouts(np.random.default_rng(0), [60, 60], (3, 48, 48)))
    one_line_error(_cli("import", "episode-wds", src, full_disk / "ds"), "No space left on device")
    assert list(full_disk.iterdir()) == []

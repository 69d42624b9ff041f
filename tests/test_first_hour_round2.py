"""The first hour, round 2 (issue 26): the rough edges a newcomer hit, one test or a few each.

Elsewhere: copies (point 1) in tests/test_copied_dataset.py; the missing mount point (point 4) in
tests/mount/test_mount.py; the check subcommands in tests/test_cli.py; the report shape of every
import and export in tests/convert/test_cli_reports.py; the task string (point 8) in
tests/convert/test_lerobot.py.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def cli(*args: str | Path) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def one_line_error(code: int, err: str) -> str:
    assert code == 1 and err.startswith("shardstore: error: ") and err.count("\n") == 1, err
    return err


# ----- 5. python -m shardstore, -V ----------------------------------------------------------------
def test_python_m_shardstore_and_dash_v() -> None:
    from importlib.metadata import version

    for flag in ("-V", "--version"):
        res = subprocess.run([sys.executable, "-m", "shardstore", flag], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stdout.strip() == f"shardstore, version {version('shardstore')}"
    res = subprocess.run([sys.executable, "-m", "shardstore", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("Usage: shardstore ")


# ----- 5. with --json, errors are JSON on stdout -------------------------------------------------
def test_json_errors_go_to_stdout(tmp_path: Path) -> None:
    for args in (["info"], ["check"], ["ls"], ["preview"]):
        code, out, err = cli(*args, tmp_path / "missing", "--json")
        assert code == 1 and err == "", args
        error = json.loads(out)["error"]
        assert error["type"] == "DatasetNotPreparedError" and error["path"] == str(tmp_path / "missing")
        assert error["message"].startswith(str(tmp_path / "missing"))
    one_line_error(*cli("info", tmp_path / "missing")[::2])  # without --json: the one line on stderr


# ----- 5. preview --json gives values ------------------------------------------------------------
def test_preview_json_gives_values_not_reprs(prepared: Path) -> None:
    code, out, _ = cli("preview", prepared, "-n", "2", "--json")
    assert code == 0
    items = json.loads(out)
    ds = shardstore.open(str(prepared))
    for item in items:
        sample = ds[item["position"]]
        parts = item["parts"]
        assert parts["json"] == json.loads(sample["json"])  # an object, not its text
        assert parts["txt"] == sample["txt"].decode()  # a string, not "'...'"
        assert isinstance(parts["jpg"], str) and "bytes" in parts["jpg"]  # media: its description line


# ----- 6. --num-workers 0 and -3 -----------------------------------------------------------------
@pytest.mark.parametrize("n", ["0", "-3"])
def test_num_workers_below_one_is_refused(make_shards, n: str) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=3)
    for command in (["prepare", path, "--non-interactive", "--split-ratio", "1,0,0"], ["prepare-media", path,
                    "--media-metadata-by-extension"]):
        code, out, err = cli(*command, "--num-workers", n)
        assert code == 2 and "--num-workers" in err and "x>=1" in err
    with pytest.raises(ConfigError, match="num_workers.*at least 1"):
        shardstore.prepare(str(path), split_ratio="1,0,0", num_workers=int(n))
    assert not (path / ".nv-meta").exists()


# ----- 6. an OUT whose parent cannot be written ---------------------------------------------------
@pytest.mark.parametrize("out", ["/proc/shardstore-out", "/proc/self/no/out", "/sys/shardstore-out"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path: Path, out: str) -> None:
    import numpy as np

    from shardstore.episodes import EpisodeWriter

    ds = tmp_path / "eps"
    with EpisodeWriter(str(ds)) as w:
        for n in (3, 5):
            w.write_steps({"obs": np.zeros((n, 2), np.float32), "act": np.ones(n, np.int8)}, terminal=True)
    for command in (["export", "episode-wds", ds, out], ["export", "minari", ds, out]):
        code, _, err = cli(*command)
        assert str(Path(out).parent) in one_line_error(code, err), command


# ----- 6. a file that is not Minari names the file -----------------------------------------------
def test_import_minari_of_another_file_names_it(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / "notminari.hdf5", "w") as f:
        f["x"] = [1, 2]
    (tmp_path / "junk.hdf5").write_bytes(b"junk")
    for name in ("notminari.hdf5", "junk.hdf5"):
        err = one_line_error(*cli("import", "minari", tmp_path / name, tmp_path / "out")[::2])
        assert f"{tmp_path / name}: not a Minari dataset" in err
    err = one_line_error(*cli("import", "minari", tmp_path, tmp_path / "out")[::2])
    assert f"{tmp_path}: not a Minari dataset" in err and ".:" not in err


# ----- 6. the right noun instead of "member" ------------------------------------------------------
def test_places_that_are_not_members_are_named_as_what_they_are(make_shards) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=3)
    code, _, err = cli("prepare", path, "--non-interactive", "--split-parts", "train:(")
    assert "option '--split-parts train'" in one_line_error(code, err) and "member" not in err
    from shardstore.episodes import EpisodeWriter

    with pytest.raises(ConfigError) as info:
        EpisodeWriter(str(path / "eps"), granularity="frame")
    assert "argument 'granularity'" in str(info.value) and "member" not in str(info.value)


# ----- 6 (LeRobot). "length": "twelve", FFmpeg's own lines -------------------------------------------
def _lerobot(tmp_path: Path) -> Path:
    from make_lerobot import make_lerobot

    return Path(make_lerobot(str(tmp_path / "lr"), version="v2.1", episodes=2, frames=[3, 3], size=16,
                             cameras={"observation.images.front": "h264"}))


def test_episodes_jsonl_length_that_is_not_a_number(tmp_path: Path) -> None:
    src = _lerobot(tmp_path)
    path = src / "meta/episodes.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["length"] = "twelve"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for command in (["import", "lerobot", src, tmp_path / "out"], ["check", "lerobot", src]):
        code, out, err = cli(*command)
        text = err if command[0] == "import" else out
        assert code == 1 and "episodes.jsonl" in text and "row 2: 'length' is 'twelve', not a whole number" in text
        assert "invalid literal" not in text and "lacks" not in text


def test_ffmpeg_log_lines_do_not_leak_before_the_error(tmp_path: Path) -> None:
    src = _lerobot(tmp_path)
    [video] = sorted(src.glob("videos/**/episode_000001.mp4"))
    video.write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(range(256)) * 8)  # an mp4 header, then garbage
    res = subprocess.run([sys.executable, "-m", "shardstore", "import", "lerobot", str(src), str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stderr.startswith("shardstore: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "episode_000001.mp4" in res.stderr


# ----- 9. tools/make_lerobot.py: quiet, and every option has help ---------------------------------
def test_make_lerobot_is_quiet_and_documents_its_options(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(TOOLS / "make_lerobot.py"), str(tmp_path / "lr"), "--episodes", "2", "--frames", "3",
         "--size", "16"],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr == "" and "Svt[" not in res.stdout and res.stdout.count("\n") == 1  # one line: what it wrote
    assert {p.suffix for p in (tmp_path / "lr/videos").rglob("*.mp4")} == {".mp4"}
    sys.path.insert(0, str(TOOLS))
    import make_lerobot

    parser = argparse.ArgumentParser()
    captured: list[argparse.ArgumentParser] = []
    real = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *a: object, **k: object) -> object:
        captured.append(self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign,assignment]
    try:
        with pytest.raises(SystemExit):
            make_lerobot.main()
    finally:
        argparse.ArgumentParser.parse_args = real  # type: ignore[method-assign]
    parser = captured[0]
    undocumented = [a.dest for a in parser._actions if not a.help]
    assert not undocumented


# ----- 7. docs --------------------------------------------------------------------------------------
def test_docs_points() -> None:
    cli_md = (ROOT / "docs/cli.md").read_text()
    index = re.search(r"^Commands: (.*?)\n\n", cli_md, re.M | re.S)
    assert index is not None
    links = re.findall(r"\[([a-z -]+)\]\(#", index.group(1))
    assert len(links) == len(set(links)) and {"mount", "umount", "import", "export"} <= set(links)
    assert "## Shell completion" in cli_md and "_SHARDSTORE_COMPLETE=bash_source" in cli_md
    robotics = (ROOT / "docs/robotics.md").read_text()
    contents = robotics.split("\n## ", 1)[0]
    assert "(#lerobot)" in contents and "(#rlds)" in contents
    index_md = (ROOT / "docs/index.md").read_text()
    assert "LeRobot" in index_md and "RLDS" in index_md
    assert "./my-dataset/.nv-meta/" not in (ROOT / "docs/quickstart.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "source .venv/bin/activate" in readme and "make test-fast" in readme
    assert "`ls`, `preview` (all with `--json`)" in readme and "apt-get" in readme and "root" in readme
    make_help = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "make test-fast" in make_help and "make demo" in make_help

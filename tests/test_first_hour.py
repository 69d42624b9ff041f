"""What a newcomer hits in the first hour (issue 10): one test (or a few) per rough edge.

The documented examples themselves run in tests/test_docs_examples.py; the split mount in
tests/mount/test_mount.py; the Ctrl-C tests in background runs in tests/test_prepare_errors.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from click.testing import CliRunner

import shardstore
from shardstore import inspection
from shardstore.cli import main
from shardstore.errors import ConfigError, DatasetNotPreparedError, SampleNotFoundError

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"


def cli(*args: str | Path, input: str | None = None) -> tuple[int, str]:
    """Exit code and output (stdout and stderr together) of ``shardstore ARGS``."""
    res = CliRunner().invoke(main, [str(a) for a in args], input=input, terminal_width=80)
    return res.exit_code, res.output


# ----- 2. Sample.index of a sample fetched by key from outside the split ----------------------------
def test_sample_index_is_none_outside_the_split(prepared: Path) -> None:
    test = shardstore.open(str(prepared), split="test")
    train_key = next(iter(shardstore.open(str(prepared), split="train").keys()))
    outside = test.get(train_key)
    assert outside["__index__"] is None and outside.index is None
    assert test[3].index == 3


# ----- 3. a field map that cannot work --------------------------------------------------------------
def test_prepare_refuses_a_field_map_naming_no_part(make_shards) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=5)
    code, out = cli("prepare", path, "--split-ratio", "1,0,0", "--non-interactive", "--sample-type", "CaptioningSample",
                    "--field-map", '{"image": "png"}')
    assert code == 1
    line = out.strip()
    assert "\n" not in line and f"{path}/.nv-meta/dataset.yaml" in line
    assert "'image' <- 'png', but the dataset has no part 'png' (parts: jpg, json, txt)" in line
    assert "CaptioningSample needs 'caption'" in line
    assert not (path / ".nv-meta").exists()  # nothing written
    code, out = cli("prepare", path, "--split-ratio", "1,0,0", "--non-interactive", "--sample-type", "CaptioningSample",
                    "--field-map", '{"image": "png,jpg", "caption": "json[label]"}')
    assert code == 0, out


def test_a_confirmed_bad_field_map_is_written_and_check_reports_it(make_shards) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=5)
    asked: list[list[str]] = []
    shardstore.prepare(str(path), split_ratio="1,0,0", sample_type="ImageSample", field_map={"image": "png"},
                       confirm_field_map=lambda problems: asked.append(problems) or True)
    assert len(asked) == 1 and "no part 'png'" in asked[0][0]
    report = inspection.check(str(path))
    assert not report.ok
    [problem] = report.problems
    assert problem.kind == "schema" and problem.path.endswith(".nv-meta/dataset.yaml") and "'png'" in problem.detail
    with pytest.raises(ConfigError, match="no part 'png'"):
        shardstore.prepare(str(path), split_ratio="1,0,0", sample_type="ImageSample", field_map={"image": "png"},
                           force_overwrite=True, confirm_field_map=lambda problems: False)


# ----- 4. a path typo; mount's nested message -------------------------------------------------------
@pytest.mark.parametrize("args", [["info"], ["check"], ["ls"], ["preview"], ["cat", "_", "k.txt"],
                                  ["prepare", "_", "--split-ratio", "8,1,1", "--non-interactive"]])
def test_a_missing_folder_says_so(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "does-not-exist"
    argv = [args[0], missing, *args[2:]] if len(args) > 1 else [args[0], missing]
    code, out = cli(*argv)
    assert (code, out) == (1, f"shardstore: error: {missing}: no such folder\n")


def test_a_file_is_not_a_dataset_folder(prepared: Path) -> None:
    shard = next((prepared / "parts").glob("*.tar"))
    assert cli("info", shard) == (1, f"shardstore: error: {shard}: not a folder\n")
    with pytest.raises(DatasetNotPreparedError, match="no such folder"):
        shardstore.open(str(prepared / "nope"))


def test_mount_reports_a_bad_dataset_in_one_line(tmp_path: Path) -> None:
    """The dataset is opened before the mount process starts: its error, not the child's nested in ours."""
    code, out = cli("mount", tmp_path / "nope", tmp_path / "mnt")
    assert (code, out) == (1, f"shardstore: error: {tmp_path / 'nope'}: no such folder\n")
    (tmp_path / "empty").mkdir()
    code, out = cli("mount", tmp_path / "empty", tmp_path / "mnt")
    assert code == 1 and out.count("error:") == 1 and "not a prepared dataset" in out


# ----- 6. check --deep shows progress --------------------------------------------------------------
def test_deep_check_has_a_progress_bar(prepared: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = inspection.check(str(prepared), deep=True, progress=True)
    assert report.ok
    err = capsys.readouterr().err
    assert "Checking shards" in err and "4/4" in err
    code, out = cli("check", prepared, "--deep", "--no-progress")  # CliRunner is no terminal: no bar either way
    assert code == 0 and "Checking shards" not in out


# ----- 7. messages in the user's words --------------------------------------------------------------
def test_messages_speak_the_command_line(prepared: Path, make_shards) -> None:  # type: ignore[no-untyped-def]
    code, out = cli("prepare", prepared, "--split-ratio", "8,1", "--force-overwrite", "--non-interactive")
    assert code == 1 and "member" not in out and "invalid split ratio '8,1'" in out
    code, out = cli("prepare", prepared, "--split-ratio", "8,1,1", "--force-overwrite", "--non-interactive",
                    "--sample-type", "Caption")
    assert code == 1 and "member" not in out and "unknown sample type 'Caption'; choose one of" in out
    code, out = cli("prepare", prepared, "--force-overwrite", "--non-interactive")
    assert code == 1 and "no split given: --split-ratio 8,1,1 or --split-parts NAME:REGEX" in out
    code, out = cli("prepare", prepared, "--split-ratio", "8,1,1", "--non-interactive")
    assert code == 1 and "force_overwrite (" not in out and "to prepare it again: --force-overwrite" in out
    code, out = cli("prepare", prepared, "--split-ratio", "8,1,1", "--force-overwrite", "--non-interactive")
    assert code == 0 and "  test: 1 shard, 25 samples\n" in out and "1 shards" not in out


def test_prepare_time_leaves_out_the_users_answers(make_shards) -> None:  # type: ignore[no-untyped-def]
    path = make_shards(shards=2, samples=5)

    def slow_user(parts: list[str]) -> tuple[str, dict[str, str]]:
        time.sleep(1.5)
        return "ImageSample", {"image": "jpg"}

    t0 = time.perf_counter()
    report = shardstore.prepare(str(path), split_ratio="1,0,0", choose_dataset_yaml=slow_user, num_workers=1)
    assert time.perf_counter() - t0 >= 1.5
    assert report.seconds < 1.0 and report.sample_type == "ImageSample"


def test_cat_of_a_bare_key_lists_its_members(prepared: Path) -> None:
    code, out = cli("cat", prepared, "s00000_000003")
    assert code == 1
    assert out.strip().endswith("member 's00000_000003': no member of that name: it is a sample's key; its members "
                                "are s00000_000003.jpg, s00000_000003.txt, s00000_000003.json")
    with pytest.raises(SampleNotFoundError, match=r"no member 'nokey'$"):
        shardstore.open(str(prepared)).read_file("nokey")


def test_top_level_help_keeps_whole_summaries() -> None:
    code, out = cli("--help")
    commands = " ".join(out.split("Commands:", 1)[1].split())
    assert code == 0
    assert "Summarize a prepared dataset (or a metadataset YAML): samples, shards, bytes, splits, parts." in commands
    assert "prepare Index the tar shards under PATH (a folder or s3:// URL) and write .nv-meta as Energon 7 does." in commands


def test_s3server_stop_hint_names_the_state_file(tmp_path: Path) -> None:
    sys.path.insert(0, str(TOOLS))
    import s3server

    try:
        s3server.install(quiet=True)
    except s3server.Unavailable as e:
        pytest.skip(f"rclone unavailable: {e}")
    state = tmp_path / "state file.json"
    cmd = [sys.executable, str(TOOLS / "s3server.py"), "--state", str(state)]
    started = subprocess.run([*cmd, "start"], capture_output=True, text=True, timeout=60)
    try:
        assert started.returncode == 0, started.stderr
        assert f"stop: python tools/s3server.py --state '{state}' stop" in started.stderr
    finally:
        subprocess.run([*cmd, "stop"], capture_output=True, timeout=60)
    assert not state.exists()


# ----- 8. tools/make_dataset.py: defaults shown, small by default, real pictures ----------------------
def test_make_dataset_help_shows_small_defaults(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(TOOLS / "make_dataset.py"), "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "--shards SHARDS    how many shards (default: 8)" in out
    assert "samples per shard (default: 500)" in " ".join(out.split())
    assert "--shards 64 --samples 4000" in out  # the benchmarks' size, asked for explicitly


def test_make_dataset_pictures_decode_and_batch(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(TOOLS / "make_dataset.py"), str(tmp_path / "ds"), "--shards", "1",
                    "--samples", "4", "--image-size", "40x24"], check=True, capture_output=True)
    shardstore.prepare(str(tmp_path / "ds"), split_ratio="1,0,0", num_workers=1)
    images = [s["jpg"] for s in shardstore.open(str(tmp_path / "ds"), decode=True)]
    assert [i.shape for i in images] == [(24, 40, 3)] * 4 and all(i.flags.writeable for i in images)
    assert len({i.tobytes() for i in images}) == 4 and np.stack(images).dtype == np.uint8


# ----- 9. no process left behind --------------------------------------------------------------------
def test_the_run_fails_when_a_test_leaves_a_process(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                                          "from leftovers import pytest_sessionfinish  # noqa\n")
    (tmp_path / "test_leak.py").write_text(
        "import subprocess, pathlib\n"
        "def test_leak():\n"
        "    p = subprocess.Popen(['sleep', '120'])\n"
        "    pathlib.Path('leaked.pid').write_text(str(p.pid))\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_leak.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "SHARDSTORE_TEST_LEFTOVER_GRACE": "0.5"})
    pid = int((tmp_path / "leaked.pid").read_text())
    assert proc.returncode == 1, proc.stdout
    assert "1 passed" in proc.stdout and "leftover processes" in proc.stdout and f"{pid}: sleep 120" in proc.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_tests_reset_the_signals_a_background_run_ignores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why the Ctrl-C tests set the child's SIGINT: an ignored SIGINT survives exec."""
    from test_prepare_errors import _default_signals

    probe = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT))"]
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in `make test &` from a script
    try:
        plain = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
        reset = subprocess.run(probe, capture_output=True, text=True, check=True, preexec_fn=_default_signals).stdout
    finally:
        signal.signal(signal.SIGINT, old)
    assert plain == str(int(signal.SIG_IGN)) and "default_int_handler" in reset


def test_the_test_process_does_not_ignore_sigint() -> None:
    """Started with SIGINT ignored (`make test &` from a script), the suite takes Python's handler
    back (tests/conftest.py), so every child it starts can be stopped with Ctrl-C as a user's is."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_demo_data_stamp_is_json(tmp_path: Path) -> None:
    """The demo reuses shards only when its stamp says they were made with the same options."""
    sys.path.insert(0, str(TOOLS))
    import demo

    options = {"shards": 1, "samples": 2, "seed": 0, "image_size": list(demo.IMAGE_SIZE)}
    assert not demo._shards_present(tmp_path, options)
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "data-000000.tar").write_bytes(b"")
    assert not demo._shards_present(tmp_path, options)  # old demo data: no stamp
    (tmp_path / demo.STAMP).write_text(json.dumps(options))
    assert demo._shards_present(tmp_path, options)
    assert not demo._shards_present(tmp_path, {**options, "samples": 3})


# ----- 10. the mount package ------------------------------------------------------------------------
def test_mount_is_a_package_and_shardstore_mount_stays_the_function() -> None:
    assert not list((ROOT / "shardstore").glob("mount_*.py")) and not (ROOT / "shardstore" / "mount.py").exists()
    code = ("import shardstore.mount.tree, shardstore.mount.fs, shardstore\n"
            "from shardstore.mount import MountHandle, umount, mount\n"
            "from shardstore import mount as m\n"
            "assert m is mount and shardstore.mount is mount and callable(mount), shardstore.mount\n"
            "import sys; print(sorted(n for n in sys.modules if n.startswith('shardstore.mount')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['shardstore.mount',", "'shardstore.mount.fs',", "'shardstore.mount.process',",
                                  "'shardstore.mount.tree']"]

"""The inspection commands (info, check, ls, cat) through the real CLI, and the docs of every command.

Datasets are tiny (the ``prepared`` fixture: 4 shards x 25 samples, train = 3 shards, test = 1).
Corruptions are made on the test's own copy with plain file writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from ci import in_ci
from click.testing import CliRunner, Result
from tar_headers import set_header_field

import shardstore
from shardstore import inspection
from shardstore.cli import main
from shardstore.storage import LocalStorage

ROOT = Path(__file__).resolve().parent.parent
SHARD0 = "parts/data-000000.tar"


def run(*args: str | Path, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def run_json(*args: str | Path) -> Any:
    return json.loads(run(*args, "--json").stdout)


def members(path: Path) -> dict[str, bytes]:
    """Every member of every shard under ``path``, read with the standard library."""
    out: dict[str, bytes] = {}
    for shard in sorted(path.glob("parts/*.tar")):
        with tarfile.open(shard) as tar:
            for m in tar.getmembers():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name] = f.read()
    return out


def assert_one_line_error(result: Result, *needles: str) -> None:
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("shardstore: error: ")
    for needle in needles:
        assert needle in lines[0]


# ----- info --------------------------------------------------------------------------------------
def test_info_without_dataset_yaml(prepared: Path) -> None:
    text = run("info", prepared).stdout
    assert "samples      100" in text and "shards       4" in text
    assert "no dataset.yaml" in text
    assert "jpg (100), json (100), txt (100)" in text
    assert "train: 3 shards, 75 samples" in text and "test: 1 shard, 25 samples" in text
    data = run_json("info", prepared)
    assert data["samples"] == 100 and data["shards"] == 4
    assert data["bytes"] == sum(p.stat().st_size for p in prepared.glob("parts/*.tar"))
    assert data["splits"]["train"] == {"shards": 3, "samples": 75}
    assert data["parts"] == {"jpg": 100, "json": 100, "txt": 100}
    assert data["sample_type"] is None and data["crude"] is True and data["prepared_by"] == "shardstore"
    assert data["uuid"] == (prepared / ".nv-meta/index.uuid").read_text()


def test_info_crude_and_typed(make_shards: Any) -> None:
    crude = make_shards(shards=2, samples=5, name="crude")
    shardstore.prepare(str(crude), split_ratio="1,0,0", sample_type="CrudeWebdataset", num_workers=1)
    data = run_json("info", crude)
    assert (data["sample_type"], data["crude"], data["field_map"]) == ("CrudeWebdataset", True, None)
    assert data["samples"] == 10 and "sample type  CrudeWebdataset" in run("info", crude).stdout

    typed = make_shards(shards=2, samples=5, name="typed")
    shardstore.prepare(
        str(typed), split_ratio="1,0,0", sample_type="CaptioningSample",
        field_map={"image": "jpg", "caption": "txt"}, num_workers=1,
    )
    data = run_json("info", typed)
    assert (data["sample_type"], data["crude"]) == ("CaptioningSample", False)
    assert data["field_map"] == {"image": "jpg", "caption": "txt"}
    assert "image <- jpg, caption <- txt" in run("info", typed).stdout

    # A sample type without a field map: Energon's sample_loader form (a module in .nv-meta)
    loader = make_shards(shards=1, samples=3, name="loader")
    shardstore.prepare(str(loader), split_ratio="1,0,0", sample_type="ImageSample", num_workers=1)
    data = run_json("info", loader)
    assert (data["sample_type"], data["field_map"]) == ("ImageSample", None)
    assert data["sample_loader"] == "sample_loader.py:sample_loader"
    assert run_json("check", loader)["ok"] is True
    (loader / ".nv-meta/sample_loader.py").unlink()
    problems = json.loads(run("check", loader, "--json", ok=False).stdout)["problems"]
    assert [p["kind"] for p in problems] == ["schema", "schema"]  # sample_loader and part_filter name it
    assert all("sample_loader.py" in p["detail"] for p in problems)


def test_info_counts_excludes(prepared: Path) -> None:
    split = prepared / ".nv-meta/split.yaml"
    split.write_text(split.read_text().replace(
        "exclude: []", f"exclude:\n- {SHARD0}/s00000_000003\n- {SHARD0}/folder/key\n- parts/data-000003.tar"
    ))
    data = run_json("info", prepared)
    assert data["excluded"] == {"shards": 1, "samples": 2}
    assert data["splits"]["test"] == {"shards": 0, "samples": 0}


def _energon_bin() -> Path | None:
    exe = Path(sys.executable).parent / "energon"
    return exe if exe.exists() else None


def test_energon_prepared_dataset(make_shards: Any) -> None:
    """A dataset prepared by the real `energon prepare` (no shardstore.json): every command works."""
    exe = _energon_bin()
    if exe is None:
        if in_ci():
            raise AssertionError("the `energon` command (extra `compat`) must be installed in CI")
        pytest.skip("megatron-energon is not installed (extra `compat`)")
    path = make_shards(shards=2, samples=6, name="energon")
    subprocess.run(
        [str(exe), "prepare", str(path), "--non-interactive", "--no-progress", "--num-workers", "1",
         "--split-ratio", "1,0,0", "--sample-type", "CrudeWebdataset"],
        check=True, capture_output=True, timeout=120,
    )
    assert not (path / ".nv-meta/shardstore.json").exists()
    data = run_json("info", path)
    assert data["prepared_by"] == "energon" and data["samples"] == 12 and data["crude"] is True
    assert data["bytes"] == sum(p.stat().st_size for p in path.glob("parts/*.tar"))
    assert data["parts"] == {"jpg": 12, "json": 12, "txt": 12}
    assert run_json("check", path, "--deep")["ok"] is True
    assert len(run_json("ls", path)) == 12
    assert run("cat", path, "s00001_000005.json").stdout_bytes == members(path)["s00001_000005.json"]
    # Without shardstore.json a shorter shard is still caught: it no longer reaches its .tar.idx end.
    shard = path / SHARD0
    os.truncate(shard, shard.stat().st_size - 2048)
    result = run("check", path, ok=False)
    assert result.exit_code == 1 and "index reaches offset" in result.stdout


ENERGON6 = Path(os.environ.get("SHARDSTORE_ENERGON6_VENV", ROOT / ".venv-energon6")) / "bin" / "energon"


def test_energon6_prepared_dataset(make_shards: Any) -> None:
    """A dataset prepared by the real Energon 6.0 (`make energon6`): `.info.yaml`, an index with an
    `id` column and no `sample_parts`. Part names then come from the tar headers."""
    if not ENERGON6.exists():
        if in_ci():
            raise AssertionError(f"{ENERGON6} is missing: `make test` runs `make energon6` first")
        pytest.skip(f"{ENERGON6} is missing (run `make energon6`)")
    path = make_shards(shards=2, samples=5, name="energon6")
    # Energon 6's prepare asks for the split ratio and whether to write a dataset.yaml
    subprocess.run(
        [str(ENERGON6), "prepare", str(path), "--no-progress", "--num-workers", "1"],
        input=b"1,0,0\nn\n", check=True, capture_output=True, timeout=300,
    )
    assert (path / ".nv-meta/.info.yaml").exists() and not (path / ".nv-meta/.info.json").exists()
    data = run_json("info", path)
    assert (data["index_format"], data["prepared_by"], data["samples"]) == ("energon6", "energon", 10)
    assert data["parts"] == {"jpg": None, "txt": None, "json": None}
    assert "format version not recorded" in run("info", path).stdout
    listing = run_json("ls", path, "--limit", "3")
    assert [x["parts"] for x in listing] == [["jpg", "txt", "json"]] * 3
    assert run("cat", path, "s00001_000002.jpg").stdout_bytes == members(path)["s00001_000002.jpg"]
    report = run_json("check", path, "--deep")
    assert report["ok"] is True and report["samples"] == 10 and report["parts"] == 0
    with open(path / SHARD0, "r+b") as f:  # a corrupt header is found without sample_parts too
        f.seek(_header_offset(path / SHARD0, "s00000_000003.txt") + 5)
        f.write(b"!")
    assert run("check", path, "--deep", ok=False).exit_code == 1


# ----- check -------------------------------------------------------------------------------------
def test_check_ok(prepared: Path) -> None:
    result = run("check", prepared, "--deep")
    assert "OK" in result.stdout and "300 parts (deep)" in result.stdout
    report = run_json("check", prepared)
    assert report["ok"] is True and report["problems"] == [] and report["samples"] == 100
    assert run("check", prepared, "--quiet").stdout == ""


def _header_offset(shard: Path, name: str) -> int:
    with tarfile.open(shard) as tar:
        return tar.getmember(name).offset


@contextlib.contextmanager
def _keeping_mtime(path: Path) -> Iterator[None]:
    """Edit ``path`` in place and give it back its mtime: the rewrite only ``--deep`` can see
    (a changed mtime alone makes the shard stale for every reader)."""
    st = path.stat()
    yield
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_check_deep_finds_corrupt_header(prepared: Path) -> None:
    shard = prepared / SHARD0
    at = _header_offset(shard, "s00000_000007.txt")
    with _keeping_mtime(shard), open(shard, "r+b") as f:  # scribble over the member's name: the header checksum no longer fits
        f.seek(at + 3)
        f.write(b"XYZ")
    assert run("check", prepared).exit_code == 0  # sizes and indexes still agree: only --deep can tell
    result = run("check", prepared, "--deep", ok=False)
    assert result.exit_code == 1
    assert f"{shard}, offset {at}: corrupt tar header" in result.stdout
    assert "1 problem " in result.stdout
    report = json.loads(run("check", prepared, "--deep", "--json", ok=False).stdout)
    assert report["ok"] is False
    (problem,) = report["problems"]
    assert problem["kind"] == "member" and problem["path"] == str(shard) and problem["offset"] == at


def test_check_deep_finds_member_that_moved(prepared: Path) -> None:
    """A header that is valid but names another member (same size): only --deep sees it."""
    shard = prepared / SHARD0
    with tarfile.open(shard) as tar:
        m = tar.getmember("s00000_000004.txt")
    with _keeping_mtime(shard), open(shard, "r+b") as f:
        f.seek(m.offset)
        hdr = set_header_field(f.read(512), 0, 0, b"s00000_000004.cls".ljust(100, b"\0"))
        f.seek(m.offset)
        f.write(hdr)
    result = run("check", prepared, "--deep", ok=False)
    assert "member 's00000_000004.txt'" in result.stdout and f"offset {m.offset_data}" in result.stdout
    assert "member 's00000_000004.cls'" in result.stdout


def test_check_shard_with_other_size(prepared: Path) -> None:
    shard = prepared / "parts/data-000002.tar"
    size = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(bytes(1024))
    result = run("check", prepared, ok=False)
    assert result.exit_code == 1
    assert f"{shard}: shard size is {size + 1024} bytes, was {size} at prepare" in result.stdout
    os.truncate(shard, size - 4096)
    report = json.loads(run("check", prepared, "--deep", "--json", ok=False).stdout)
    assert [p["kind"] for p in report["problems"]] == ["shard"]


def test_check_missing_files_and_disagreeing_tar_idx(prepared: Path) -> None:
    (prepared / "parts/data-000001.tar").unlink()
    (prepared / "parts/data-000003.tar.idx").unlink()
    idx = prepared / "parts/data-000002.tar.idx"
    raw = bytearray(idx.read_bytes())
    raw[8:16] = (int.from_bytes(raw[8:16], "little") + 512).to_bytes(8, "little")
    idx.write_bytes(bytes(raw))
    report = json.loads(run("check", prepared, "--json", ok=False).stdout)
    messages = [p["message"] for p in report["problems"]]
    assert any("data-000001.tar: shard is missing" in m for m in messages)
    assert any("data-000003.tar.idx: missing" in m for m in messages)
    # one offset moved: sample 0 now ends there and sample 1 starts there, per .tar.idx
    assert any("data-000002.tar.idx" in m and "sample 0 is at 0 " in m for m in messages)
    assert any("data-000002.tar.idx" in m and "sample 1 is at" in m for m in messages)
    assert any("data-000002.tar.idx" in m and "differs from the one prepare wrote" in m for m in messages)
    assert len(messages) == 5


def test_check_schema_problems(prepared: Path) -> None:
    (prepared / ".nv-meta/index.uuid").write_text("not-a-uuid")
    split = prepared / ".nv-meta/split.yaml"
    split.write_text(split.read_text().replace("val: []", "val:\n  - parts/nope.tar"))
    report = json.loads(run("check", prepared, "--json", ok=False).stdout)
    assert {p["kind"] for p in report["problems"]} == {"schema"}
    assert len(report["problems"]) == 2


# ----- ls ----------------------------------------------------------------------------------------
def test_ls(prepared: Path) -> None:
    lines = run("ls", prepared).stdout.splitlines()
    assert len(lines) == 100
    assert lines[0] == "s00000_000000\tjpg,txt,json"
    assert run("ls", prepared, "--split", "test", "--limit", "2").stdout.splitlines() == [
        "s00003_000000\tjpg,txt,json",
        "s00003_000001\tjpg,txt,json",
    ]
    assert run("ls", prepared, "-n", "0").stdout == ""
    data = run_json("ls", prepared, "--split", "train")
    assert [x["key"] for x in data] == list(shardstore.open(str(prepared), split="train").keys())
    assert [x["position"] for x in data] == list(range(75))
    assert data[30] == {
        "key": "s00001_000005", "shard": "parts/data-000001.tar", "position": 30,
        "parts": ["jpg", "txt", "json"], "excluded": False,
    }
    assert json.loads(run("ls", prepared, "--json", "--split", "val").stdout) == []


def test_ls_marks_excluded_samples(prepared: Path) -> None:
    split = prepared / ".nv-meta/split.yaml"
    split.write_text(split.read_text().replace("exclude: []", f"exclude:\n- {SHARD0}/s00000_000001"))
    lines = run("ls", prepared, "--split", "train", "-n", "3").stdout.splitlines()
    assert lines[1] == "s00000_000001\tjpg,txt,json\t(excluded)" and not lines[0].endswith("(excluded)")


def test_ls_is_lazy(prepared: Path) -> None:
    it = inspection.ls(str(prepared))
    assert next(it).key == "s00000_000000"  # a generator: nothing read beyond the first page


# ----- cat ---------------------------------------------------------------------------------------
def test_cat_is_byte_exact(prepared: Path) -> None:
    expected = members(prepared)
    for name in ("s00000_000000.jpg", "s00002_000024.json", "s00003_000010.txt"):
        assert run("cat", prepared, name).stdout_bytes == expected[name]


def test_cat_reads_only_the_member(prepared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spy on the real reads: the only shard bytes read are the member's payload."""
    seen: list[tuple[str, int, int]] = []
    real = LocalStorage.read_range

    def spy(self: LocalStorage, path: str, rng: Any) -> bytes:
        seen.append((path, rng.offset, rng.size))
        return real(self, path, rng)

    monkeypatch.setattr(LocalStorage, "read_range", spy)
    with tarfile.open(prepared / "parts/data-000001.tar") as tar:
        m = tar.getmember("s00001_000003.jpg")
    assert run("cat", prepared, "s00001_000003.jpg").stdout_bytes
    assert [s for s in seen if s[0].endswith(".tar")] == [("parts/data-000001.tar", m.offset_data, m.size)]


def test_cat_large_member_in_chunks(prepared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspection, "CAT_CHUNK", 1000)
    name = "s00002_000003.jpg"
    assert run("cat", prepared, name).stdout_bytes == members(prepared)[name]


def test_cat_refuses_a_changed_shard(prepared: Path) -> None:
    with open(prepared / SHARD0, "ab") as f:
        f.write(bytes(512))
    result = run("cat", prepared, "s00000_000001.txt", ok=False)
    assert_one_line_error(result, "data-000000.tar", "rerun `shardstore prepare")


# ----- errors ------------------------------------------------------------------------------------
def test_errors_are_one_line(prepared: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for cmd in ("info", "check", "ls"):
        assert_one_line_error(run(cmd, plain, ok=False), str(plain), "not a prepared dataset")
    assert_one_line_error(run("cat", plain, "a.txt", ok=False), "not a prepared dataset")
    assert_one_line_error(run("cat", prepared, "s00000_000000.png", ok=False), "no member 's00000_000000.png'")
    assert_one_line_error(run("cat", prepared, "nodot", ok=False), "no member 'nodot'")
    assert_one_line_error(run("ls", prepared, "--split", "nope", ok=False), "no split 'nope'")
    assert_one_line_error(run("info", tmp_path / "meta.yaml", ok=False), "metadataset YAML")
    bad = run("info", prepared, "--storage-options", "{nope", ok=False)
    assert bad.exit_code == 2 and "not valid JSON" in bad.stderr


def test_console_script_cat_is_binary_safe(prepared: Path) -> None:
    """The installed `shardstore` command, as a user runs it: stdout carries raw bytes."""
    exe = Path(sys.executable).parent / "shardstore"
    name = "s00001_000001.jpg"
    out = subprocess.run([str(exe), "cat", str(prepared), name], capture_output=True, check=True, timeout=60)
    assert out.stdout == members(prepared)[name]


# ----- every command documented ------------------------------------------------------------------
def _walk(cmd: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, click.Command]]:
    found = [(" ".join(path), cmd)]
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            found += _walk(sub, path + (name,))
    return found


def test_every_command_has_an_example_and_is_in_docs() -> None:
    doc = (ROOT / "docs/cli.md").read_text()
    commands = _walk(main)
    assert {"prepare", "info", "check", "ls", "cat"} <= {p for p, _ in commands}
    problems = []
    for path, cmd in commands:
        if "Example" not in (cmd.help or ""):
            problems.append(f"`shardstore {path}`: help has no Example")
        if path and not re.search(rf"^#+ shardstore {re.escape(path)}\s*$", doc, re.M):
            problems.append(f"`shardstore {path}`: no '## shardstore {path}' heading in docs/cli.md")
    assert not problems, "\n".join(problems)


def test_cli_docs_mention_every_option() -> None:
    """Each documented command's section names all its options (so the docs keep up with the code)."""
    doc = (ROOT / "docs/cli.md").read_text()
    missing = []
    for path, cmd in _walk(main):
        if not path:
            continue
        m = re.search(rf"^#+ shardstore {re.escape(path)}\s*$(.*?)(?=^#+ shardstore |\Z)", doc, re.M | re.S)
        section = m.group(1) if m else ""
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                if not any(opt in section for opt in param.opts if opt.startswith("--")):
                    missing.append(f"shardstore {path} {param.opts[-1]}")
    assert not missing, "options missing from docs/cli.md: " + ", ".join(missing)


def test_shutil_copy_of_dataset_still_checks(prepared: Path, tmp_path: Path) -> None:
    """A dataset copied elsewhere (shards and .nv-meta together) is still whole."""
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    assert run_json("check", copy, "--deep")["ok"] is True


# ----- the same commands on S3 (a real local S3 server: tools/s3server.py) ----------------------
@pytest.fixture(scope="module")
def s3() -> Any:
    sys.path.insert(0, str(ROOT / "tools"))
    import s3server

    try:
        server = s3server.start(buckets=["data"])
    except s3server.Unavailable as e:
        if in_ci():
            raise
        pytest.skip(f"no local S3 server: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.s3
def test_commands_on_s3(s3: Any, make_shards: Any) -> None:
    local = make_shards(shards=2, samples=8, name="s3src")
    url = s3.upload(local, "s3://data/inspect")
    opts = json.dumps(s3.storage_options())
    shardstore.prepare(url, split_ratio="1,0,0", sample_type="CrudeWebdataset", storage_options=s3.storage_options())
    data = run_json("info", url, "--storage-options", opts)
    assert (data["samples"], data["shards"], data["crude"]) == (16, 2, True)
    assert data["bytes"] == sum(p.stat().st_size for p in local.glob("parts/*.tar"))
    assert run_json("check", url, "--deep", "--storage-options", opts)["ok"] is True
    assert [x["key"] for x in run_json("ls", url, "--split", "train", "--storage-options", opts)][:2] == [
        "s00000_000000", "s00000_000001",
    ]
    name = "s00001_000003.jpg"
    assert run("cat", url, name, "--storage-options", opts).stdout_bytes == members(local)[name]
    # Same size, a header rewritten: the ETag recorded at prepare differs, the shard's fingerprint
    # (its headers at sampled offsets, shardprint) shows a rewrite, and check says so.
    shard = local / "parts/data-000001.tar"
    raw = bytearray(shard.read_bytes())
    raw[0] ^= 0x01  # the first member's name
    s3.filesystem().pipe_file("data/inspect/parts/data-000001.tar", bytes(raw))
    report = json.loads(run("check", url, "--json", "--storage-options", opts, ok=False).stdout)
    assert [(p["kind"], "ETag" in p["detail"] and "rewritten" in p["detail"]) for p in report["problems"]] == [("shard", True)]
    # A new ETag over the same headers (an S3-to-S3 copy made with other multipart sizes, or a
    # payload rewritten in place): the index still describes the shard, and it reads.
    raw[0] ^= 0x01
    raw[-2000] ^= 0xFF
    s3.filesystem().pipe_file("data/inspect/parts/data-000001.tar", bytes(raw))
    assert run_json("check", url, "--storage-options", opts)["ok"] is True


def test_check_formats_are_subcommands_with_their_own_help(prepared: Path) -> None:
    """`check PATH` is `check dataset PATH`; `check lerobot`/`check rlds` are real subcommands
    (issue 26, point 5): their --help is theirs, not the dataset check's."""
    from shardstore.cli import check_group

    assert set(check_group.commands) == {"dataset", "lerobot", "rlds", "minari", "episode-wds"}
    for fmt, words in (("lerobot", "LeRobot checklist"), ("rlds", "RLDS rules"), ("minari", "Minari's"),
                       ("episode-wds", "episode-frame")):
        out = run("check", fmt, "--help").stdout
        assert f"check {fmt} [OPTIONS] SRC" in out and words in out, fmt
        assert "--deep" in out and "--ref" not in out  # its own options, not the dataset check's
    assert "check dataset [OPTIONS] PATH" in run("check", "dataset", "--help").stdout
    group_help = run("check", "--help").stdout
    assert "lerobot" in group_help and "rlds" in group_help and "dataset" in group_help
    assert run_json("check", prepared)["ok"] is True  # the default subcommand
    assert run_json("check", "--json", prepared)["ok"] is True  # options before PATH too
    assert run_json("check", "dataset", prepared, "--deep")["deep"] is True
    assert run_json("lint", prepared)["ok"] is True
    assert run("check", ok=False).exit_code == 2  # PATH missing: a usage error

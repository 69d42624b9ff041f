"""Every example of README.md and docs/*.md runs, and prints what the page shows.

The rules a page is written to (docs/index.md points here):

Which fences run
    ```bash / ```sh / ```shell: a script, run by ``bash -e`` in the page's working folder.
    ```console: lines starting ``$ `` are commands (a trailing ``\\`` continues onto the next line);
    the lines after a command, up to the next ``$ ``, are its output. Where a command shows output,
    the output is compared (stdout and stderr together). A command that exits non-zero fails the
    example, unless the next command is ``echo $?`` (which then shows the exit code).
    ```python: run in one Python interpreter per page, in page order, so names carry over from one
    block to the next (and across the page's shell blocks).
    Any other fence (none, ``text``, ``yaml``, ``json``, ``sql``) is shown, not run: signatures,
    layouts, file contents, unless a marker below says otherwise.

Where they run
    Each page gets a fresh working folder holding ``demo-data/`` (the demo dataset, prepared:
    8 shards x 500 samples of a real 96x64 JPEG, a caption and a json; train 3,000, val 500, test
    500 samples) and ``tools/`` (the project's tools). The demo data are made once per session by
    ``tools/demo.py``, the code behind ``make demo``. ``shardstore`` and ``python`` are the test
    venv's. Blocks of a page run in page order, so a page can make the data its later blocks use.

How output compares
    After these rewrites on both sides: the working folder prints as ``/work`` (write
    ``/work/demo-data`` for the absolute path of ``./demo-data``); durations (``0.13 s``,
    ``28.9 ms``, ``14.5 us``) and rates (``69,142/s``) become placeholders; uuids and ``pid N`` too; runs of blanks
    are one blank. ``...`` inside a line matches any text, and a line that is only ``...`` matches
    any number of lines.

Markers: an HTML comment on the line right above a fence (blank lines between are fine) marks that
block: ``<!-- example: KEY KEY=VALUE -->``; the same with ``examples:`` on a line of its own marks
every block of the page. Keys:

    needs=s3     run against the suite's S3 test server (tools/s3server.py, rclone): ``AWS_ENDPOINT_URL``,
                 the keys and the region are set, ``http://127.0.0.1:9000`` in the block stands for
                 the server's endpoint (keys ``testkey``/``testsecret``), and bucket ``bucket`` holds
                 the demo's shards, not yet prepared, at ``s3://bucket/demo-data/``.
    needs=fuse   uses a real FUSE mount (fuse3 and the ``mount`` extra). Mount under the working
                 folder (``mnt``); whatever is still mounted after the page fails it.
    needs=s3,fuse  both.
    setup        the project's own set-up commands (``make demo``, ``make test``, ``make test-all``, ``make test-fast``,
                 ``make venv``, ``pip install ...``, ``source .venv/bin/activate``; nothing else is allowed in such a block): not run here,
                 since this suite is what ``make test`` runs and the session's demo data are what
                 ``make demo`` makes; an ``output`` block after ``make demo`` is compared with what
                 ``tools/demo.py`` printed for this session.
    output       this block shows the output of the block before it (bash or python), compared.
    bench        benchmark and data-making commands of ``tools/`` (minutes to hours on large data,
                 so not run here): each ``python tools/....py ARGS`` line (``$ `` and comments allowed)
                 has its ARGS parsed by that script's own argument parser, the script stopped right
                 after; ``make bench``/``bench-quick``/``bench-peers`` must be Makefile targets;
                 nothing else is allowed in such a block. ``tests/test_bench_quick.py`` runs the
                 scripts themselves on tiny data.
    file=PATH    write this block's text to PATH in the working folder (a YAML the page uses next).

There is no marker that skips a block: an example that cannot run here does not belong in a fence
that runs. ``test_runner_fails_on_a_broken_example`` feeds the runner a broken page and shows the
failure it reports.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell"}
RUN = SHELL | {"console", "python"}
BLOCK_TIMEOUT = 180.0
S3_PLACEHOLDER = "http://127.0.0.1:9000"
SETUP_COMMAND = re.compile(r"(make (demo|test|test-all|test-fast|venv)|(python -m )?pip install .+|source \.venv/bin/activate)")
FENCE = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<scope>examples?):(?P<body>.*?)-->\s*$")


class ExampleFailure(AssertionError):
    """An example that failed: the message names the page and the line of its fence."""


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN and not {"setup", "output", "bench"} & self.markers.keys()


def _markers(body: str, where: str) -> dict[str, str]:
    known = {"needs", "setup", "output", "file", "bench"}
    out = {}
    for word in body.split():
        key, _, value = word.partition("=")
        if key not in known:
            raise ExampleFailure(f"{where}: unknown example marker {word!r} (known: {', '.join(sorted(known))})")
        out[key] = value
    if not set(out.get("needs", "s3").split(",")) <= {"s3", "fuse"}:
        raise ExampleFailure(f"{where}: needs={out['needs']!r}: expected needs=s3, needs=fuse or needs=s3,fuse")
    return out


def _needs(block: Block) -> set[str]:
    return set(filter(None, block.markers.get("needs", "").split(",")))


def parse_page(path: Path, name: str | None = None) -> list[Block]:
    """The fenced blocks of a markdown page, with their markers (page markers merged in)."""
    name = name or str(path.relative_to(ROOT))
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    page_markers: dict[str, str] = {}
    pending: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        fence = FENCE.match(lines[i])
        if m:
            marks = _markers(m.group("body"), f"{name}:{i + 1}")
            (page_markers if m.group("scope") == "examples" else pending).update(marks)
        elif fence:
            close, indent, start = fence.group("fence"), len(fence.group("indent")), i
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(close):
                body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
                i += 1
            blocks.append(Block(name, start + 1, fence.group("lang").lower(), "\n".join(body) + "\n", pending))
            pending = {}
        elif lines[i].strip():
            pending = {}
        i += 1
    for b in blocks:
        b.markers = {**page_markers, **b.markers}
    return blocks


# ----- comparing output ---------------------------------------------------------------------------
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
RATE = re.compile(r"\d[\d,]*(?:\.\d+)?\s?/s\b")
DURATION = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:s|ms|us|µs)\b")
PID = re.compile(r"\bpid \d+")


def normalize(text: str, paths: dict[str, str]) -> list[str]:
    for real, shown in paths.items():
        text = text.replace(real, shown)
    text = DURATION.sub("<time>", RATE.sub("<rate>", UUID.sub("<uuid>", PID.sub("pid <pid>", text))))
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """``expected`` matches ``actual`` line by line, ``...`` matching any text (a line of its own: any lines)."""
    pattern = "".join(r"(?:.*\n)*?" if line == "..." else re.escape(line).replace(r"\.\.\.", ".*") + r"\n"
                      for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


def compare(block: Block, what: str, shown: str, got: str, paths: dict[str, str]) -> None:
    expected, actual = normalize(shown, paths), normalize(got, paths)
    if not output_matches(expected, actual):
        diff = "\n".join(difflib.unified_diff(expected, actual, "shown on the page", "printed", lineterm=""))
        raise ExampleFailure(f"{block.where}: {what}: the output differs from the page's\n{diff}")


# ----- running ------------------------------------------------------------------------------------
def console_commands(block: Block) -> list[tuple[str, str]]:
    """``(command, shown output)`` pairs of a console block."""
    out: list[list[str]] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd += "\n" + lines[i]
            out.append([cmd, ""])
        elif out:
            out[-1][1] += line + "\n"
        elif line.strip():
            raise ExampleFailure(f"{block.where}: a console block starts with a command (`$ ...`), not {line!r}")
        i += 1
    return [(c, o) for c, o in out]


CHILD = r"""
import contextlib as _contextlib, io as _io, json as _json, os as _os, sys as _sys, traceback as _traceback
import __main__
_results = _os.fdopen(int(_sys.argv[1]), "w")
_ns = __main__.__dict__  # the real __main__: classes a page defines pickle as they would in a script
for _request in _sys.stdin:
    _job = _json.loads(_request)
    _out = _io.StringIO()
    _error = None
    try:
        with _contextlib.redirect_stdout(_out), _contextlib.redirect_stderr(_out):
            exec(compile(_job["code"], _job["file"], "exec"), _ns)
    except BaseException:
        _error = _traceback.format_exc()
    _sys.stdout.flush()
    _results.write(_json.dumps({"out": _out.getvalue(), "error": _error}) + "\n")
    _results.flush()
"""


class PythonSession:
    """One interpreter for a page's Python blocks: names carry over from block to block."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.log = cwd / ".python-examples.log"
        read, write = os.pipe()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(write)], cwd=cwd, env=env, text=True,
                                         stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=[write])
        os.close(write)
        self.results = os.fdopen(read)

    def run(self, block: Block, code: str) -> str:
        assert self.proc.stdin is not None
        # Leading newlines make tracebacks name the line of the page itself.
        job = {"code": "\n" * block.line + code, "file": str(ROOT / block.page)}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        reply = self.results.readline()
        if not reply:
            raise ExampleFailure(f"{block.where}: the Python interpreter died:\n{self.log.read_text()[-3000:]}")
        result = json.loads(reply)
        if result["error"]:
            raise ExampleFailure(f"{block.where}: the Python example failed:\n{result['out']}{result['error']}")
        return str(result["out"])

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.results.close()


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)


def run_console(block: Block, code: str, cwd: Path, env: dict[str, str], paths: dict[str, str]) -> str:
    commands = console_commands(Block(block.page, block.line, block.lang, code))
    script = []
    for k, (cmd, _) in enumerate(commands):
        checked = not (k + 1 < len(commands) and commands[k + 1][0].strip() == "echo $?")
        script.append(f"printf '\\036%d\\n' {k}\n( exit ${{__rc:-0}} )\n{cmd}\n__rc=$?")
        if checked:
            script.append("if [ $__rc -ne 0 ]; then printf '\\036FAIL %d\\n' $__rc; exit $__rc; fi")
    proc = _bash("\n".join(script), cwd, env)
    chunks = re.split(r"\x1e(\d+)\n", proc.stdout)
    printed = {int(chunks[i]): chunks[i + 1] for i in range(1, len(chunks) - 1, 2)}
    for k, (cmd, shown) in enumerate(commands):
        got = printed.get(k, "")
        fail = re.search(r"\x1eFAIL (\d+)\n", got)
        if fail:
            raise ExampleFailure(f"{block.where}: `{cmd}` exited with {fail.group(1)}:\n{got[:fail.start()][-3000:]}")
        if shown.strip():
            compare(block, f"`{cmd}`", shown, got, paths)
    return proc.stdout


def run_shell(block: Block, code: str, cwd: Path, env: dict[str, str]) -> str:
    proc = _bash("set -e\n" + code, cwd, env)
    if proc.returncode:
        raise ExampleFailure(f"{block.where}: the shell example exited with {proc.returncode}:\n{proc.stdout[-3000:]}")
    return proc.stdout


def check_setup(block: Block) -> None:
    for line in block.text.splitlines():
        cmd = line.split("#", 1)[0].strip()
        if cmd and not SETUP_COMMAND.fullmatch(cmd):
            raise ExampleFailure(f"{block.where}: a setup block holds only `make demo`, `make test`, `make test-all`, `make test-fast`, "
                                 f"`make venv`, `pip install ...` or `source .venv/bin/activate`; {cmd!r} must run: give it a block of its own")


BENCH_TOOL = re.compile(r"(?:\S*/)?python3?")
BENCH_MAKE = re.compile(r"make (bench|bench-quick|bench-peers)")
#: Runs a tool as ``python SCRIPT ARGS`` would, up to its ``parse_args``: a bad flag exits 2 with the
#: parser's message, good ones exit 0 before any work.
PARSE_ONLY = r"""
import argparse, runpy, sys
_parse = argparse.ArgumentParser.parse_args
def _parse_only(self, *args, **kwargs):
    _parse(self, *args, **kwargs)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = _parse_only
sys.argv = sys.argv[1:]
sys.path.insert(0, str(__import__("pathlib").Path(sys.argv[0]).parent))
runpy.run_path(sys.argv[0], run_name="__main__")
raise SystemExit(f"{sys.argv[0]} never parsed its arguments")
"""


def check_bench(block: Block) -> None:
    """A bench block's commands: each tool's flags parsed by the tool, each make target defined."""
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for line in block.text.splitlines():
        lexer = shlex.shlex(line.removeprefix("$ "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        if not words:
            continue
        single = not any(set(w) <= set("();<>|&") for w in words)  # nothing chained or redirected
        if single and BENCH_MAKE.fullmatch(" ".join(words)):
            if words[1] not in targets:
                raise ExampleFailure(f"{block.where}: `make {words[1]}`: no such target in the Makefile")
        elif single and BENCH_TOOL.fullmatch(words[0]) and len(words) > 1 and words[1].startswith("tools/") and words[1].endswith(".py"):
            proc = subprocess.run([sys.executable, "-c", PARSE_ONLY, str(ROOT / words[1]), *words[2:]], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)
            if proc.returncode:
                raise ExampleFailure(f"{block.where}: `{line.strip()}`: {(proc.stderr or proc.stdout).strip()[-2000:]}")
        else:
            raise ExampleFailure(f"{block.where}: a bench block holds only `python tools/....py ARGS` and `make bench...`"
                                 f" commands; {line.strip()!r} must run: give it a block of its own")


@dataclass
class Services:
    """What pages may use: the demo data made once, the S3 server started on first need."""

    demo: Path  # the prepared demo dataset
    demo_output: str  # what tools/demo.py printed making it
    demo_paths: dict[str, str]  # real path -> how the page shows it, for the demo's output
    env: dict[str, str]
    stack: contextlib.ExitStack
    _s3: object | None = None

    def s3(self) -> object:
        if self._s3 is None:
            sys.path.insert(0, str(ROOT / "tools"))
            import s3server

            try:
                self._s3 = self.stack.enter_context(s3server.s3_server(buckets=["bucket"]))
            except s3server.Unavailable as e:
                from ci import in_ci

                if in_ci():
                    pytest.fail(f"S3 test server unavailable: {e} -- CI must run the S3 examples", pytrace=False)
                pytest.skip(f"S3 test server unavailable: {e}")
        return self._s3


def _mounts_under(folder: Path) -> list[str]:
    found = []
    with open("/proc/mounts") as f:
        for line in f:
            point = line.split()[1].encode().decode("unicode_escape")
            if point == str(folder) or point.startswith(str(folder) + "/"):
                found.append(point)
    return found


def run_page(blocks: list[Block], cwd: Path, services: Services) -> None:
    """Run a page's blocks in order in ``cwd``; raises ExampleFailure naming the block that failed."""
    env = dict(services.env)
    paths = {str(cwd.resolve()): "/work", str(cwd): "/work"}
    needs = set().union(*(_needs(b) for b in blocks if b.runs or "file" in b.markers))
    endpoint = S3_PLACEHOLDER
    if "fuse" in needs and not shutil.which("fusermount3"):
        from ci import in_ci

        (pytest.fail if in_ci() else pytest.skip)("FUSE examples need fusermount3 (apt-get install fuse3)")
    if "s3" in needs:
        server = services.s3()
        endpoint = server.endpoint  # type: ignore[attr-defined]
        env.update(server.env())  # type: ignore[attr-defined]
        fs = server.filesystem()  # type: ignore[attr-defined]
        if fs.exists("bucket/demo-data"):
            fs.rm("bucket/demo-data", recursive=True)
        fs.put(sorted(str(p) for p in (services.demo / "parts").glob("*.tar")), "bucket/demo-data/parts/")
    python: PythonSession | None = None
    last_output = ""
    previous: Block | None = None
    try:
        for block in blocks:
            code = block.text.replace(S3_PLACEHOLDER, endpoint) if "s3" in _needs(block) else block.text
            if "bench" in block.markers:
                check_bench(block)
            elif "setup" in block.markers:
                check_setup(block)
                last_output = services.demo_output if "make demo" in block.text else ""
            elif "output" in block.markers:
                if previous is None or not (previous.runs or "setup" in previous.markers):
                    raise ExampleFailure(f"{block.where}: an output block follows a block that runs")
                compare(block, f"the output of the block at line {previous.line}", block.text, last_output,
                        {**paths, **services.demo_paths})
            elif "file" in block.markers:
                target = cwd / block.markers["file"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(code)
            elif block.lang == "python":
                python = python or PythonSession(cwd, env)
                last_output = python.run(block, code)
            elif block.lang == "console":
                last_output = run_console(block, code, cwd, env, paths)
            elif block.lang in SHELL:
                last_output = run_shell(block, code, cwd, env)
            previous = block
    finally:
        if python:
            python.close()
        left = _mounts_under(cwd)
        for point in left:
            subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
    if left:
        raise ExampleFailure(f"{blocks[0].page}: the page's examples left mounted: {', '.join(left)}")


# ----- the tests ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    base = tmp_path_factory.mktemp("docs-demo")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["SHARDSTORE_CACHE"] = str(base / "cache")
    env["COLUMNS"] = "120"
    env.pop("CI_FORCE_TTY", None)
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "demo.py"), "--out", str(base / "demo-data")], cwd=base, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"tools/demo.py failed:\n{proc.stdout}\n{proc.stderr}"
    with contextlib.ExitStack() as stack:
        yield Services(base / "demo-data", proc.stdout, {str(base): "/work"}, env, stack)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples(page: Path, services: Services, tmp_path: Path) -> None:
    blocks = parse_page(page)
    shutil.copytree(services.demo, tmp_path / "demo-data", symlinks=True)
    (tmp_path / "tools").symlink_to(ROOT / "tools")
    run_page(blocks, tmp_path, services)


def _tiny_page(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "broken.md"
    page.write_text(text)
    return parse_page(page, "broken.md")


def test_runner_fails_on_a_broken_example(services: Services, tmp_path: Path) -> None:
    """The runner's self-check: a wrong output, a failing command and a failing Python line each fail it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "demo-data").symlink_to(services.demo)
    good = _tiny_page(tmp_path, "```console\n$ shardstore ls ./demo-data --split val -n 2\n"
                                "s00006_000000\tjpg,txt,json\n...\n```\n"
                                "<!-- example: file=conf/a.yaml -->\n```yaml\nk: v\n```\n"
                                "```python\nprint(open('conf/a.yaml').read())\n```\n"
                                "<!-- example: output -->\n```\nk: v\n```\n")
    run_page(good, work, services)
    assert (work / "conf" / "a.yaml").read_text() == "k: v\n"
    broken = {
        "wrong output": "# Broken\n\n```console\n$ shardstore ls ./demo-data --split val -n 1\ns00006_000001\tjpg\n```\n",
        "failing command": "```bash\nshardstore info ./no-such-dataset\n```\n",
        "failing python": "```python\nimport shardstore\n\nshardstore.open('./demo-data')[5000]\n```\n",
        "skip by setup": "<!-- example: setup -->\n```bash\nmake demo\nshardstore cat ./x y\n```\n",
        "bad bench flag": "<!-- example: bench -->\n```\n$ python tools/bench/read.py --no-such-flag 3\n```\n",
        "skip by bench": "<!-- example: bench -->\n```\npython tools/bench/read.py --help && shardstore cat ./x y\n```\n",
    }
    messages = {}
    for what, text in broken.items():
        with pytest.raises(ExampleFailure) as e:
            run_page(_tiny_page(tmp_path, text), work, services)
        messages[what] = str(e.value)
    assert messages["wrong output"].startswith("broken.md:3: `shardstore ls ./demo-data --split val -n 1`")
    assert "-s00006_000001 jpg" in messages["wrong output"] and "+s00006_000000 jpg,txt,json" in messages["wrong output"]
    assert messages["failing command"].startswith("broken.md:1: ") and "no-such-dataset: no such folder" in messages["failing command"]
    assert "broken.md\", line 4" in messages["failing python"] and "SampleNotFoundError" in messages["failing python"]
    assert "setup block" in messages["skip by setup"]
    assert "unrecognized arguments: --no-such-flag 3" in messages["bad bench flag"]
    assert "bench block holds only" in messages["skip by bench"]
    print("the runner's report of a broken example:\n" + messages["wrong output"])


def test_markers_and_comparison_rules(tmp_path: Path) -> None:
    blocks = _tiny_page(tmp_path, "<!-- examples: needs=s3 -->\n\n<!-- example: output -->\n\n```\nx\n```\n"
                                  "text\n<!-- example: file=a.yaml -->\ntext clears it\n```yaml\nk: v\n```\n")
    assert [b.markers for b in blocks] == [{"needs": "s3", "output": ""}, {"needs": "s3"}]
    with pytest.raises(ExampleFailure, match="unknown example marker 'skip'"):
        _tiny_page(tmp_path, "<!-- example: skip -->\n```bash\ntrue\n```\n")
    shown = normalize("Prepared /work/demo-data: 4000 samples in 0.07 s (1,234/s), uuid "
                      "0bda792f-5001-466e-9f6b-52cbbc4f7523\n...\nend", {})
    got = normalize(f"Prepared {tmp_path}/demo-data:  4000 samples in 12.5 ms (99/s), uuid "
                    "11111111-2222-4333-8444-555555555555\nline\nline\nend\n", {str(tmp_path): "/work"})
    assert output_matches(shown, got)
    assert not output_matches(normalize("4001 samples", {}), normalize("4000 samples", {}))

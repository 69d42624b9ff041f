"""tools/s3server.py and tools/delayproxy.py as people and benchmarks use them: CLI and Python."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import s3server  # noqa: E402
from delayproxy import DelayProxy, delay_proxy  # noqa: E402

pytestmark = pytest.mark.s3


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) is not alive either
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")", 1)[1].split()[0] != "Z"


def _tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "s3server.py"), *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_install_is_idempotent_and_fast(s3_server: Any) -> None:
    t0 = time.perf_counter()
    res = _tool("install", "-q")
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).is_file()
    assert time.perf_counter() - t0 < 10


def test_cli_start_status_stop(tmp_path: Path, s3_server: Any) -> None:
    state = str(tmp_path / "state.json")
    served = tmp_path / "served"
    (served / "existing").mkdir(parents=True)
    (served / "existing" / "hello.txt").write_bytes(b"hello from disk")
    res = _tool("--state", state, "start", "--dir", str(served), "--bucket", "made", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    pid = info["pid"]
    try:
        assert _alive(pid)
        assert _tool("--state", state, "status").returncode == 0
        assert _tool("--state", state, "start").returncode == 1  # one at a time per state file
        import s3fs

        fs = s3fs.S3FileSystem(**info["storage_options"], skip_instance_cache=True)
        assert fs.cat_file("existing/hello.txt") == b"hello from disk"  # a folder served as is
        assert "made" in [b.rstrip("/") for b in fs.ls("")]
        assert info["env"]["AWS_ENDPOINT_URL"] == info["endpoint"]
    finally:
        res = _tool("--state", state, "stop")
    assert res.returncode == 0
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert (served / "existing" / "hello.txt").exists()  # a folder it was given is never deleted
    assert _tool("--state", state, "status").returncode == 1


def test_cli_start_prints_shell_exports(tmp_path: Path, s3_server: Any) -> None:
    state = str(tmp_path / "state.json")
    res = _tool("--state", state, "start")
    try:
        assert res.returncode == 0, res.stderr
        exports = dict(line[len("export "):].split("=", 1) for line in res.stdout.splitlines())
        assert exports["AWS_ACCESS_KEY_ID"] == "testkey" and exports["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        root = json.loads(Path(state).read_text())["root"]
        assert Path(root).is_dir()
    finally:
        _tool("--state", state, "stop")
    assert not Path(root).exists()  # a temporary folder it made is deleted


@pytest.mark.parametrize("kind", ["rclone", "rgw"])
def test_server_dies_with_its_python_process(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    """Every process of the server (rgw: monitor, OSD and gateway) goes when its starter is killed."""
    request.getfixturevalue("s3_server" if kind == "rclone" else "rgw_server")  # skips if it cannot be had
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import s3server; s = s3server.start(kind=sys.argv[2]); "
            "print(s.pid, *s.helper_pids, flush=True); input()")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # what the killed process cannot clean up stays here
    proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "tools"), kind], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == (1 if kind == "rclone" else 3) and all(_alive(pid) for pid in pids)
    proc.send_signal(signal.SIGKILL)  # no cleanup code runs: the kernel's parent-death signal must
    proc.wait()
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def test_moto_kind(moto_server: Any) -> None:
    fs = moto_server.filesystem()
    fs.pipe_file("shardstore-test/m/x.bin", b"0123456789")
    assert fs.cat_file("shardstore-test/m/x.bin", start=2, end=4) == b"23"


def test_cli_rgw_stop_leaves_no_process(tmp_path: Path, rgw_server: Any) -> None:
    """``start --kind rgw`` from the CLI (the daemons outlive it), then ``stop`` from another
    process, which knows them only from the state file: monitor, OSD and gateway all gone, and
    their state folder too."""
    state = str(tmp_path / "state.json")
    res = _tool("--state", state, "start", "--kind", "rgw", "--bucket", "made", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    saved = json.loads(Path(state).read_text())
    pids = [info["pid"], *saved["helper_pids"]]
    try:
        names = sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids)
        assert names == ["ceph-mon", "ceph-osd", "radosgw"]
        assert info["endpoint"] != rgw_server.endpoint  # its own free port, beside the session's server
        assert _tool("--state", state, "status").returncode == 0
        import s3fs

        fs = s3fs.S3FileSystem(**info["storage_options"], skip_instance_cache=True)
        fs.pipe_file("made/x.bin", b"0123456789")
        assert fs.cat_file("made/x.bin", start=3, end=6) == b"345"
    finally:
        res = _tool("--state", state, "stop")
    assert res.returncode == 0
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
    assert not Path(saved["state_dir"]).exists()


def test_rgw_start_tries_again_on_new_ports(rgw_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster start that fails (here: the monitor's port is taken, so ``osd new`` never gets an
    answer) is tried again from nothing on new ports; the failed try leaves no daemon behind."""
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    picked: list[tuple[int, int]] = []
    real = s3server._two_free_ports

    def first_one_taken() -> tuple[int, int]:
        mon, rgw = real()
        picked.append((busy.getsockname()[1], rgw) if not picked else (mon, rgw))
        return picked[-1]

    monkeypatch.setattr(s3server, "_two_free_ports", first_one_taken)
    monkeypatch.setattr(s3server, "RGW_ATTEMPT_S", 5.0)
    before = set(_pids_named("ceph-mon", "ceph-osd", "radosgw"))
    try:
        server = s3server.start(kind="rgw", timeout=30)
    finally:
        busy.close()
    try:
        assert len(picked) == 2 and server.endpoint.endswith(f":{picked[1][1]}")
        assert set(_pids_named("ceph-mon", "ceph-osd", "radosgw")) - before == {server.pid, *server.helper_pids}
    finally:
        server.stop()


def _pids_named(*names: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() in names and _alive(int(comm.parent.name)):
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown server kind"):
        s3server.start(kind="minio")


# ----- delayproxy -----------------------------------------------------------------------------------
def _get_ms(fs: Any, path: str, n: int = 5) -> float:
    fs.cat_file(path, start=0, end=10)
    t0 = time.perf_counter()
    for _ in range(n):
        fs.cat_file(path, start=0, end=10)
    return (time.perf_counter() - t0) / n * 1000


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_delay_proxy_adds_latency_each_way(s3_server: Any, process: bool) -> None:

    s3_server.filesystem().pipe_file("shardstore-test/delay/x.bin", b"x" * 1000)
    with delay_proxy(s3_server.endpoint, 40, process=process) as proxy:
        fs = s3_server.filesystem(proxy.endpoint)
        assert fs.cat_file("shardstore-test/delay/x.bin") == b"x" * 1000
        ms = _get_ms(fs, "shardstore-test/delay/x.bin")
    assert 80 <= ms < 400, ms  # one round trip: 40 ms there, 40 ms back


def test_delay_proxy_counts_requests_and_bodies_pass(s3_server: Any) -> None:

    with DelayProxy(s3_server.endpoint) as proxy:
        fs = s3_server.filesystem(proxy.endpoint)
        body = os.urandom(3 << 20)  # a PUT body larger than one read chunk
        fs.pipe_file("shardstore-test/count/big.bin", body)
        fs.pipe_file("shardstore-test/count/small.bin", b"s")
        assert fs.cat_file("shardstore-test/count/big.bin", start=10, end=20) == body[10:20]
        assert fs.cat_file("shardstore-test/count/small.bin") == b"s"
        assert proxy.count("PUT") == 2
        gets = [r for r in proxy.requests if r.method == "GET"]
        assert gets[0].range == "bytes=10-19" and gets[0].path.endswith("/count/big.bin")


def test_delay_proxy_cli(s3_server: Any) -> None:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "delayproxy.py"), "--target", s3_server.endpoint,
                             "--delay-ms", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()

        fs = s3_server.filesystem(endpoint)
        fs.pipe_file("shardstore-test/cli/x.bin", b"via the cli proxy")
        assert fs.cat_file("shardstore-test/cli/x.bin") == b"via the cli proxy"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "connections:" in err and "'PUT': 1" in err

"""No test may leave a process behind: the check at the end of the test run.

``tests/conftest.py`` registers ``pytest_sessionfinish`` from here. After every test and fixture
has finished (session fixtures such as the S3 servers are torn down by then), any process still
running below the pytest process is a leak: a server not stopped, a mount not unmounted, a
``shardstore prepare`` that ignored the signal a test sent it (as happens when the suite itself
runs in the background, where SIGINT is ignored and children inherit that). The check waits a
few seconds for processes that are already on their way out, then names the rest, kills them
and fails the run. Imported as ``from leftovers import ...`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import os

import pytest

#: How long processes already on their way out get (``SHARDSTORE_TEST_LEFTOVER_GRACE`` overrides).
GRACE_SECONDS = float(os.environ.get("SHARDSTORE_TEST_LEFTOVER_GRACE", "5"))
#: Helpers Python's multiprocessing starts once per process and keeps until this process exits
#: (they read a pipe from it until end-of-file): not leaks.
PYTHON_HELPERS = ("from multiprocessing.resource_tracker import main", "from multiprocessing.forkserver import main")


def leftover_processes(grace: float = GRACE_SECONDS) -> list[str]:
    """Descendants of this process still running after ``grace`` seconds, as ``pid: command``
    lines; they are killed. Zombies (ended, not yet reaped) and multiprocessing's own helpers do
    not count."""
    import psutil

    def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
        out = []
        for p in procs:
            try:
                helper = any(h in " ".join(p.cmdline()) for h in PYTHON_HELPERS)
                if p.status() != psutil.STATUS_ZOMBIE and not helper:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    children = alive(psutil.Process().children(recursive=True))
    if not children:
        return []
    _, still = psutil.wait_procs(children, timeout=grace)
    still = alive(still)
    names = []
    for p in still:
        try:
            names.append(f"{p.pid}: {' '.join(p.cmdline())[:200]}")
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(still, timeout=5)
    return names


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    names = leftover_processes()
    if not names:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = "processes left running by the tests (now killed):\n  " + "\n  ".join(names)
    if reporter is not None:
        reporter.write_sep("=", "leftover processes", red=True)
        reporter.write_line(message)
    else:
        print(message)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

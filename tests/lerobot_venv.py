"""LeRobot's own code run in its own venv: the one way the suite starts it, for the peers in
``tests/convert/`` (``lerobot_peer.py``, ``lerobot_dataset_peer.py``, ``lerobot_own_writer.py``)
and for short ``-c`` scripts.

The venvs are named by the dataset version their release writes: ``.venv-lerobot`` (lerobot
0.6.1, v3.0; ``SHARDSTORE_LEROBOT_VENV`` names another) and ``.venv-lerobot03`` (lerobot 0.3.3,
the last release that reads v2.1; ``SHARDSTORE_LEROBOT03_VENV``); ``make lerobot`` installs both.
Imported as ``from lerobot_venv import run_lerobot`` (``tests/`` is on ``sys.path``, as for ``ci``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ci import in_ci

ROOT = Path(__file__).resolve().parent.parent
#: The peer scripts, run by LeRobot's Python; they import no shardstore.
PEERS = ROOT / "tests" / "convert"
_VENVS = {"v3.0": ("SHARDSTORE_LEROBOT_VENV", ".venv-lerobot"), "v2.1": ("SHARDSTORE_LEROBOT03_VENV", ".venv-lerobot03")}


def lerobot_python(version: str = "v3.0") -> Path:
    """The Python of the LeRobot venv for datasets of ``version``; skips the test when it is
    missing (fails it in CI, which must run the LeRobot tests)."""
    variable, folder = _VENVS[version]
    python = Path(os.environ.get(variable, ROOT / folder)) / "bin" / "python"
    if not python.exists():
        why = f"{python} is missing (LeRobot's own venv: `make lerobot`)"
        if in_ci():
            pytest.fail(why + "; CI must run the LeRobot tests")
        pytest.skip(why)
    return python


def run_lerobot(*args: str | os.PathLike[str], version: str = "v3.0", timeout: float = 600,
                pythonpath: str | None = None) -> str:
    """``python ARGS`` in the LeRobot venv of ``version``, offline and on the CPU, with only its own
    packages (no ``PYTHONPATH`` unless ``pythonpath``); its stdout. A non-zero exit fails the test
    with the tail of its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="", **({"PYTHONPATH": pythonpath} if pythonpath else {}))
    res = subprocess.run([str(lerobot_python(version)), *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    return res.stdout

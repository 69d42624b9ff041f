"""The optional compiled helpers (``setup.py`` builds them where a C compiler is found).

Each does one hot path that also runs in Python or numpy, its reference: ``_tarwalk`` walks plain
tar headers (``tarscan``), ``_unitfloat`` casts decoded frames to floats (``torch.chw_float``).
``SHARDSTORE_PURE_PYTHON=1`` turns them off, for a comparison or a suspected fault.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["load"]


def load(name: str) -> Any:
    """The compiled module ``shardstore.<name>``, or None: not built (no compiler where the
    package was installed) or ``SHARDSTORE_PURE_PYTHON`` set."""
    if os.environ.get("SHARDSTORE_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"shardstore.{name}")
    except ImportError:
        return None

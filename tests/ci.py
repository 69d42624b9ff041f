"""Whether the tests run in CI: there a test that would skip for want of a peer (megatron-energon),
a server or FUSE must fail instead, since CI has to run them all.

Imported as ``from ci import in_ci`` (``tests/`` is on ``sys.path``: pytest puts the folder of
``tests/conftest.py`` there), by test modules and conftests in subfolders alike.
"""

from __future__ import annotations

import os


def in_ci() -> bool:
    """True when the ``CI`` environment variable is ``1``, ``true`` or ``yes`` (any case)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")

"""The peer of the compatibility tests: the real megatron-energon (the ``compat`` extra).

Without it a compat test module is skipped, except in CI, where the compat tests must run and a
missing peer is an error rather than a quiet skip.
"""

from __future__ import annotations

from typing import NoReturn

import pytest
from ci import in_ci


def missing_peer(error: BaseException) -> NoReturn:
    """Call where importing megatron-energon failed: skips the module, or raises in CI."""
    why = f"megatron-energon is not importable ({error!r}); install the `compat` extra"
    if in_ci():
        raise RuntimeError(why + " (CI must run the compat tests)") from error
    pytest.skip(why, allow_module_level=True)

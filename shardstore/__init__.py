"""shardstore: indexed WebDataset tar shards with fast random access, compatible with Energon.

``import shardstore`` is cheap: it imports neither s3fs, a FUSE binding nor torch, and no submodule
at all until one of the names below is first used (PEP 562 module ``__getattr__``). Why: the
``shardstore`` command and its prepare workers start a fresh interpreter, and loading the reader,
the metadataset code and the mount up front cost ~0.19 s of a ~1.7 s prepare.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs only; at run time ``__getattr__`` loads these
    from . import convert, edit, episodes
    from .dataset import Dataset, open
    from .episodes import EpisodeWriter
    from .errors import ShardstoreError
    from .metadataset import Metadataset, interleave, open_metadataset
    from .mount import mount
    from .prepare import PrepareReport, prepare
    from .samples import Sample

__version__ = "0.1.0"

#: Public name -> the submodule that defines it. ``mount`` is the function; its helpers are in
#: ``shardstore.mount`` (``from shardstore.mount import umount``).
_EXPORTS = {
    "Dataset": "dataset",
    "open": "dataset",
    "ShardstoreError": "errors",
    "Metadataset": "metadataset",
    "interleave": "metadataset",
    "open_metadataset": "metadataset",
    "mount": "mount",
    "PrepareReport": "prepare",
    "prepare": "prepare",
    "Sample": "samples",
    "EpisodeWriter": "episodes",
}
#: Public names that are a subpackage itself: ``shardstore.episodes`` is the package, and calling
#: it (``shardstore.episodes(ds)``) opens the episode view; calling ``shardstore.convert(src, out,
#: to=...)`` converts between formats; ``shardstore.edit`` holds the edits.
_SUBPACKAGES = frozenset({"convert", "edit", "episodes"})

__all__ = [
    "Dataset",
    "EpisodeWriter",
    "Metadataset",
    "PrepareReport",
    "Sample",
    "ShardstoreError",
    "convert",
    "edit",
    "episodes",
    "interleave",
    "mount",
    "open",
    "open_metadataset",
    "prepare",
    "__version__",
]


#: Names that are both a submodule and the function it defines.
_SHADOWED = frozenset({"mount", "prepare"})


class _Package(types.ModuleType):
    """The package's module type: ``shardstore.prepare`` and ``shardstore.mount`` stay the functions.

    Importing a submodule binds it as an attribute of its package (``import shardstore.prepare``
    sets ``shardstore.prepare`` to the module). The eager ``from .prepare import prepare`` used to
    write the function over it at once; lazily, the CLI or a test may import the submodule first,
    and ``from shardstore import prepare`` would then hand out the module. So that binding is
    turned into the function the module defines (it is done after the module has run).
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """Load the submodule defining ``name`` on first use and cache the name in this module."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""Outside formats, one package each, all through the episode model (``shardstore.episodes.model``).

A format package ``convert/<format>/`` holds everything about that format (reader, writer, check,
the conventions it maps) and imports no other format's package; what several formats share lives
in the hub, ``shardstore.episodes``. Its two central public functions:

- ``read_<format>(src, ...) -> EpisodeStream``: the source's schema, its episodes (lazily) and its
  own metadata files (kept byte for byte under ``.nv-meta/source/`` by the import);
- ``write_<format>(stream: EpisodeStream, out, ...)``: the format written from episodes, staged
  and moved into place so that an interrupted export leaves nothing half-written.

The shard store is one more reader and writer: ``EpisodeWriter`` writes a stream into shards and
prepares them; ``shardstore.episodes(ds).stream()`` reads a prepared dataset back as a stream.
So ``import X`` is ``EpisodeWriter(out).write_stream(read_X(src))`` and ``export X`` is
``write_X(episodes(ds).stream(), out)``; any format converts to any other through the hub.

The package is callable: ``shardstore.convert(src, out, to="rlds")`` is ``any_to_any.convert``
(import + export through the hub in one call), while ``shardstore.convert.minari`` etc. stay its
subpackages.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["convert"]


def convert(src: Any, out: Any, **options: Any) -> Any:
    """``any_to_any.convert``: the dataset ``src`` converted into ``options["to"]`` at ``out``."""
    from .any_to_any import convert as run

    return run(src, out, **options)


class _CallablePackage(types.ModuleType):
    """This package's module type: calling it converts (``shardstore.convert(src, out, to=...)``)."""

    def __call__(self, src: Any, out: Any, **options: Any) -> Any:
        return convert(src, out, **options)


sys.modules[__name__].__class__ = _CallablePackage

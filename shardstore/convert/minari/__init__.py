"""Minari datasets (0.3-0.5; HDF5, Arrow, Parquet) to and from the episode model."""

from __future__ import annotations

from .api import (
    BACKENDS,
    VERSIONS,
    ExportReport,
    MinariPart,
    MinariSource,
    export_minari,
    import_minari,
    inspect_source,
    locate,
    read_minari,
    write_minari,
)

__all__ = ['VERSIONS', 'BACKENDS', 'MinariSource', 'MinariPart', 'ExportReport', 'locate', 'inspect_source', 'read_minari', 'write_minari', 'import_minari', 'export_minari']

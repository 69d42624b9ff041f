"""The on-disk index: Energon's ``index.sqlite`` and the per-shard ``.tar.idx`` offset arrays."""

from .sqlite import IndexReader, IndexWriter, PartRow, SampleRow
from .taridx import offsets_bytes, read_offsets

__all__ = ["IndexReader", "IndexWriter", "PartRow", "SampleRow", "read_offsets", "offsets_bytes"]

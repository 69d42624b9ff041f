"""shardstore: indexed WebDataset tar shards with fast random access, compatible with Energon.

``import shardstore`` is cheap: it imports neither s3fs, a FUSE binding nor torch.
"""

from __future__ import annotations

from .dataset import Dataset, open
from .errors import ShardstoreError
from .metadataset import Metadataset, interleave, open_metadataset
from .mount import mount  # the function; helpers: ``from shardstore.mount import umount``
from .prepare import PrepareReport, prepare
from .samples import Sample

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "Metadataset",
    "PrepareReport",
    "Sample",
    "ShardstoreError",
    "interleave",
    "mount",
    "open",
    "open_metadataset",
    "prepare",
    "__version__",
]

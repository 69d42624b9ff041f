"""Mount a prepared dataset read-only through FUSE: ``shardstore.mount(...)``, ``shardstore mount``.

One module per idea: ``tree`` (the names a mount shows: layouts, ``.by-shard``/``.by-split`` views,
lazy listings from ``index.sqlite``), ``fs`` (the FUSE operations over a tree: errno mapping, range
reads, S3 read-ahead; ``shardstore._fusefast`` holds their optional compiled paths) and ``process``
(what to mount, the mount process, mount points, unmounting).

``shardstore.mount`` is the function; take the rest from here
(``from shardstore.mount import umount, MountHandle``).
"""

from __future__ import annotations

from .process import MountHandle, mount, open_tree, serve, umount
from .tree import LAYOUTS

__all__ = ["LAYOUTS", "MountHandle", "mount", "open_tree", "serve", "umount"]

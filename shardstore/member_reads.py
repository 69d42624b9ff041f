"""Reads by member name (``key.part``): ``read_file``, ``member_range`` and what aux stores, ``cat``
and the mount build on, as a part of ``Dataset``.

A member is found through the index (the name table or ``samples JOIN sample_parts``), its shard
checked once (size, mtime or ETag), its byte range checked against the shard, and its payload read
with the headers just before it, which must name it (``membercheck``): a shard rewritten with its
size kept never serves another member's bytes. Energon 6 indexes (no ``sample_parts``) find the
member in its sample's headers instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import SampleNotFoundError, ShardstoreError, StaleIndexError, TarFormatError
from .keys import split_name
from .membercheck import HEADER_SPAN, header_names_member
from .storage import ByteRange, LocalStorage
from .tarscan import regular_members

if TYPE_CHECKING:
    from .dataset import SampleRef, ShardRef
    from .index.sqlite import IndexReader
    from .nvmeta import DatasetInfo
    from .storage import Storage

__all__ = ["MemberReads"]

#: Members bigger than this are read apart from the headers before them (local storage).
_SEPARATE_HEADER_READ = 64 << 10


class MemberReads:
    """``Dataset``'s reads by member name (a mixin: ``Dataset`` provides the index, the storage,
    the shard checks and the lookup by key used here)."""

    url: str
    storage: Storage
    info: DatasetInfo
    _checked: dict[int, int]

    if TYPE_CHECKING:

        @property
        def index(self) -> IndexReader: ...

        def shard_of(self, tar_file_id: int, member: str | None = None) -> ShardRef: ...

        def check_range(self, shard: ShardRef, offset: int, size: int, member: str | None) -> None: ...

        def _locate_key(self, key: str) -> SampleRef: ...

    def member_range(self, name: str) -> tuple[str, ByteRange]:
        """(shard, data range) of member ``key.part``, checked as ``read_file`` checks it (the
        shard unchanged, the range inside it, the member there the one named)."""
        shard, offset, size, verified = self.locate_member(name)
        if not verified:
            pre = min(offset, HEADER_SPAN)
            self.verify_member(shard, name, offset, size, self.storage.read_at(shard.name, offset - pre, pre))
        return shard.name, ByteRange(offset, size)

    def locate_member(self, name: str) -> tuple[ShardRef, int, int, bool]:
        """(shard, data offset, size, verified) of member ``key.part``: one lookup by name (the
        name table or an indexed query, ``IndexReader.member``), its shard checked and the range
        inside it. ``verified``: found by parsing its sample's headers (Energon 6 indexes), so
        ``verify_member`` has nothing left to show."""
        if not isinstance(name, str):
            raise TypeError(f"member names are str, not {type(name).__name__}")
        index = self.index
        hit = index.member(name)
        if hit is None:
            kp = split_name(name) if not index.has_parts else None
            if kp:
                return (*self._member_from_headers(name, *kp), True)
            raise SampleNotFoundError(self._no_member(name), path=self.url, member=name)
        tar_file_id, offset, size = hit
        shard = self.shard_of(tar_file_id, name)
        self.check_range(shard, offset, size, name)
        return shard, offset, size, False

    def _member_from_headers(self, name: str, key: str, part: str) -> tuple[ShardRef, int, int]:
        """(shard, data offset, size) of a member found in its sample's tar headers: for Energon 6
        indexes (no ``sample_parts``), and to settle what ``verify_member`` could not show. A
        part repeated in one sample is its last copy, as in ``get`` (and Energon's sample reader)."""
        ref = self._locate_key(key)
        data = self.storage.read_range(ref.shard.name, ref.range)
        found = None
        for member, start, size in regular_members(data, self.storage.url(ref.shard.name)):
            if split_name(member) == (key, part):
                found = (ref.shard, ref.range.offset + start, size)
        if found is None:
            raise SampleNotFoundError(f"no member {name!r}", path=self.storage.url(ref.shard.name), member=name)
        return found

    def verify_member(self, shard: ShardRef, name: str, offset: int, size: int, buf: bytes, end: int | None = None) -> None:
        """``StaleIndexError`` unless member ``name`` (``size`` bytes) still has its data at
        ``offset`` of ``shard``: shown by the bytes of ``buf`` before ``end`` (default: all of it),
        which end where the member's data starts (``membercheck``), or failing that by its
        sample's headers (one more read, only then)."""
        if header_names_member(buf, len(buf) if end is None else end, name.encode("utf-8", "surrogateescape"), size):
            return
        kp = split_name(name)
        try:
            found = self._member_from_headers(name, *kp) if kp else None
        except (SampleNotFoundError, TarFormatError):
            found = None
        if found is None or found[1:] != (offset, size):
            raise StaleIndexError(
                f"the index puts member {name!r} ({size} bytes) here, the shard's headers do not: "
                "the shard changed since prepare; rerun prepare",
                path=self.storage.url(shard.name),
                member=name,
                offset=offset,
            )

    def read_member(self, shard: ShardRef, name: str, offset: int, size: int) -> bytes:
        """The payload of member ``name`` from an index row (shard and range already checked),
        with ``HEADER_SPAN`` bytes before it to ``verify_member``: one read, or for big local
        members a small one more (copying a big payload out of a bigger read costs more)."""
        pre = offset if offset < HEADER_SPAN else HEADER_SPAN
        if size > _SEPARATE_HEADER_READ and isinstance(self.storage, LocalStorage):
            self.verify_member(shard, name, offset, size, self.storage.read_at(shard.name, offset - pre, pre))
            return self.storage.read_at(shard.name, offset, size)
        both = self.storage.read_at(shard.name, offset - pre, pre + size)
        self.verify_member(shard, name, offset, size, both, pre)
        return both[pre:]

    def read_file(self, name: str) -> bytes:
        """The bytes of one member, ``key.part``: its payload, and the headers just before it
        that show it is the member named (``verify_member``)."""
        # The hot path written out (``locate_member`` and ``read_member`` for a checked shard, a
        # range inside it and a small member): every call saved is a few percent of a lookup.
        hit = self.index.member(name) if type(name) is str else None
        if hit is not None:
            tar_file_id, offset, size = hit
            end = self._checked.get(tar_file_id)
            if (
                end is not None
                and type(offset) is int
                and type(size) is int
                and HEADER_SPAN <= offset
                and 0 <= size <= _SEPARATE_HEADER_READ
                and offset + size <= end
            ):
                both = self.storage.read_at(self.info.shards[tar_file_id], offset - HEADER_SPAN, HEADER_SPAN + size)
                if header_names_member(both, HEADER_SPAN, name.encode("utf-8", "surrogateescape"), size):
                    return both[HEADER_SPAN:]
        shard, offset, size, verified = self.locate_member(name)
        if verified:
            return self.storage.read_at(shard.name, offset, size)
        return self.read_member(shard, name, offset, size)

    def _no_member(self, name: str) -> str:
        """"no member NAME", and when NAME is a sample's key, the members it has (a bare key is the
        commonest slip: ``cat DS KEY`` for ``cat DS KEY.txt``)."""
        try:
            loc = self.index.locate(name)
        except (ValueError, ShardstoreError):  # a name SQLite cannot take (lone surrogates) is no key either
            loc = None
        if loc is None or not self.index.has_parts:
            return f"no member {name!r}"
        members = ", ".join(f"{name}.{p[0]}" for p in self.index.parts(loc.tar_file_id, loc.sample_index))
        return f"no member of that name: it is a sample's key; its members are {members}"

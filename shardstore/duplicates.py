"""``prepare --fix-duplicates``: make repeated sample keys unique by renaming members, as Energon 7.4 does.

Energon's rule (``megatron.energon.flavors.webdataset.tar_patcher``, pinned against it in
tests/compat/test_fix_duplicates_compat.py): when a key occurs in more than one shard, *every* member
of *every* shard is renamed to ``<shard path>/<old name>`` (``parts/a.tar`` holding ``s0.jpg`` then
holds ``parts/a.tar/s0.jpg``: key ``parts/a.tar/s0``), by rewriting only the name fields and checksum
of each tar header, so no offset changes. It is refused when a shard has GNU long-name headers, a PAX
header naming the path, a key repeated within one shard (prefixing cannot fix that), or a name that
would no longer fit its header. Energon's key rule here is its patcher's (everything up to the first dot
of the basename, for every header that is not a PAX header), which is also what decides the duplicates.

What differs is safety: Energon rewrites the headers of each shard in place, so a crash leaves a
half-patched shard. Here each shard is copied to a hidden temporary file beside it, patched there,
flushed, and renamed over the original: a shard is always either old or new. A dataset left half done
(some shards renamed, a crash before the others) is finished by running the fix again: shards whose
members all carry their prefix already are skipped, and the others are renamed even when no key is
repeated any more. Local datasets only (the shards are rewritten).
"""

from __future__ import annotations

import mmap
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import ConfigError, TarFormatError, TruncatedTarError
from .storage import Storage

__all__ = ["DuplicateFix", "plan_fix", "apply_fix", "fix_duplicates_dry_run"]

_BLOCK = 512
_PAX_PATH_KEYS = {b"path", b"linkpath", b"gnu.path", b"gnu.linkpath", b"SCHILY.path", b"SCHILY.linkpath"}
#: Temporary copies are named ``.<shard>.fix-duplicates-<random>.tmp`` beside the shard.
_TMP_MARK = ".fix-duplicates-"


@dataclass
class _Shard:
    """One shard as the patcher sees it: each renamable header's offset and path, its keys in order."""

    name: str
    headers: list[tuple[int, bytes, bool]] = field(default_factory=list)  # (offset, path, ustar magic)
    keys: list[bytes] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def prefix(self) -> bytes:
        return f"{self.name}/".encode()

    @property
    def done(self) -> bool:
        """Every member already carries this shard's prefix: renamed by an earlier run."""
        return bool(self.headers) and all(p.startswith(self.prefix) for _, p, _ in self.headers)


@dataclass
class DuplicateFix:
    """What ``--fix-duplicates`` found and did (or, for a dry run, would do).

    ``duplicates``: key -> the shards holding it (keys in several shards). ``shards``: the shards
    renamed (or to rename), each with its first rename as an example in ``examples``. ``skipped``:
    shards renamed by an earlier run. ``problems``: why renaming is impossible (then nothing changed).
    """

    duplicates: dict[str, list[str]]
    shards: list[str]
    skipped: list[str]
    examples: dict[str, tuple[str, str]]
    problems: list[str]
    applied: bool = False

    @property
    def needed(self) -> bool:
        return bool(self.shards)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size(field_bytes: bytes) -> int:
    """The size field as Energon's patcher reads it (base-256 or octal; garbage counts as 0)."""
    if field_bytes[0] & 0x80:
        if field_bytes[0] & 0x40:
            return 0
        return int.from_bytes(bytes([field_bytes[0] & 0x3F]) + field_bytes[1:], "big")
    n = 0
    for b in field_bytes:
        if b in (0, 32):
            continue
        if not 48 <= b <= 57:
            return 0
        n = n * 8 + b - 48
    return n


def _full_path(hdr: bytes) -> tuple[bytes, bool]:
    name = hdr[:100].split(b"\0", 1)[0]
    if hdr[257:262] == b"ustar" and hdr[262] in (0, 32):
        prefix = hdr[345:500].split(b"\0", 1)[0]
        if prefix and name:
            return prefix + b"/" + name, True
        return (prefix or name), True
    return name, False


def _split_ustar(path: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) fields for ``path``, or None when it fits no ustar header."""
    if len(path) <= 100:
        return b"", path
    cut = -1
    for i, c in enumerate(path):
        if c == 0x2F and i <= 155:
            cut = i
    if cut < 0 or len(path) - cut - 1 > 100:
        return None
    return path[:cut], path[cut + 1 :]


def _key(path: bytes) -> bytes:
    """The patcher's key: up to the first dot after the last slash (empty: no key)."""
    slash = path.rfind(b"/")
    dot = path.find(b".", slash + 1 if slash > 0 else 1)
    return path[:dot] if dot > 0 else b""


def _pax_names_path(data: bytes) -> bool:
    i = 0
    while i < len(data):
        sp = data.find(b" ", i)
        if sp < 0 or not data[i:sp].isdigit():
            return False
        end = i + int(data[i:sp])
        record = data[sp + 1 : end - 1]
        if end > len(data) or data[end - 1 : end] != b"\n":
            return False
        if record.split(b"=", 1)[0] in _PAX_PATH_KEYS:
            return True
        i = end
    return False


def _scan(path: str, name: str) -> _Shard:
    shard = _Shard(name)
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        if total == 0:
            raise TruncatedTarError("empty file: no tar header", path=path, offset=0)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            pos = 0
            while True:
                if pos + _BLOCK > total:
                    raise TruncatedTarError("the shard ends inside a header (no end-of-archive blocks)", path=path, offset=pos)
                hdr = data[pos : pos + _BLOCK]
                if not hdr.strip(b"\0"):
                    break
                size = _size(hdr[124:136])
                kind = hdr[156:157]
                padded = (size + _BLOCK - 1) // _BLOCK * _BLOCK
                if kind in (b"L", b"K"):
                    shard.problems.append(f"{path}, offset {pos}: GNU long-name header (Energon's in-place rename refuses it)")
                elif kind in (b"x", b"g"):
                    if pos + _BLOCK + padded > total:
                        raise TruncatedTarError("the shard ends inside a PAX header", path=path, offset=pos)
                    if _pax_names_path(data[pos + _BLOCK : pos + _BLOCK + size]):
                        shard.problems.append(f"{path}, offset {pos}: PAX header sets the member's path (cannot rename in place)")
                else:
                    full, ustar = _full_path(hdr)
                    shard.headers.append((pos, full, ustar))
                    key = _key(full)
                    if key and (not shard.keys or shard.keys[-1] != key):
                        shard.keys.append(key)
                    new = shard.prefix + full
                    if (_split_ustar(new) is None) if ustar else len(new) > 100:
                        shard.problems.append(
                            f"{path}, offset {pos}: {new.decode(errors='replace')!r} does not fit a tar header"
                        )
                pos += _BLOCK + padded
    if len(set(shard.keys)) != len(shard.keys):
        seen: set[bytes] = set()
        again = next(k for k in shard.keys if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        shard.problems.append(
            f"{path}: key {again.decode(errors='replace')!r} occurs twice inside the shard (renaming by shard cannot fix it)"
        )
    return shard


def _local_root(storage: Storage) -> str:
    root = storage.local_path("")
    if root is None:
        raise ConfigError("--fix-duplicates rewrites shards: it works on local datasets only", path=storage.url())
    return root


def _scans(root: str, shards: Sequence[str], progress: Callable[[Iterator[str], int], Iterator[str]] | None) -> list[_Shard]:
    names: Iterator[str] = iter(shards)
    if progress is not None:
        names = progress(names, len(shards))
    return [_scan(os.path.join(root, n), n) for n in names]


def _plan(scans: list[_Shard]) -> DuplicateFix:
    where: dict[bytes, list[str]] = {}
    for s in scans:
        for key in set(s.keys):
            where.setdefault(key, []).append(s.name)
    duplicates = {k.decode(errors="replace"): sorted(v) for k, v in where.items() if len(v) > 1}
    done = [s.name for s in scans if s.done]
    todo = [s for s in scans if not s.done]
    needed = bool(duplicates) or bool(done and todo)  # a dataset left half renamed is finished
    problems = [p for s in todo for p in s.problems] if needed else []
    shards = [s.name for s in todo] if needed else []
    examples = {
        s.name: (s.headers[0][1].decode(errors="replace"), (s.prefix + s.headers[0][1]).decode(errors="replace"))
        for s in todo
        if needed and s.headers
    }
    return DuplicateFix(dict(sorted(duplicates.items())), shards, done, examples, problems)


def plan_fix(storage: Storage, shards: Sequence[str], progress: Callable[..., Any] | None = None) -> DuplicateFix:
    """What ``--fix-duplicates`` would do to ``shards`` (a dry run: nothing is written)."""
    return _plan(_scans(_local_root(storage), shards, progress))


def fix_duplicates_dry_run(
    path: str, *, exclude: str | None = None, storage_options: dict[str, Any] | None = None
) -> DuplicateFix:
    """``prepare --fix-duplicates --dry-run``: the plan for the shards prepare would index, nothing written."""
    from .prepare import discover_shards
    from .storage import open_storage

    storage = open_storage(path, storage_options)
    return plan_fix(storage, discover_shards(storage, exclude))


def apply_fix(storage: Storage, shards: Sequence[str], progress: Callable[..., Any] | None = None) -> DuplicateFix:
    """Rename the members of ``shards`` as Energon's ``--fix-duplicates`` does, when a key repeats
    across shards; each shard through a temporary copy renamed into place. Raises ``TarFormatError``
    when renaming is impossible (nothing changed then)."""
    root = _local_root(storage)
    scans = _scans(root, shards, progress)
    fix = _plan(scans)
    if fix.problems:
        raise TarFormatError(
            f"duplicate keys cannot be fixed by renaming ({len(fix.problems)} problems); first: {fix.problems[0]}",
            path=storage.url(),
        )
    for s in scans:
        if s.name in fix.shards:
            _rewrite(os.path.join(root, s.name), s)
    fix.applied = fix.needed
    return fix


def _patched(hdr: bytes, new: bytes, ustar: bool) -> bytes:
    out = bytearray(hdr)
    if ustar:
        fields = _split_ustar(new)
        assert fields is not None  # checked by the scan
        prefix, name = fields
        out[345:500] = prefix.ljust(155, b"\0")
    else:
        name = new
    out[0:100] = name.ljust(100, b"\0")
    out[148:156] = b" " * 8
    out[148:156] = b"%06o\0 " % sum(out)
    return bytes(out)


def _rewrite(path: str, shard: _Shard) -> None:
    folder, base = os.path.split(path)
    for stale in os.listdir(folder):  # copies left by a run that was killed
        if stale.startswith(f".{base}{_TMP_MARK}") and stale.endswith(".tmp"):
            os.unlink(os.path.join(folder, stale))
    tmp = os.path.join(folder, f".{base}{_TMP_MARK}{uuid.uuid4().hex[:12]}.tmp")
    try:
        shutil.copyfile(path, tmp)
        shutil.copymode(path, tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            for offset, full, ustar in shard.headers:
                hdr = os.pread(fd, _BLOCK, offset)
                os.pwrite(fd, _patched(hdr, shard.prefix + full, ustar), offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)

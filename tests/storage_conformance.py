"""One conformance suite for every ``Storage`` backend (local disk, S3 through fsspec, ...).

A backend's test file subclasses ``StorageTests`` and supplies one fixture, ``make_storage``:
``make_storage(files: dict[str, bytes]) -> Storage``, a storage rooted at a fresh, empty place
holding exactly ``files``, written by the backend's own means (not through the storage under
test). Everything a backend must do the same way is asserted here, once.
"""

from __future__ import annotations

import errno
import os
import pickle
import tempfile
import time
from collections.abc import Callable

import pytest

from shardstore.errors import ShardstoreError, StorageError
from shardstore.storage import ByteRange, Storage

MakeStorage = Callable[[dict[str, bytes]], Storage]

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset recognisable
FILES = {
    "a.tar": DATA,
    "b.tar": DATA[::-1],
    "empty.bin": b"",
    "nested/deep/c.tar": b"c" * 1000,
    "nested/d.tar.idx": b"d" * 16,
    "nested/notes.txt": b"hello",
    ".nv-meta/.info.json": b"{}",
    "nested/.nv-meta/index.sqlite": b"x",
}


def _is_not_found(e: BaseException) -> bool:
    return isinstance(e, StorageError) and e.errno == errno.ENOENT


class StorageTests:
    """Subclass and provide the ``make_storage`` fixture."""

    @pytest.fixture
    def storage(self, make_storage: MakeStorage) -> Storage:
        return make_storage(FILES)

    # ----- stat / exists --------------------------------------------------------------------------
    def test_stat_size_and_version(self, storage: Storage) -> None:
        st = storage.stat("a.tar")
        assert st.size == len(DATA)
        assert st.mtime is not None or st.etag is not None, "a version (mtime or ETag) is needed for stale checks"
        assert storage.stat("empty.bin").size == 0
        assert storage.size("nested/deep/c.tar") == 1000

    def test_stat_missing_names_the_file(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.stat("missing.tar")
        assert _is_not_found(info.value)
        assert "missing.tar" in str(info.value)

    def test_stat_of_a_folder_is_not_found(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.stat("nested")
        assert _is_not_found(info.value)

    def test_stat_changes_when_content_changes(self, storage: Storage) -> None:
        before = storage.stat("a.tar")
        time.sleep(0.05)  # coarse file timestamps
        storage.write_atomic("a.tar", DATA[::-1])  # same size, other bytes
        after = storage.stat("a.tar")
        assert after.size == before.size
        assert after != before

    def test_exists(self, storage: Storage) -> None:
        assert storage.exists("a.tar")
        assert storage.exists("nested/deep/c.tar")
        assert storage.exists("empty.bin")
        assert not storage.exists("missing.tar")
        assert not storage.exists("nested")  # a folder (prefix) is not a file
        assert not storage.exists("nested/deep")

    # ----- read_range ----------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "offset,size",
        [(0, 1), (0, len(DATA)), (len(DATA) - 1, 1), (100, 1000), (511, 513), (0, 0), (5000, 0), (len(DATA), 0)],
    )
    def test_read_range(self, storage: Storage, offset: int, size: int) -> None:
        assert storage.read_range("a.tar", ByteRange(offset, size)) == DATA[offset : offset + size]

    def test_read_range_nested(self, storage: Storage) -> None:
        assert storage.read_range("nested/deep/c.tar", ByteRange(990, 10)) == b"c" * 10

    @pytest.mark.parametrize("offset,size", [(len(DATA) - 5, 10), (len(DATA), 1), (len(DATA) + 100, 10)])
    def test_read_past_end_raises_naming_file_and_offset(self, storage: Storage, offset: int, size: int) -> None:
        with pytest.raises(StorageError) as info:
            storage.read_range("a.tar", ByteRange(offset, size))
        assert info.value.offset == offset
        assert "a.tar" in str(info.value) and str(offset) in str(info.value)

    def test_read_range_missing_file(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.read_range("missing.tar", ByteRange(0, 10))
        assert _is_not_found(info.value)
        assert "missing.tar" in str(info.value)

    def test_read_whole_small_files(self, storage: Storage) -> None:
        assert storage.read("nested/notes.txt") == b"hello"
        assert storage.read("empty.bin") == b""

    def test_negative_range_is_refused(self) -> None:
        with pytest.raises(ValueError):
            ByteRange(-1, 10)
        with pytest.raises(ValueError):
            ByteRange(0, -1)

    # ----- read_ranges ---------------------------------------------------------------------------
    def test_read_ranges_keeps_the_order_asked(self, storage: Storage) -> None:
        reqs = [
            ("a.tar", ByteRange(9000, 100)),
            ("b.tar", ByteRange(0, 10)),
            ("a.tar", ByteRange(0, 10)),
            ("a.tar", ByteRange(5, 10)),  # overlaps the previous one
            ("a.tar", ByteRange(0, 10)),  # a duplicate
            ("a.tar", ByteRange(3000, 0)),  # zero-length
            ("nested/deep/c.tar", ByteRange(0, 1000)),
            ("a.tar", ByteRange(len(DATA) - 1, 1)),
        ]
        src = {"a.tar": DATA, "b.tar": DATA[::-1], "nested/deep/c.tar": b"c" * 1000}
        got = storage.read_ranges(reqs)
        assert got == [src[p][r.offset : r.end] for p, r in reqs]

    def test_read_ranges_many_files_and_ranges(self, make_storage: MakeStorage) -> None:
        files = {f"shard-{i:03d}.tar": os.urandom(3000 + i) for i in range(24)}
        storage = make_storage(files)
        reqs = [(name, ByteRange((7 * i * j) % 2000, 1 + (i + j) % 700)) for i, name in enumerate(files) for j in range(6)]
        reqs.reverse()
        assert storage.read_ranges(reqs) == [files[p][r.offset : r.end] for p, r in reqs]

    def test_read_ranges_empty(self, storage: Storage) -> None:
        assert storage.read_ranges([]) == []

    def test_read_ranges_past_end_raises(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.read_ranges([("a.tar", ByteRange(0, 10)), ("b.tar", ByteRange(len(DATA) - 2, 10))])
        assert "b.tar" in str(info.value)

    def test_read_ranges_missing_file_raises(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.read_ranges([("a.tar", ByteRange(0, 10)), ("gone.tar", ByteRange(0, 10))])
        assert _is_not_found(info.value) and "gone.tar" in str(info.value)

    # ----- list ------------------------------------------------------------------------------------
    def test_list_everything_but_nv_meta(self, storage: Storage) -> None:
        names = storage.list()
        assert names == sorted(names)
        assert set(names) == {n for n in FILES if ".nv-meta" not in n}

    def test_list_suffix_filter(self, storage: Storage) -> None:
        assert storage.list((".tar",)) == ["a.tar", "b.tar", "nested/deep/c.tar"]
        assert storage.list((".tar", ".txt")) == ["a.tar", "b.tar", "nested/deep/c.tar", "nested/notes.txt"]
        assert storage.list((".idx",)) == ["nested/d.tar.idx"]
        assert storage.list((".nothing",)) == []

    def test_list_empty_root(self, make_storage: MakeStorage) -> None:
        assert make_storage({}).list() == []

    # ----- open ------------------------------------------------------------------------------------
    def test_open_reads_and_seeks(self, storage: Storage) -> None:
        with storage.open("a.tar") as f:
            assert f.read(10) == DATA[:10]
            f.seek(5000)
            assert f.read(100) == DATA[5000:5100]
            f.seek(0)
            assert f.read() == DATA

    def test_open_missing(self, storage: Storage) -> None:
        with pytest.raises(StorageError) as info:
            storage.open("missing.tar")
        assert _is_not_found(info.value)

    # ----- writing ---------------------------------------------------------------------------------
    def test_write_atomic_creates_and_replaces(self, storage: Storage) -> None:
        storage.write_atomic("new/dir/x.tar.idx", b"first")
        assert storage.exists("new/dir/x.tar.idx")
        assert storage.read("new/dir/x.tar.idx") == b"first"
        storage.write_atomic("new/dir/x.tar.idx", b"second, longer")
        assert storage.read("new/dir/x.tar.idx") == b"second, longer"
        assert storage.read_range("new/dir/x.tar.idx", ByteRange(0, 6)) == b"second"
        assert storage.list((".idx",)) == ["nested/d.tar.idx", "new/dir/x.tar.idx"]  # no temp files left

    def test_write_atomic_after_reading_serves_new_bytes(self, storage: Storage) -> None:
        assert storage.read_range("b.tar", ByteRange(0, 4)) == DATA[::-1][:4]
        storage.write_atomic("b.tar", b"fresh content")
        assert storage.read_range("b.tar", ByteRange(0, 5)) == b"fresh"
        assert storage.size("b.tar") == 13

    def test_write_into_nv_meta(self, storage: Storage) -> None:
        storage.write_atomic(".nv-meta/split.yaml", b"split_parts: {}\n")
        assert storage.read(".nv-meta/split.yaml") == b"split_parts: {}\n"
        assert ".nv-meta/split.yaml" not in storage.list()

    def test_put_file(self, storage: Storage) -> None:
        fd, local = tempfile.mkstemp(prefix="conformance-")
        with os.fdopen(fd, "wb") as f:
            f.write(b"uploaded" * 1000)
        storage.put_file(local, ".nv-meta/index.sqlite")
        assert storage.read(".nv-meta/index.sqlite") == b"uploaded" * 1000
        assert not os.path.exists(local), "put_file consumes the local file"

    def test_remove(self, storage: Storage) -> None:
        storage.remove("nested/notes.txt")
        assert not storage.exists("nested/notes.txt")
        assert "nested/notes.txt" not in storage.list()
        storage.remove("nested/notes.txt")  # already gone: no error
        storage.remove("never-there.bin")
        with pytest.raises(StorageError):
            storage.read_range("nested/notes.txt", ByteRange(0, 1))

    # ----- misc --------------------------------------------------------------------------------------
    def test_url_names_the_file(self, storage: Storage) -> None:
        assert storage.url("nested/deep/c.tar").endswith("/nested/deep/c.tar")
        assert storage.url("nested/deep/c.tar").startswith(storage.url().rstrip("/"))

    def test_pickles_for_worker_processes(self, storage: Storage) -> None:
        storage.read_range("a.tar", ByteRange(0, 1))  # open descriptors / clients first
        copy = pickle.loads(pickle.dumps(storage))
        assert copy.root == storage.root
        assert copy.read_range("a.tar", ByteRange(100, 50)) == DATA[100:150]

    def test_errors_are_shardstore_errors(self, storage: Storage) -> None:
        with pytest.raises(ShardstoreError):
            storage.read_range("missing.tar", ByteRange(0, 1))
        with pytest.raises(OSError):  # StorageError is an OSError too
            storage.read_range("missing.tar", ByteRange(0, 1))


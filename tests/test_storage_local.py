"""``LocalStorage`` against the shared storage conformance suite, plus what only local disk has."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_conformance import MakeStorage, StorageTests

from shardstore.errors import StorageError
from shardstore.storage import ByteRange, LocalStorage, merge_ranges, open_storage


@pytest.fixture
def make_storage(tmp_path: Path) -> MakeStorage:
    counter = iter(range(1_000_000))

    def make(files: dict[str, bytes]) -> LocalStorage:
        root = tmp_path / f"root{next(counter)}"
        root.mkdir()
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        return LocalStorage(str(root))

    return make


class TestLocalStorage(StorageTests):
    def test_local_path(self, storage: LocalStorage) -> None:
        assert storage.local_path("a.tar") == os.path.join(storage.root, "a.tar")

    def test_file_url_and_relative_root(self, storage: LocalStorage, monkeypatch: pytest.MonkeyPatch) -> None:
        assert open_storage("file://" + storage.root).root == storage.root
        monkeypatch.chdir(os.path.dirname(storage.root))
        assert open_storage(os.path.basename(storage.root)).root == storage.root

    def test_reading_a_folder_is_a_storage_error(self, storage: LocalStorage) -> None:
        with pytest.raises(StorageError) as info:
            storage.read_range("nested", ByteRange(0, 1))
        assert "nested" in str(info.value)

    def test_put_file_across_filesystems(self, storage: LocalStorage, tmp_path: Path) -> None:
        # /dev/shm is another filesystem than the test folder on most machines: a rename fails there.
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(storage.root).st_dev:
            pytest.skip("no second filesystem to move from")
        src = "/dev/shm/shardstore-put-test"
        Path(src).write_bytes(b"from another filesystem")
        storage.put_file(src, "moved.bin")
        assert storage.read("moved.bin") == b"from another filesystem"
        assert not os.path.exists(src)
        assert not [n for n in os.listdir(storage.root) if ".tmp-" in n]

    def test_descriptors_reopen_after_fork(self, storage: LocalStorage) -> None:
        storage.read_range("a.tar", ByteRange(0, 1))
        pid = os.fork()
        if pid == 0:  # child: must not reuse (or close) the parent's cached descriptors
            ok = storage.read_range("a.tar", ByteRange(0, 2)) == b"\x00\x01"
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert storage.read_range("a.tar", ByteRange(1, 1)) == b"\x01"


def test_merge_ranges_groups_neighbours() -> None:
    rs = [ByteRange(1000, 10), ByteRange(0, 100), ByteRange(150, 10), ByteRange(5000, 1), ByteRange(90, 20)]
    merged = merge_ranges(rs, gap=64)
    assert merged == [(ByteRange(0, 160), [1, 4, 2]), (ByteRange(1000, 10), [0]), (ByteRange(5000, 1), [3])]
    assert merge_ranges(rs, gap=0) == [
        (ByteRange(0, 110), [1, 4]),
        (ByteRange(150, 10), [2]),
        (ByteRange(1000, 10), [0]),
        (ByteRange(5000, 1), [3]),
    ]
    assert merge_ranges([]) == []
    # a range inside another does not shrink the cover
    assert merge_ranges([ByteRange(0, 100), ByteRange(10, 5)], gap=0) == [(ByteRange(0, 100), [0, 1])]

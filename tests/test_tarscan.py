"""The header walker: formats, offsets, member kinds, and typed errors naming file and offset."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
from tar_headers import set_header_field

from shardstore.errors import TarFormatError, TruncatedTarError
from shardstore.storage import LocalStorage
from shardstore.tarscan import DIRECTORY, OTHER, REGULAR, TarMember, iter_members, scan_storage

MTIME = 1_700_000_000


def make_tar(members: list[tuple[str, bytes | None]], fmt: int = tarfile.USTAR_FORMAT, **kw: object) -> bytes:
    """Members are (name, data) for files, (name/, None) for directories, (name -> target, None) for symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, **kw) as tar:  # type: ignore[call-overload]
        for name, data in members:
            if " -> " in name:
                name, target = name.split(" -> ")
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, target
            elif data is None:
                info = tarfile.TarInfo(name)
                info.type = tarfile.DIRTYPE
            else:
                info = tarfile.TarInfo(name)
                info.size = len(data)
            info.mtime = MTIME
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def scan(data: bytes, path: str = "shard.tar") -> list[TarMember]:
    return list(iter_members(lambda o, n: data[o : o + n], len(data), path))


def reference(data: bytes) -> list[tuple[str, int, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, m.offset, m.offset_data, m.size) for m in tar if m.isreg()]


def regular(members: list[TarMember]) -> list[tuple[str, int, int, int]]:
    return [(m.name, m.header_offset, m.data_offset, m.size) for m in members if m.kind == REGULAR]


# --------------------------------------------------------------------------------------------------
# Formats and offsets


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_offsets_match_tarfile(fmt: int) -> None:
    data = make_tar([("a.txt", b"x" * 10), ("b/c.jpg", b""), ("d.bin", b"y" * 512), ("e.bin", b"z" * 513)], fmt)
    members = scan(data)
    assert regular(members) == reference(data)
    assert [m.size for m in members] == [10, 0, 512, 513]
    assert members[1].data_offset == members[1].header_offset + 512


def test_ustar_prefix_long_name() -> None:
    name = "/".join(["dir"] * 30) + "/file.txt"  # 129 chars: the ustar prefix field holds the folders
    data = make_tar([(name, b"abc")], tarfile.USTAR_FORMAT)
    assert data[345:350] == b"dir/d"
    (m,) = scan(data)
    assert m.name == name and m.header_offset == 0 and m.data_offset == 512


def test_gnu_long_name_and_long_link() -> None:
    long_name = "n" * 150 + ".txt"
    data = make_tar([(long_name, b"hello"), ("s.lnk -> " + "t" * 200, None), ("after.txt", b"1")], tarfile.GNU_FORMAT)
    members = scan(data)
    assert regular(members) == reference(data)
    assert members[0].name == long_name
    assert members[0].header_offset == 0  # the 'L' header, not the member's own header
    assert members[0].data_offset == 512 * 3  # L header + its one data block + the member header
    assert members[1].kind == OTHER and members[1].name == "s.lnk"
    assert members[2].header_offset == members[1].end  # the 'K' header counted as the symlink's


def test_pax_long_and_non_ascii_names() -> None:
    names = ["ünï/ключ.txt", "日本/" + "語" * 50 + ".jpg", "plain.txt"]
    data = make_tar([(n, n.encode()) for n in names], tarfile.PAX_FORMAT)
    members = scan(data)
    assert [m.name for m in members] == names
    assert regular(members) == reference(data)
    assert members[0].header_offset == 0 and members[0].data_offset == 1536  # x header + data + header
    assert members[2].data_offset == members[2].header_offset + 512  # ASCII: no extension header


def test_pax_global_header_is_not_part_of_the_first_member() -> None:
    data = make_tar([("a.txt", b"1"), ("b.txt", b"2")], tarfile.PAX_FORMAT, pax_headers={"comment": "hi"})
    assert data[156:157] == b"g"
    members = scan(data)
    assert regular(members) == reference(data)
    assert members[0].header_offset == 1024  # after the global header and its data block


def test_pax_path_overrides_header_name_and_size_field() -> None:
    info = tarfile.TarInfo("ignored.txt")
    info.size = 4
    info.pax_headers = {"path": "real/name.txt", "size": "4"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b"data"))
    (m,) = scan(buf.getvalue())
    assert (m.name, m.size) == ("real/name.txt", 4)
    assert regular([m]) == reference(buf.getvalue())


def test_pax_path_with_trailing_slash_on_a_file() -> None:
    info = tarfile.TarInfo("ß/")
    info.pax_headers = {"path": "ß/"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    assert [m.name for m in scan(buf.getvalue())] == ["ß"] == [r[0] for r in reference(buf.getvalue())]


def test_member_kinds() -> None:
    data = make_tar([("d", None), ("d/f.txt", b"1"), ("l.txt -> d/f.txt", None), ("d//", None)])
    members = scan(data)
    assert [(m.name, m.kind) for m in members] == [
        ("d", DIRECTORY),
        ("d/f.txt", REGULAR),
        ("l.txt", OTHER),
        ("d", DIRECTORY),
    ]
    assert all(m.size == 0 for m in members if m.kind != REGULAR)


def test_v7_directory_is_a_directory() -> None:
    data = make_tar([("olddir/", b"")])
    data = set_header_field(data, 0, 156, b"\0")  # AREGTYPE with a trailing slash: a V7 directory
    (m,) = scan(data)
    assert (m.name, m.kind) == ("olddir", DIRECTORY)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getmembers()[0].isdir()


def test_contiguous_file_is_regular() -> None:
    data = set_header_field(make_tar([("c.bin", b"abc")]), 0, 156, b"7")
    (m,) = scan(data)
    assert m.kind == REGULAR and m.size == 3


def test_base256_size_field() -> None:
    data = make_tar([("big.bin", b"q" * 1000), ("next.txt", b"n")])
    data = set_header_field(data, 0, 124, b"\x80" + (1000).to_bytes(11, "big"))
    assert regular(scan(data)) == reference(data)


def test_end_and_data_range() -> None:
    data = make_tar([("a.txt", b"x" * 700), ("b.txt", b"y")])
    a, b = scan(data)
    assert a.end == b.header_offset == 512 + 1024
    assert a.data_range.offset == 512 and a.data_range.size == 700 and a.data_range.end == 1212


def test_archive_without_end_marker_and_with_trailing_bytes() -> None:
    data = make_tar([("a.txt", b"x")])
    bare = data[: scan(data)[0].end]  # no zero blocks at all
    assert regular(scan(bare)) == regular(scan(data))
    assert regular(scan(data + b"garbage after the end marker")) == regular(scan(data))


# --------------------------------------------------------------------------------------------------
# Errors: typed, one line, naming the file and the offset


def _raises(data: bytes, cls: type[Exception], offset: int | None, words: str) -> TarFormatError:
    with pytest.raises(cls) as info:
        scan(data, "/data/shard-7.tar")
    err = info.value
    assert isinstance(err, TarFormatError)
    assert err.path == "/data/shard-7.tar" and "/data/shard-7.tar" in str(err)
    if offset is not None:
        assert err.offset == offset and f"offset {offset}" in str(err)
    assert words in str(err)
    assert "\n" not in str(err)
    return err


def test_empty_file() -> None:
    _raises(b"", TarFormatError, 0, "empty")


def test_not_a_tar() -> None:
    _raises(b"this is a text file, not a tar" * 40, TarFormatError, 0, "not a tar")


def test_gzip_is_named() -> None:
    _raises(gzip.compress(make_tar([("a.txt", b"1")])), TarFormatError, 0, "gzip")


def test_corrupt_checksum_mid_file() -> None:
    data = bytearray(make_tar([("a.txt", b"1"), ("b.txt", b"2"), ("c.txt", b"3")]))
    second = scan(bytes(data))[1].header_offset
    data[second + 10] ^= 0xFF
    err = _raises(bytes(data), TarFormatError, second, "checksum")
    assert not isinstance(err, TruncatedTarError)


def test_truncated_inside_data() -> None:
    data = make_tar([("a.txt", b"1"), ("b.bin", b"x" * 5000)])
    b = scan(data)[1]
    _raises(data[: b.data_offset + 100], TruncatedTarError, b.header_offset, "past the end")


def test_truncated_inside_header() -> None:
    data = make_tar([("a.txt", b"1"), ("b.txt", b"2")])
    b = scan(data)[1]
    _raises(data[: b.header_offset + 100], TruncatedTarError, b.header_offset, "inside a tar header")


def test_truncated_after_extension_header() -> None:
    data = make_tar([("ü.txt", b"1")], tarfile.PAX_FORMAT)
    _raises(data[:1024], TruncatedTarError, 1024, "extension header")
    _raises(data[:700], TruncatedTarError, 0, "extension header")


def test_extension_header_then_end_of_archive() -> None:
    data = make_tar([("ü.txt", b"1")], tarfile.PAX_FORMAT)
    broken = data[:1024] + bytes(2048)
    _raises(broken, TarFormatError, 1024, "end of the archive")


def test_invalid_size_field() -> None:
    data = set_header_field(make_tar([("a.txt", b"1")]), 0, 124, b"12x4567\0")
    _raises(data, TarFormatError, 0, "size")


def test_malformed_pax_record() -> None:
    data = make_tar([("ü.txt", b"1")], tarfile.PAX_FORMAT)
    size = int(data[124:135], 8)
    bad = data[:512] + b"garbage" + data[512 + 7 :]
    assert len(bad) == len(data) and size > 7
    _raises(bad, TarFormatError, 0, "PAX record")


def test_negative_pax_size() -> None:
    info = tarfile.TarInfo("x.txt")
    info.size = 3
    info.pax_headers = {"size": "-5"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b"abc"))
    _raises(buf.getvalue(), TarFormatError, 0, "negative")


def test_absurd_pax_record_length() -> None:
    info = tarfile.TarInfo("x.txt")
    info.pax_headers = {"comment": "c"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(b""))
    payload = b"9" * 5000 + b" comment=c\n"
    hdr = set_header_field(buf.getvalue()[:512], 0, 124, b"%011o\0" % len(payload))
    pad = (-len(payload)) % 512
    data = hdr + payload + bytes(pad) + buf.getvalue()[1024:]
    _raises(data, TarFormatError, 0, "PAX record length")


def test_sparse_is_refused() -> None:
    data = set_header_field(make_tar([("s.bin", b"1")]), 0, 156, b"S")
    _raises(data, TarFormatError, 0, "sparse")


def test_errors_pickle_between_processes() -> None:
    import pickle

    data = make_tar([("a.txt", b"1")])
    try:
        scan(data[:600], "x.tar")
    except TruncatedTarError as e:
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is TruncatedTarError and str(back) == str(e) and back.offset == e.offset
    else:
        raise AssertionError("no error")


# --------------------------------------------------------------------------------------------------
# Storage entry point


class _NoLocalPath(LocalStorage):
    """A local folder seen as remote storage: the walker must go through block reads."""

    def local_path(self, path: str) -> str | None:
        return None


def test_scan_storage_local_and_block_reads(tmp_path: Path) -> None:
    data = make_tar([(f"k{i:03d}.txt", bytes(i)) for i in range(200)], tarfile.GNU_FORMAT)
    (tmp_path / "s.tar").write_bytes(data)
    want = scan(data)
    assert list(scan_storage(LocalStorage(str(tmp_path)), "s.tar")) == want
    assert list(scan_storage(_NoLocalPath(str(tmp_path)), "s.tar", block_size=4096)) == want


def test_scan_storage_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "empty.tar").write_bytes(b"")
    with pytest.raises(TarFormatError, match="empty.tar"):
        list(scan_storage(LocalStorage(str(tmp_path)), "empty.tar"))
    with pytest.raises(TarFormatError, match="missing.tar"):
        list(scan_storage(LocalStorage(str(tmp_path)), "missing.tar"))
    (tmp_path / "cut.tar").write_bytes(make_tar([("a.bin", b"x" * 3000)])[:1500])
    with pytest.raises(TruncatedTarError, match="cut.tar"):
        list(scan_storage(_NoLocalPath(str(tmp_path)), "cut.tar"))


def test_signed_checksum_is_accepted_as_tarfile_does() -> None:
    """Old tar writers summed header bytes as signed chars; tarfile accepts either sum, and so must we."""
    import io
    import struct
    import tarfile

    from shardstore.tarscan import iter_members

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo("caf\xe9.txt")  # a byte >= 0x80 in the name makes the two sums differ
        info.size = 3
        t.addfile(info, io.BytesIO(b"abc"))
    data = bytearray(buf.getvalue())
    signed = 256 + sum(struct.unpack_from("148b8x356b", bytes(data[:512])))
    data[148:156] = b"%06o\0 " % signed
    expected = [(m.name, m.offset_data, m.size) for m in tarfile.open(fileobj=io.BytesIO(bytes(data)))]
    got = [(m.name, m.data_offset, m.size) for m in iter_members(lambda o, n: bytes(data[o : o + n]), len(data), "x.tar")]
    assert got == expected == [("caf\xe9.txt", 512, 3)]

"""Member names -> (key, part) with Energon's rules, and grouping members into samples."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstore.keys import SamplePart, group_samples, member_name, split_name
from shardstore.tarscan import DIRECTORY, OTHER, REGULAR, TarMember

# The rules of DESIGN.md section 4, written out independently of shardstore.keys.
_REF_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_REF_SKIP = re.compile(r"__[^/]*__($|/)")


def reference(name: str) -> tuple[str, str] | None:
    if _REF_SKIP.match(name):
        return None
    m = _REF_NAME.match(name)
    return (m.group(1), m.group(2)) if m else None


@pytest.mark.parametrize(
    "name, want",
    [
        ("0001.jpg", ("0001", "jpg")),
        ("0001.seg.png", ("0001", "seg.png")),
        ("imgs/0001.jpg", ("imgs/0001", "jpg")),
        ("a.b/c.d.e", ("a.b/c", "d.e")),  # dots in folders belong to the key
        ("a/b/c/d.", ("a/b/c/d", "")),  # an empty part is still a part
        ("__key__.txt", ("__key__", "txt")),  # a dunder basename with an extension is a real key
        ("x/__meta__/y.txt", ("x/__meta__/y", "txt")),  # dunder only skipped at the start
        ("__meta__", None),
        ("__meta__/info.json", None),
        ("____/x.json", None),
        ("README", None),  # no dot
        ("dir.x/noext", None),  # the dot is in the folder only
        (".hidden.txt", None),  # basename starts with a dot: empty key
        ("a/.b.txt", ("a/", "b.txt")),  # the regex lets the key end in its slash here
        ("a.b/", None),
        ("", None),
        ("ünï/ключ.txt", ("ünï/ключ", "txt")),
        ("line\nbreak.txt", ("line\nbreak", "txt")),
    ],
)
def test_split_name_cases(name: str, want: tuple[str, str] | None) -> None:
    assert split_name(name) == want == reference(name)


_alphabet = st.sampled_from(list("ab._/_") + ["__", "ü", "\n", "x"])


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(st.lists(_alphabet, max_size=14).map("".join))
def test_split_name_is_energons_rule(name: str) -> None:
    assert split_name(name) == reference(name)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.text(min_size=1), st.text())
def test_member_name_inverts_split_name(key: str, part: str) -> None:
    got = split_name(member_name(key, part))
    if got is not None:
        assert member_name(*got) == member_name(key, part)
    if "." not in key and "/" not in part and key and not key.endswith("/") and reference(member_name(key, part)):
        assert got == (key, part)


# --------------------------------------------------------------------------------------------------
# Grouping


def members(*specs: tuple[str, str, int]) -> list[TarMember]:
    """(name, kind, size) laid out one after the other as a plain ustar writer would."""
    out, pos = [], 0
    for name, kind, size in specs:
        m = TarMember(name, kind, pos, pos + 512, size)
        out.append(m)
        pos = m.end
    return out


def test_consecutive_members_with_a_key_form_a_sample() -> None:
    ms = members(("a.jpg", REGULAR, 10), ("a.txt", REGULAR, 0), ("b.jpg", REGULAR, 600), ("b.txt", REGULAR, 1))
    recs = list(group_samples(ms))
    assert [(r.key, r.index) for r in recs] == [("a", 0), ("b", 1)]
    a, b = recs
    assert a.parts == (SamplePart("jpg", 512, 10), SamplePart("txt", 1536, 0))
    assert (a.offset, a.size) == (0, ms[2].header_offset)
    assert (b.offset, b.size) == (ms[2].header_offset, ms[3].end - ms[2].header_offset)


def test_skipped_members_neither_break_a_run_nor_start_one() -> None:
    ms = members(
        ("__meta__/x.json", REGULAR, 5),  # skipped before the first sample: outside every range
        ("a.jpg", REGULAR, 1),
        ("README", REGULAR, 3),  # no dot: skipped, the run of "a" goes on
        ("dir", DIRECTORY, 0),
        ("a.lnk", OTHER, 0),  # symlink with a matching name: not a part
        ("a.txt", REGULAR, 2),
        ("trailing", REGULAR, 700),  # after the last sample: inside its range
    )
    (rec,) = group_samples(ms)
    assert rec.key == "a"
    assert [p.name for p in rec.parts] == ["jpg", "txt"]
    assert rec.offset == ms[1].header_offset
    assert rec.offset + rec.size == ms[-1].end


def test_repeated_key_after_another_is_a_new_sample() -> None:
    """Grouping keeps both; the index writer then reports the duplicate key."""
    ms = members(("a.jpg", REGULAR, 1), ("b.jpg", REGULAR, 1), ("a.txt", REGULAR, 1))
    assert [r.key for r in group_samples(ms)] == ["a", "b", "a"]


def test_same_key_in_different_folders_are_different_samples() -> None:
    ms = members(("x/1.jpg", REGULAR, 1), ("y/1.jpg", REGULAR, 1))
    assert [r.key for r in group_samples(ms)] == ["x/1", "y/1"]


def test_no_sample() -> None:
    assert list(group_samples([])) == []
    assert list(group_samples(members(("README", REGULAR, 1), ("d", DIRECTORY, 0)))) == []


def test_ranges_tile_the_shard() -> None:
    specs = [(f"k{i // 3}.p{i % 3}", REGULAR, i * 37) for i in range(30)]
    ms = members(*specs)
    recs = list(group_samples(ms))
    assert len(recs) == 10
    for prev, nxt in zip(recs, recs[1:], strict=False):
        assert prev.offset + prev.size == nxt.offset
    assert recs[-1].offset + recs[-1].size == ms[-1].end

"""Where episodes/mp4.py may cut a video without re-encoding, on small made-up groups of pictures: the
functions behind LeRobot exports (``whole_gop_runs``) and ``check lerobot --deep``'s tolerance of the
padding such a cut leaves (``gop_padding``), each case worked out from the pictures' dependencies."""

from __future__ import annotations

import numpy as np

from shardstore.episodes.mp4 import Clip, Placed, VideoInfo, cut_ends, gop_padding, whole_gop_runs, whole_gops

# I0 B1 B2 P3 shown in that order, decoded I0 P3 B1 B2: each frame's place in decode order
IBBP = np.array([0, 2, 3, 1])


def info(frames: int, keyframes: tuple[int, ...], leading: bool = False) -> VideoInfo:
    """A video without B-frames (a cut may end anywhere), keyframes where given."""
    return VideoInfo("h264", 8, 8, "yuv420p", 10.0, frames, keyframes, tuple(range(frames + 1)), b"", False, leading)


def clip(start: int, count: int, name: str = "a.mp4") -> Clip:
    return Clip(lambda: open(name, "rb"), name, start, count)


def test_a_cut_may_not_end_between_a_b_frame_and_its_later_reference() -> None:
    assert cut_ends(np.arange(5)).all()  # no B-frames: after any frame
    # after I0 (decoded first); not after B1 or B2 (they wait for P3); after P3
    assert cut_ends(IBBP).tolist() == [True, True, False, False, True]


def test_a_clip_remuxes_as_it_is_only_from_a_keyframe_to_a_cut_end() -> None:
    video = info(12, (0, 4, 8))
    assert whole_gops(clip(4, 4), video) and whole_gops(clip(8, 4), video)
    assert not whole_gops(clip(5, 3), video)  # starts after the keyframe it needs
    assert not whole_gops(clip(0, 6), info(12, (0, 4, 8), leading=True))  # an open GOP: only the whole file


def test_runs_join_clips_that_follow_each_other_and_widen_to_whole_gops() -> None:
    video = info(12, (0, 4, 8))
    runs, placed = whole_gop_runs([(clip(5, 2), video), (clip(7, 2), video), (clip(1, 2, "b.mp4"), video)])
    # a.mp4's frames 5..8 become one run from keyframe 4; b.mp4's 1..2 one from keyframe 0
    assert [(r.name, r.start, r.count) for r, _ in runs] == [("a.mp4", 4, 5), ("b.mp4", 0, 3)]
    assert placed == [Placed(0, 1), Placed(0, 3), Placed(1, 1)]
    # an open GOP (leading frames) is taken whole
    runs, placed = whole_gop_runs([(clip(5, 2), info(12, (0, 4, 8), leading=True))])
    assert [(r.start, r.count) for r, _ in runs] == [(0, 12)] and placed == [Placed(0, 5)]


def test_padding_is_a_gop_start_before_an_episode_or_the_references_after_one() -> None:
    keys = np.array([1, 0, 0, 0, 1, 0], bool)
    covered = np.array([0, 0, 1, 1, 1, 1], bool)  # an episode from frame 2: frames 0..1 its GOP's start
    assert gop_padding(covered, keys, np.arange(6)).tolist() == [True, True, False, False, False, False]
    # an episode of I0 B1: B1 refers to P3, so the cut runs on to frame 4 and B2, P3 are padding
    covered, keys = np.array([1, 1, 0, 0], bool), np.array([1, 0, 0, 0], bool)
    assert gop_padding(covered, keys, IBBP).tolist() == [False, False, True, True]
    assert not gop_padding(covered, keys, np.arange(4)).any()  # without B-frames nothing is needed after


def test_a_whole_gop_outside_every_episode_is_no_padding() -> None:
    keys = np.array([1, 0, 0, 0, 1, 0, 0, 0], bool)
    appended = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)  # a take appended after the last episode
    assert not gop_padding(appended, keys, np.arange(8)).any()
    keys = np.array([1, 0, 1, 0, 1, 0, 0, 0], bool)
    between = np.array([1, 1, 0, 0, 0, 0, 1, 1], bool)  # GOP 2..3 whole, then 4..5 before frame 6
    assert not gop_padding(between, keys, np.arange(8)).any()
    assert not gop_padding(np.ones(8, bool), keys, np.arange(8)).any()  # all covered: nothing to excuse

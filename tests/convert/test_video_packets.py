"""Videos read at the packet level (``episodes.packets``): exact frames, the fallback, old imports, bad indexes.

Sources are tiny LeRobot datasets written with pyarrow and PyAV (tools/make_lerobot.py: an H.264
and an AV1 camera, 32x32, a keyframe every 4 frames); frames are compared with PyAV's own decode
of the whole source file, frame by frame.
"""

from __future__ import annotations

import json
import shutil
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av")
pytest.importorskip("pyarrow")

import shardstore  # noqa: E402
from shardstore.convert.lerobot import export_lerobot, import_lerobot  # noqa: E402
from shardstore.episodes.packets import PACKETS_FILE, PacketIndex, index_packets, load_packets, save_packets  # noqa: E402
from shardstore.errors import DecodeError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from make_lerobot import frame_pixels, make_lerobot  # noqa: E402

FRONT, WRIST = "observation.images.front", "observation.images.wrist"  # h264, av1
LENGTHS = [13, 9, 11]


def pyav_frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def video_path(src: Path, ep: int, cam: str) -> Path:
    return src / f"videos/chunk-000/{cam}/episode_{ep:06d}.mp4"


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packets")
    return Path(make_lerobot(str(root / "v21"), episodes=3, frames=LENGTHS, chunks_size=10, image=False))


@pytest.fixture(scope="module")
def imported(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("packets-ds") / "ds"
    import_lerobot(str(src), str(out))
    return out


def reference(src: Path) -> dict[tuple[int, str], list[np.ndarray]]:
    return {
        (e, cam): pyav_frames(video_path(src, e, cam)) for e in range(len(LENGTHS)) for cam in (FRONT, WRIST)
    }


def test_index_of_plain_files(src: Path) -> None:
    for cam, codec in ((FRONT, "h264"), (WRIST, "libdav1d")):
        path = video_path(src, 0, cam)
        index = index_packets(lambda p=path: open(p, "rb"), str(path))
        assert index is not None and index.codec == codec
        assert index.frames == LENGTHS[0] and index.key[0] and index.key[4] and not index.key[1]
        assert index.keyframe_before(7) == 4 and index.frames_at([0.7, 0.0, 0.3], "x") == [7, 0, 3]
        data = path.read_bytes()
        assert data[index.pos[-1] + index.size[-1] :][4:8] in (b"moov", b"")  # packets end where mdat does


def test_frames_at_one_by_one_and_as_an_array_agree(src: Path) -> None:
    """A few timestamps are looked up one by one, many as an array: the same frames (rounding half
    to even, half a frame either side), the same one-line error for a time with no frame, NaN
    and infinity (a hostile dataset's timestamps) included."""
    path = video_path(src, 1, WRIST)
    index = index_packets(lambda: open(path, "rb"), str(path))
    assert index is not None
    fps = 10
    times = [k / fps + d for k in range(LENGTHS[1]) for d in (0.0, 0.049, -0.049)]
    times = [t for t in times if t >= 0]
    one_by_one = [index.frames_at([t], "x")[0] for t in times]
    assert one_by_one == index.frames_at(times, "x") == [round(t * fps) for t in times]
    for bad in (LENGTHS[1] / fps + 0.2, -0.2, float("nan"), float("inf")):
        for many in ([bad], [0.0] * 5 + [bad]):
            with pytest.raises(DecodeError, match=r"x: no frame at"):
                index.frames_at(many, "x")


def test_random_reads_equal_pyav(src: Path, imported: Path) -> None:
    """Forward, backward, across files and codecs alike: every frame as PyAV decodes the file."""
    ref = reference(src)
    view = shardstore.episodes(str(imported))
    order = [(0, 5), (0, 6), (0, 2), (1, 8), (0, 12), (2, 0), (0, 3), (1, 0), (2, 10), (2, 9), (0, 4)]
    for e, t in order:
        step = view.step(e, t)
        for cam in (FRONT, WRIST):
            assert np.array_equal(step[cam], ref[(e, cam)][t]), (e, t, cam)
    decoder = view.video.decoder
    assert all(decoder.indexed(name) for name in view.video.names)
    assert decoder._open == {}  # no container was opened
    with pytest.raises(DecodeError, match=r"episode_000001\.mp4: no frame at 99\.000000 s"):
        decoder.frame(next(n for n in view.video.names if n.endswith("episode_000001.mp4")), 99.0)


def test_windows_cross_keyframes(src: Path, imported: Path) -> None:
    ref = reference(src)
    view = shardstore.episodes(str(imported))
    for e, t, before, after in ((0, 6, 5, 3), (1, 4, 4, 4), (0, 12, 12, 0), (2, 1, 3, 2)):
        w = view.window(e, t, before, after)
        idx = np.clip(np.arange(t - before, t + after + 1), 0, LENGTHS[e] - 1)
        for cam in (FRONT, WRIST):
            assert np.array_equal(w[cam], np.stack([ref[(e, cam)][i] for i in idx])), (e, t, cam)


def test_batch_reads_its_groups_of_pictures_at_once(src: Path, imported: Path) -> None:
    """get_many over frames in several groups of pictures of one file per camera, on remote
    storage: one read_ranges call with a stretch per group of both cameras' files (the reads
    concurrent: S3 in one round trip), the frames PyAV's; the batch's episodes read in one
    read_ranges call."""
    ref = reference(src)
    view = shardstore.episodes(str(imported))
    calls: list[int] = []
    for storage in {id(s): s for s in (view.dataset.storage, view.video.store.storage)}.values():
        storage.local_path = lambda path: None  # type: ignore[method-assign]  # read as S3 is (local: one pread each)
        def counting(requests, *a, _real=storage.read_ranges, **k):  # type: ignore[no-untyped-def]
            calls.append(len(requests))
            return _real(requests, *a, **k)

        storage.read_ranges = counting  # type: ignore[method-assign]
    steps = [(0, 1), (2, 5), (0, 9), (0, 12)]  # episode 0's frames in groups of pictures 0, 8 and 12
    items = view.get_many(steps)
    for (e, t), item in zip(steps, items, strict=True):
        for cam in (FRONT, WRIST):
            assert np.array_equal(item[cam], ref[(e, cam)][t]), (e, t, cam)
    # two episodes' samples; per camera three stretches of episode 0's file and one of episode 2's, all at once
    assert sorted(calls) == [2, 8]


def bframe_h264(path: Path, episode: int, frames: int) -> None:
    """The episode's frames as H.264 with B-frames: shown in another order than decoded."""
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=Fraction(10))
        s.width = s.height = 32
        s.pix_fmt = "yuv420p"
        s.options = {"g": "4", "bf": "2", "x264-params": "b-adapt=0:scenecut=0"}
        for i in range(frames):
            f = av.VideoFrame.from_ndarray(frame_pixels(episode, i, 0, 32), format="rgb24")
            f.pts = i
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def test_bframes_read_by_packets(src: Path, tmp_path: Path) -> None:
    """Frames decoded in another order than shown: still exact, backward and forward."""
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    path = video_path(copy, 0, FRONT)
    bframe_h264(path, 0, LENGTHS[0])
    index = index_packets(lambda: open(path, "rb"), str(path))
    assert index is not None and (index.packet != np.arange(LENGTHS[0])).any()  # reordered
    import_lerobot(str(copy), str(tmp_path / "ds"))
    view = shardstore.episodes(str(tmp_path / "ds"))
    want = pyav_frames(path)
    for t in (5, 6, 2, 12, 0, 1, 3, 11, 7):
        assert np.array_equal(view.step(0, t)[FRONT], want[t]), t
    assert np.array_equal(view.window(0, 9, 7, 2)[FRONT], np.stack(want[2:12]))
    assert all(view.video.decoder.indexed(n) for n in view.video.names)


def test_open_gops_are_not_indexed(src: Path) -> None:
    """A frame decoded after a keyframe but shown before it needs the group before: not plain."""
    path = video_path(src, 0, WRIST)
    index = index_packets(lambda: open(path, "rb"), str(path))
    assert index is not None and index.plain()
    pts = index.pts.copy()
    pts[5], pts[4] = pts[4], pts[5]  # the keyframe (packet 4) shown after the packet decoded next
    leading = PacketIndex(
        index.codec,
        index.extradata,
        32,
        32,
        "yuv420p",
        index.time_base,
        index.pos,
        index.size,
        pts,
        index.key,
    )
    assert not leading.plain()


def test_files_left_out_of_the_index_use_the_demuxer(src: Path, imported: Path, tmp_path: Path) -> None:
    """A file the index leaves out (it did not qualify) is read through the demuxer, exactly."""
    copy = tmp_path / "ds"
    shutil.copytree(imported, copy)
    path = copy / ".videos" / PACKETS_FILE
    indexes = load_packets(path.read_bytes(), str(path))
    name = next(n for n in indexes if n.endswith(f"{FRONT}/episode_000001.mp4"))
    save_packets({n: i for n, i in indexes.items() if n != name}, str(path))
    view = shardstore.episodes(str(copy))
    want = pyav_frames(video_path(src, 1, FRONT))
    for t in (5, 1, 8, 0, 6):
        assert np.array_equal(view.step(1, t)[FRONT], want[t])
    assert not view.video.decoder.indexed(name)
    assert view.video.decoder.seeks(name) >= 1  # through the demuxer
    assert view.video.decoder.indexed(name.replace("episode_000001", "episode_000000"))


def test_import_without_a_packet_index_still_reads(src: Path, imported: Path, tmp_path: Path) -> None:
    """An import made before the packet index: each file indexed on first use."""
    old = tmp_path / "old"
    shutil.copytree(imported, old)
    (old / ".videos" / PACKETS_FILE).unlink()
    schema_path = old / ".nv-meta/schema.json"
    schema = json.loads(schema_path.read_text())
    del schema["attrs"]["video_packets"]
    schema_path.write_text(json.dumps(schema))
    ref = reference(src)
    view = shardstore.episodes(str(old))
    for e, t in ((2, 7), (2, 3), (0, 11)):
        assert np.array_equal(view.step(e, t)[WRIST], ref[(e, WRIST)][t])
    assert view.video.decoder.indexed(view.video.names[0])


def test_packets_outside_the_member_are_refused(imported: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(imported, bad)
    path = bad / ".videos" / PACKETS_FILE
    indexes = load_packets(path.read_bytes(), str(path))
    name = next(n for n in indexes if n.endswith(f"{WRIST}/episode_000000.mp4"))
    indexes[name].size[3] = 10**9  # frame 3 reaches past the file
    save_packets(indexes, str(path))
    view = shardstore.episodes(str(bad))
    with pytest.raises(DecodeError, match=r"episode_000000\.mp4.*frame 3 \(packet 3\) .* outside the video's \d+ bytes"):
        view.step(0, 0)
    path.write_bytes(b"PK\x03\x04 not an index")
    with pytest.raises(DecodeError, match="packets.npz: not a packet index"):
        shardstore.episodes(str(bad)).step(0, 0)


def test_export_and_reimport_keep_reading_by_packets(src: Path, imported: Path, tmp_path: Path) -> None:
    """v2.1 -> v3.0 (episodes joined into one file per camera) -> import: indexed again, exact."""
    export_lerobot(str(imported), str(tmp_path / "v30"), version="3.0")
    import_lerobot(str(tmp_path / "v30"), str(tmp_path / "ds30"))
    view = shardstore.episodes(str(tmp_path / "ds30"))
    ref = reference(src)
    for e, t in ((2, 4), (0, 9), (1, 8), (2, 0)):
        step = view.step(e, t)
        for cam in (FRONT, WRIST):
            assert np.array_equal(step[cam], ref[(e, cam)][t]), (e, t, cam)
    assert all(view.video.decoder.indexed(n) for n in view.video.names)



def test_batch_on_threads_equals_pyav(src: Path, imported: Path) -> None:
    """A batch's files decoded on three threads (each file on one, with its own decoders): every
    frame PyAV's, as many frames decoded as on one thread, three threads used; an error on one
    of them is the caller's one-line error."""
    import threading

    from shardstore.episodes.video import VideoRef

    ref = reference(src)
    steps = [(0, 5), (1, 8), (0, 2), (2, 10), (1, 0), (2, 3)]
    offsets = {FRONT: [-1, 0], WRIST: [0]}
    decoded = {}
    used: set[str] = set()
    for threads in (1, 3):
        view = shardstore.episodes(str(imported))
        decoder = view.video.decoder
        decoder.threads = threads
        real = decoder._frames_of

        def recording(*a, real=real, **k):  # type: ignore[no-untyped-def]
            used.add(threading.current_thread().name)
            return real(*a, **k)

        decoder._frames_of = recording  # type: ignore[method-assign]
        batch = view.get_many(steps, offsets)
        for (e, t), item in zip(steps, batch, strict=True):
            np.testing.assert_array_equal(item[FRONT], np.stack([ref[(e, FRONT)][max(t - 1, 0)], ref[(e, FRONT)][t]]))
            np.testing.assert_array_equal(item[WRIST], ref[(e, WRIST)][t][None])
        decoded[threads] = sum(decoder.decoded(n) for n in view.video.names)
    assert decoded[3] == decoded[1] > 0
    assert len(used) == 3  # six files: three threads (the caller's among them)
    decoder = shardstore.episodes(str(imported)).video.decoder
    decoder.threads = 2
    bad = next(n for n in view.video.names if n.endswith("episode_000001.mp4"))
    good = next(n for n in view.video.names if n.endswith("episode_000000.mp4"))
    refs = [VideoRef(good, t / 10, t) for t in range(4)] + [VideoRef(bad, 99.0, -1)]  # the bad file: the 2nd thread's
    with pytest.raises(DecodeError, match=r"episode_000001\.mp4: no frame at 99\.000000 s"):
        decoder.frames(refs)
    assert decoder.frames(refs[:4])[3].shape == ref[(0, FRONT)][0].shape  # the threads are free again


def test_planar_frames_are_pyavs_as_chw(src: Path, imported: Path) -> None:
    """``get_many(..., planar=True)``: each frame CHW (FFmpeg's planar RGB), the same values as
    PyAV's rgb24 frame transposed, for both codecs and through the frames kept; HWC calls after it
    in the same process still get HWC."""
    ref = reference(src)
    view = shardstore.episodes(str(imported))
    steps = [(0, 5), (1, 8), (0, 5), (2, 0)]
    for _ in range(2):  # the second time from the frames kept
        batch = view.get_many(steps, {FRONT: [-1, 0], WRIST: [0]}, planar=True)
        for (e, t), item in zip(steps, batch, strict=True):
            for cam, ts in ((FRONT, [max(t - 1, 0), t]), (WRIST, [t])):
                want = np.stack([ref[(e, cam)][i].transpose(2, 0, 1) for i in ts])
                got = item[cam]
                assert got.flags.c_contiguous and got.shape == want.shape, (e, t, cam)
                np.testing.assert_array_equal(got, want)
    assert np.array_equal(view.step(0, 5)[FRONT], ref[(0, FRONT)][5])


def test_decode_workers_are_kept_and_hand_back_errors() -> None:
    """The decode threads live on between calls (starting one per call cost 0.17 ms of a 3 ms
    item), an error on one reaches the caller and leaves the workers serving, and a forked child
    gets workers of its own (a parent's threads do not survive the fork), even when the fork came
    while another thread held the workers' lock."""
    import multiprocessing
    import threading

    from shardstore.episodes import video

    def names() -> list[str]:
        seen: list[str] = []
        video._on_threads(lambda k: seen.append(threading.current_thread().name), 3)
        return sorted(seen)

    def threads() -> set[threading.Thread]:
        seen: set[threading.Thread] = set()
        video._on_threads(lambda k: seen.add(threading.current_thread()), 3)
        return seen

    first = names()
    assert first == sorted([threading.current_thread().name, "shardstore-decode-1", "shardstore-decode-2"])
    kept = threads()
    for _ in range(20):
        assert threads() == kept  # the same thread objects, not new ones of the same names

    def fail(k: int) -> None:
        if k == 2:
            raise ValueError("frame 7: Invalid data")

    with pytest.raises(ValueError, match="frame 7"):
        video._on_threads(fail, 3)
    assert names() == first

    ctx = multiprocessing.get_context("fork")
    with video._WORKERS_LOCK:  # forked while another thread holds the workers' lock
        pool = ctx.Pool(1)
    with pool:
        child = sorted(pool.apply_async(_worker_names_in_child).get(timeout=60))
    assert [n for n in child if n.startswith("shardstore-decode")] == ["shardstore-decode-1", "shardstore-decode-2"]


def _worker_names_in_child() -> list[str]:
    import threading

    from shardstore.episodes import video

    seen: list[str] = []
    video._on_threads(lambda k: seen.append(threading.current_thread().name), 3)
    return seen


def test_a_batch_keeps_the_episodes_it_read(imported: Path) -> None:
    """A batch reads its episodes' samples once: the next batch on the same episodes reads none
    of them again (over S3 that is a round trip per batch), and gives what a fresh view gives;
    the keep is bounded in bytes and the least recently used episode goes first."""
    import pickle

    from shardstore.episodes.recent import Recent

    view = shardstore.episodes(str(imported))
    view.get_many([(0, 5), (1, 8), (2, 3)], {WRIST: [0]})
    storage = view.dataset.storage
    reads: list[str] = []
    real_at, real_ranges = storage.read_at, storage.read_ranges
    storage.read_at = lambda path, *a: reads.append(path) or real_at(path, *a)  # type: ignore[method-assign]
    storage.read_ranges = lambda rs: reads.extend(p for p, _ in rs) or real_ranges(rs)  # type: ignore[method-assign]
    steps = [(0, 6), (1, 2), (2, 3), (2, 9)]
    again = view.get_many(steps, {WRIST: [-1, 0]})
    assert [p for p in reads if not p.startswith(".videos")] == []
    fresh = shardstore.episodes(str(imported)).get_many(steps, {WRIST: [-1, 0]})
    for a, b in zip(again, fresh, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)

    kept: Recent[str] = Recent(most=3, limit=100)
    kept.put(0, "episode 0", 40)
    kept.put(1, "episode 1", 40)
    assert kept.get(0) == "episode 0"  # now used after 1
    kept.put(2, "episode 2", 40)
    assert kept.get(1) is None and kept.get(0) == "episode 0"  # 120 bytes > 100: the least recent (1) went
    assert kept.nbytes == 80 and len(kept) == 2
    kept.put(7, "too large", 101)
    assert kept.get(7) is None and kept.nbytes == 80
    assert len(pickle.loads(pickle.dumps(kept))) == 0  # a DataLoader worker starts empty

"""Pure layout math: group resolution, frame selection, keyframes, chunk coalescing (with properties)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.episodes import layout
from megahour.episodes.errors import LayoutError
from megahour.episodes.layout import ChunkRef, TopicGroup
from megahour.episodes.transcode import parse_groups

TOPICS = [
    "/camera/scene/image",
    "/camera/wrist/image",
    "/joint_states",
    "/action",
    "/gripper/state",
    "/events",
]


def test_default_groups_follow_read_pattern() -> None:
    resolved = layout.resolve_layout("vla", layout.DEFAULT_GROUPS, TOPICS)
    assert resolved.topics_in("cameras") == ["/camera/scene/image", "/camera/wrist/image"]
    assert resolved.topics_in("proprio") == ["/action", "/gripper/state", "/joint_states"]
    assert resolved.topics_in("context") == ["/events"]


def test_topics_no_group_names_travel_in_the_other_group_written_last() -> None:
    resolved = layout.resolve_layout("vla", layout.DEFAULT_GROUPS, [*TOPICS, "/imu", "/wrench"])
    assert resolved.topics_in(layout.OTHER_GROUP) == ["/imu", "/wrench"]
    assert [g.name for g in resolved.groups][-1] == layout.OTHER_GROUP
    assert resolved.topics_in("proprio") == ["/action", "/gripper/state", "/joint_states"]
    # without such topics the layout is exactly the declared one
    assert [g.name for g in layout.resolve_layout("vla", layout.DEFAULT_GROUPS, TOPICS).groups] == [
        "cameras",
        "proprio",
        "context",
    ]


def test_a_declared_group_named_other_cannot_take_the_unnamed_topics() -> None:
    groups = (*layout.DEFAULT_GROUPS, TopicGroup(layout.OTHER_GROUP, ("/x",)))
    with pytest.raises(LayoutError, match=r"/imu is in no topic group, and the group for such topics"):
        layout.resolve_layout("vla", groups, [*TOPICS, "/imu"])


def test_topic_in_two_groups_is_refused() -> None:
    groups = (TopicGroup("a", ("/camera/*",)), TopicGroup("b", ("/camera/scene/*",)))
    with pytest.raises(LayoutError, match=r"matches groups \['a', 'b'\]"):
        layout.resolve_layout("vla", groups, ["/camera/scene/image"])


def test_unknown_pattern_lists_the_known_ones() -> None:
    with pytest.raises(LayoutError, match="use one of vla, world_model"):
        layout.read_pattern("vlaa")


def test_gop_follows_the_read_pattern() -> None:
    assert layout.read_pattern("vla").gop_frames(30) == 15
    assert layout.read_pattern("world_model").gop_frames(30) == 60


def test_parse_groups_cli_form() -> None:
    groups = parse_groups(["cams=/camera/*", "state=/joint_states,/action@2.5"])
    assert groups[0] == TopicGroup("cams", ("/camera/*",), None)
    assert groups[1] == TopicGroup("state", ("/joint_states", "/action"), 2.5)
    with pytest.raises(ValueError, match="name=/topic/a"):
        parse_groups(["nogroup"])


@given(
    n=st.integers(min_value=1, max_value=200),
    t=st.integers(min_value=-50, max_value=250),
    frames=st.integers(min_value=1, max_value=10),
    stride=st.integers(min_value=1, max_value=4),
)
def test_frame_indices_end_at_or_before_t(n: int, t: int, frames: int, stride: int) -> None:
    times = list(range(0, n * 10, 10))
    picked = layout.frame_indices(times, t * 10 + 3, frames, stride)
    last = max((i for i, ts in enumerate(times) if ts <= t * 10 + 3), default=-1)
    if last < 0 or last - (frames - 1) * stride < 0:
        assert picked is None
    else:
        assert picked is not None and len(picked) == frames and picked[-1] == last
        assert all(b - a == stride for a, b in itertools.pairwise(picked))


@given(
    keyframes=st.lists(st.integers(min_value=0, max_value=500), min_size=1, unique=True).map(sorted),
    frame=st.integers(min_value=0, max_value=600),
)
def test_keyframe_for_is_the_latest_not_after(keyframes: list[int], frame: int) -> None:
    if frame < keyframes[0]:
        with pytest.raises(ValueError):
            layout.keyframe_for(keyframes, frame)
        return
    key = layout.keyframe_for(keyframes, frame)
    assert key in keyframes and key <= frame
    assert not [k for k in keyframes if key < k <= frame]


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 500)), min_size=1, max_size=20))
def test_coalesce_covers_every_chunk_in_one_range(spans: list[tuple[int, int]]) -> None:
    chunks = [ChunkRef(0, 1, offset, length) for offset, length in spans]
    start, length = layout.coalesce(chunks)
    assert all(start <= c.offset and c.offset + c.length <= start + length for c in chunks)
    assert start == min(c.offset for c in chunks)
    assert start + length == max(c.offset + c.length for c in chunks)


def test_chunks_for_span_selects_overlaps() -> None:
    chunks = [ChunkRef(i * 10, i * 10 + 9, i * 100, 100) for i in range(5)]
    assert [c.offset for c in layout.chunks_for_span(chunks, 15, 31)] == [100, 200, 300]
    assert layout.chunks_for_span(chunks, 100, 200) == []


def test_sample_reach_counts_frames_and_series() -> None:
    spec = layout.sample_spec("vla")
    before, after = spec.reach_ns({"/camera/scene/image": 30.0, "/camera/wrist/image": 30.0})
    assert before == 2_000_000_000 and after == 1_000_000_000


# --- sample specs: patterns and files ---------------------------------------------------------------


def test_patterns_resolve_against_the_episodes_topics() -> None:
    topics = ["/camera/front", "/camera/wrist", "/joint_states", "/action", "/imu"]
    spec = layout.sample_spec("vla_any").resolve(topics)
    assert spec.frames[0].topics == ("/camera/front", "/camera/wrist")
    assert spec.series[0].topics == ("/joint_states",)  # no gripper: the pattern matches nothing, fine
    assert spec.resolved and spec.resolve(topics) is spec
    # exact names stay, present or not (the reader names the missing one)
    assert layout.sample_spec("vla").resolve(topics) is layout.sample_spec("vla")
    with pytest.raises(LayoutError, match=r"'vla_any': /camera/\* match no topic of the episode \(it has /a"):
        layout.sample_spec("vla_any").resolve(["/a", "/joint_states", "/action"])


topic_names = st.lists(
    st.sampled_from(["/camera/a", "/camera/b/image", "/cam", "/joint_states", "/x[1]"]), unique=True
)


@given(
    available=topic_names,
    entries=st.lists(st.sampled_from(["/camera/*", "/x*", "/cam?", "/joint_states"]), min_size=1),
)
def test_a_resolved_window_holds_exactly_what_its_entries_match(available, entries) -> None:
    import fnmatch

    spec = layout.SampleSpec("p", series=(layout.SeriesWindow(tuple(entries), 1.0, 0.0),))
    if not any(layout.is_pattern(e) for e in entries):
        assert spec.resolve(available) is spec  # names only: nothing to resolve
        return
    want = [
        t
        for e in entries
        for t in (sorted(a for a in available if fnmatch.fnmatchcase(a, e)) if layout.is_pattern(e) else [e])
    ]
    want = list(dict.fromkeys(want))
    if not want:
        with pytest.raises(LayoutError):
            spec.resolve(available)
        return
    assert spec.resolve(available).series[0].topics == tuple(want)


def test_a_spec_file_needs_no_code() -> None:
    spec = layout.parse_spec(
        {
            "name": "pick",
            "frames": [{"topics": ["/camera/*"], "frames": 2, "stride": 3}],
            "series": [{"topics": ["/joint_states"], "before_s": 1.5}],
            "raw": [{"topics": ["/imu"], "before_s": 0.5, "after_s": 0.1}],
        },
        "pick.yaml",
    )
    assert spec == layout.SampleSpec(
        "pick",
        frames=(layout.FrameWindow(("/camera/*",), 2, 3),),
        series=(layout.SeriesWindow(("/joint_states",), 1.5, 0.0),),
        raw=(layout.RawWindow(("/imu",), 0.5, 0.1),),
    )
    resolved = spec.resolve(["/camera/front", "/joint_states", "/imu"])
    assert resolved.reach_ns({"/camera/front": 10.0}) == (1_500_000_000, 100_000_000)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"frames": []}, "a mapping with a name:"),
        ({"name": "x", "windows": []}, "unknown key 'windows'"),
        ({"name": "x", "frames": [{"topics": ["/c"]}]}, r"frames\[0\]: give frames, topics"),
        ({"name": "x", "frames": [{"topics": ["/c"], "frames": 0}]}, "frames and stride must be at least 1"),
        ({"name": "x", "series": [{"topics": [], "before_s": 1}]}, "topics is a list"),
        ({"name": "x", "raw": [{"topics": ["/imu"], "before_s": -1}]}, "must be finite and not negative"),
        ({"name": "x", "series": [{"topics": ["/j"], "before_s": float("nan")}]}, "must be finite"),
        ({"name": "x", "frames": [{"topics": ["/c"], "frames": 2.5}]}, "whole numbers"),
        ({"name": "x"}, "reads nothing"),
    ],
)
def test_a_bad_spec_file_names_the_key_and_the_fix(data, message) -> None:
    with pytest.raises(LayoutError, match=message):
        layout.parse_spec(data, "spec.yaml")

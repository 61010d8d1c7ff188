"""Read-pattern layout: GOP presets, topic groups, sample specs and the index math (pure, no I/O).

The layout follows how data is read, not what its schema is:
- a *read pattern* preset fixes the H.264 GOP (short for sparse VLA windows, long for contiguous
  world-model clips) and the chunk window of the non-video groups;
- *topic groups* collect the topics that one sample reads together. Each group is written as one
  contiguous, time-major section of chunks, so a sample costs one ranged read per group it touches,
  whatever the number of topics in it;
- video chunks close on GOP boundaries, so the first chunk a read touches starts with the keyframe.
"""

from __future__ import annotations

import bisect
import dataclasses
import fnmatch
import glob
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from megahour.episodes.errors import LayoutError

NS = 1_000_000_000


@dataclass(frozen=True)
class ReadPattern:
    """A declared read pattern: how long a GOP is and how wide non-video chunks are."""

    name: str
    gop_s: float
    data_chunk_s: float
    description: str

    def gop_frames(self, rate_hz: float) -> int:
        return max(1, round(self.gop_s * rate_hz))

    def gop_ns(self, rate_hz: float) -> int:
        """The GOP as a time window (gop_frames frame periods): IDRs fall on each window's first frame."""
        return round(self.gop_frames(rate_hz) * NS / rate_hz)


READ_PATTERNS: dict[str, ReadPattern] = {
    "vla": ReadPattern(
        "vla",
        gop_s=0.5,
        data_chunk_s=1.0,
        description="short sparse windows (a few frames at t): a seek per sample, so short GOPs",
    ),
    "world_model": ReadPattern(
        "world_model",
        # As long as the clip the sample spec reads (2 s): a random clip then decodes one GOP's worth of
        # lead-in on average (half a GOP), and the file is ~30% smaller than at 0.5 s. Longer GOPs save
        # little more and make every clip pay for them (docs/benchmarks.md has the sweep).
        gop_s=2.0,
        data_chunk_s=2.0,
        description="long contiguous clips: one keyframe amortized over the clip, so long GOPs",
    ),
}


def read_pattern(name: str) -> ReadPattern:
    try:
        return READ_PATTERNS[name]
    except KeyError:
        raise LayoutError(
            f"unknown read pattern {name!r}; use one of {', '.join(sorted(READ_PATTERNS))}"
        ) from None


@dataclass(frozen=True)
class TopicGroup:
    """Topics read together. ``topics`` are exact names or fnmatch patterns ("/camera/*")."""

    name: str
    topics: tuple[str, ...]
    chunk_s: float | None = None  # None: the GOP for video groups, the preset's data window otherwise

    def matches(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, pattern) for pattern in self.topics)


DEFAULT_GROUPS: tuple[TopicGroup, ...] = (
    TopicGroup("cameras", ("/camera/*",)),
    TopicGroup("proprio", ("/joint_states", "/action", "/gripper/*")),
    TopicGroup("context", ("/events",), chunk_s=3600.0),
)


@dataclass(frozen=True)
class Layout:
    """A resolved layout: which group each topic is in, and the GOP/chunk windows."""

    pattern: ReadPattern
    groups: tuple[TopicGroup, ...]
    group_of: dict[str, str] = field(default_factory=dict)

    def topics_in(self, group: str) -> list[str]:
        return sorted(topic for topic, name in self.group_of.items() if name == group)

    def chunk_ns(self, group: str, video_rate_hz: float | None) -> int:
        spec = next(g for g in self.groups if g.name == group)
        if spec.chunk_s is not None:
            return max(1, round(spec.chunk_s * NS))
        if video_rate_hz:
            return self.pattern.gop_ns(video_rate_hz)  # exactly one GOP per chunk
        return max(1, round(self.pattern.data_chunk_s * NS))


# Topics that no declared group names (an IMU, forces, a custom message) travel together in this group,
# written last; no topic is refused for want of a group.
OTHER_GROUP = "other"


def resolve_layout(pattern: str | ReadPattern, groups: Sequence[TopicGroup], topics: Iterable[str]) -> Layout:
    """Assign every topic to exactly one group (those no group names to ``OTHER_GROUP``), or say which
    topic is wrong and how to fix it."""
    pattern = read_pattern(pattern) if isinstance(pattern, str) else pattern
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise LayoutError(f"topic group names repeat: {names}; give each group its own name")
    unmatched = tuple(sorted(t for t in topics if not any(g.matches(t) for g in groups)))
    if unmatched:
        if OTHER_GROUP in names:
            raise LayoutError(
                f"topic {unmatched[0]} is in no topic group, and the group for such topics, "
                f"{OTHER_GROUP!r}, is taken by a declared group; rename that group or add a pattern for it"
            )
        # Escaped: the group's entries are patterns, and a topic such as /imu[0] must match only itself.
        groups = (*groups, TopicGroup(OTHER_GROUP, tuple(glob.escape(t) for t in unmatched)))
    group_of: dict[str, str] = {}
    for topic in sorted(topics):
        hits = [g.name for g in groups if g.matches(topic)]
        if len(hits) > 1:
            raise LayoutError(
                f"topic {topic} matches groups {hits}; a topic is read in one pattern, "
                "so narrow the patterns until it matches one group"
            )
        group_of[topic] = hits[0]
    return Layout(pattern=pattern, groups=tuple(groups), group_of=group_of)


# --- sample specs -------------------------------------------------------------------------------


# A window's topics are exact names or fnmatch patterns ("/camera/*": every camera, whatever the robot
# calls them). ``SampleSpec.resolve`` expands them against one episode's topics: an exact name must be
# there, a pattern may match none, and a window whose entries match nothing is refused.


def is_pattern(topic: str) -> bool:
    return any(c in topic for c in "*?[")


@dataclass(frozen=True)
class FrameWindow:
    """``frames`` frames per topic, ``stride`` frames apart, the last one at or before t."""

    topics: tuple[str, ...]
    frames: int
    stride: int = 1


@dataclass(frozen=True)
class SeriesWindow:
    """Every message in [t - before_s, t + after_s] per topic (history and action chunks)."""

    topics: tuple[str, ...]
    before_s: float
    after_s: float

    def bounds(self, t_ns: int) -> tuple[int, int]:
        """The inclusive [lo, hi] in ns this window reads around ``t_ns``."""
        return t_ns - round(self.before_s * NS), t_ns + round(self.after_s * NS)


@dataclass(frozen=True)
class RawWindow(SeriesWindow):
    """Every message in [t - before_s, t + after_s] per topic, as recorded: (log time, bytes), for topics
    megahour does not decode (an IMU, forces, your own messages); decode them with the topic's schema."""


@dataclass(frozen=True)
class SampleSpec:
    name: str
    frames: tuple[FrameWindow, ...] = ()
    series: tuple[SeriesWindow, ...] = ()
    raw: tuple[RawWindow, ...] = ()
    # Set by ``resolve``: the topics are names as they are (a recorded name may hold a '[' or a '*').
    literal: bool = field(default=False, compare=False, repr=False)

    def windows(self) -> tuple[FrameWindow | SeriesWindow, ...]:
        return (*self.frames, *self.series, *self.raw)

    def topics(self) -> list[str]:
        out: list[str] = []
        for window in self.windows():
            out.extend(t for t in window.topics if t not in out)
        return out

    @property
    def resolved(self) -> bool:
        return self.literal or not any(is_pattern(t) for t in self.topics())

    def resolve(self, available: Iterable[str]) -> SampleSpec:
        """The spec with each pattern replaced by the ``available`` topics it matches (sorted, each topic
        once per window); exact names are kept, present or not (the reader says which is missing).
        LayoutError for a window whose entries match no topic at all."""
        if self.resolved:
            return self
        available = sorted(available)

        def expand(window):
            topics: list[str] = []
            for entry in window.topics:
                matches = (
                    [t for t in available if fnmatch.fnmatchcase(t, entry)] if is_pattern(entry) else [entry]
                )
                topics.extend(t for t in matches if t not in topics)
            if not topics:
                raise LayoutError(
                    f"sample spec {self.name!r}: {', '.join(window.topics)} match no topic of the episode "
                    f"(it has {', '.join(available) or 'none'}); name the topics, or use a spec for these"
                )
            return dataclasses.replace(window, topics=tuple(topics))

        return SampleSpec(
            self.name,
            frames=tuple(expand(w) for w in self.frames),
            series=tuple(expand(w) for w in self.series),
            raw=tuple(expand(w) for w in self.raw),
            literal=True,
        )

    def reach_ns(self, frame_rate_hz: dict[str, float]) -> tuple[int, int]:
        """How far before and after t the sample reaches, in ns."""
        before = after = 0
        for window in self.frames:
            for topic in window.topics:
                period = NS / frame_rate_hz[topic]
                before = max(before, round((window.frames - 1) * window.stride * period))
        for window in (*self.series, *self.raw):
            before = max(before, round(window.before_s * NS))
            after = max(after, round(window.after_s * NS))
        return before, after


SAMPLE_SPECS: dict[str, SampleSpec] = {
    # A VLA step: the last 4 frames of two cameras, 2 s of proprio history, a 1 s action chunk ahead.
    "vla": SampleSpec(
        "vla",
        frames=(FrameWindow(("/camera/scene/image", "/camera/wrist/image"), frames=4),),
        series=(
            SeriesWindow(("/joint_states", "/gripper/state"), before_s=2.0, after_s=0.0),
            SeriesWindow(("/action",), before_s=0.0, after_s=1.0),
        ),
    ),
    # The same step for short clips (half-second episodes, as in the test clusters): 2 frames,
    # 0.2 s of proprio history, a 0.2 s action chunk.
    "vla_short": SampleSpec(
        "vla_short",
        frames=(FrameWindow(("/camera/scene/image", "/camera/wrist/image"), frames=2),),
        series=(
            SeriesWindow(("/joint_states", "/gripper/state"), before_s=0.2, after_s=0.0),
            SeriesWindow(("/action",), before_s=0.0, after_s=0.2),
        ),
    ),
    # The VLA step for any robot: every camera (whatever the robot calls them), the joint states and a
    # gripper if there is one, the action chunk.
    "vla_any": SampleSpec(
        "vla_any",
        frames=(FrameWindow(("/camera/*",), frames=4),),
        series=(
            SeriesWindow(("/joint_states", "/gripper/*"), before_s=2.0, after_s=0.0),
            SeriesWindow(("/action",), before_s=0.0, after_s=1.0),
        ),
    ),
    # A world-model clip: 2 s of contiguous frames from two cameras with the actions over the clip.
    "world_model": SampleSpec(
        "world_model",
        frames=(FrameWindow(("/camera/scene/image", "/camera/wrist/image"), frames=60),),
        series=(SeriesWindow(("/action", "/joint_states"), before_s=2.0, after_s=0.5),),
    ),
}


def sample_spec(name: str) -> SampleSpec:
    """A built-in spec by name (``megahour.episodes.specfile.load`` also reads spec files)."""
    try:
        return SAMPLE_SPECS[name]
    except KeyError:
        raise LayoutError(
            f"unknown sample spec {name!r}; use one of {', '.join(sorted(SAMPLE_SPECS))}, "
            "or a spec file (.yaml)"
        ) from None


_WINDOW_KEYS = {
    "frames": ({"topics", "frames", "stride"}, {"topics", "frames"}),
    "series": ({"topics", "before_s", "after_s"}, {"topics"}),
    "raw": ({"topics", "before_s", "after_s"}, {"topics"}),
}


def parse_spec(data: object, source: str = "(inline)") -> SampleSpec:
    """A sample spec from its YAML form, so a robot with other cameras or raw topics needs no code::

        name: pick_step
        frames: [{topics: ["/camera/*"], frames: 4}]                  # stride: 1
        series: [{topics: ["/joint_states"], before_s: 2.0}, {topics: ["/action"], after_s: 1.0}]
        raw: [{topics: ["/imu"], before_s: 0.5}]                      # messages as recorded

    LayoutError names the key and the fix."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise LayoutError(f"{source}: a sample spec is a mapping with a name:, frames:, series: and raw:")
    unknown = sorted(set(data) - {"name", *_WINDOW_KEYS})
    if unknown:
        raise LayoutError(f"{source}: unknown key {unknown[0]!r}; use name, frames, series and raw")
    windows: dict[str, list] = {}
    for kind, (allowed, required) in _WINDOW_KEYS.items():
        entries = data.get(kind) or []
        if not isinstance(entries, list):
            raise LayoutError(f"{source}: {kind} is not a list of windows")
        windows[kind] = []
        for i, entry in enumerate(entries):
            where = f"{source}: {kind}[{i}]"
            if not isinstance(entry, dict) or set(entry) - allowed or required - set(entry):
                raise LayoutError(
                    f"{where}: give {', '.join(sorted(required))} (and only {', '.join(sorted(allowed))})"
                )
            topics = entry["topics"]
            if (
                not isinstance(topics, list)
                or not topics
                or not all(isinstance(t, str) and t for t in topics)
            ):
                raise LayoutError(f"{where}: topics is a list of topic names or patterns")
            try:
                if kind == "frames":
                    frames, stride = entry["frames"], entry.get("stride", 1)
                    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (frames, stride)):
                        raise ValueError("frames and stride are whole numbers")
                    if frames < 1 or stride < 1:
                        raise ValueError("frames and stride must be at least 1")
                    windows[kind].append(FrameWindow(tuple(topics), frames, stride))
                else:
                    before, after = float(entry.get("before_s", 0.0)), float(entry.get("after_s", 0.0))
                    if not (math.isfinite(before) and math.isfinite(after)) or before < 0 or after < 0:
                        raise ValueError("before_s and after_s must be finite and not negative")
                    cls = RawWindow if kind == "raw" else SeriesWindow
                    windows[kind].append(cls(tuple(topics), before, after))
            except (TypeError, ValueError) as exc:
                raise LayoutError(f"{where}: {exc}") from None
    if not any(windows.values()):
        raise LayoutError(f"{source}: the spec reads nothing; give at least one window")
    return SampleSpec(data["name"], tuple(windows["frames"]), tuple(windows["series"]), tuple(windows["raw"]))


# --- index math -----------------------------------------------------------------------------------


def frame_indices(frame_times: Sequence[int], t_ns: int, frames: int, stride: int) -> list[int] | None:
    """Indices of the ``frames`` frames ending at the last frame at or before ``t_ns``.

    None when the window reaches before the first frame or ``t_ns`` precedes every frame.
    """
    last = bisect.bisect_right(frame_times, t_ns) - 1
    first = last - (frames - 1) * stride
    if last < 0 or first < 0:
        return None
    return list(range(first, last + 1, stride))


def keyframe_for(keyframe_indices: Sequence[int], frame_index: int) -> int:
    """The index of the keyframe at or before ``frame_index`` (the decode has to start there)."""
    pos = bisect.bisect_right(keyframe_indices, frame_index) - 1
    if pos < 0:
        raise ValueError(f"frame {frame_index} precedes the first keyframe {keyframe_indices[:1]}")
    return keyframe_indices[pos]


@dataclass(frozen=True)
class ChunkRef:
    """One chunk of a group section: its time bounds and where its bytes are."""

    start_ns: int
    end_ns: int
    offset: int
    length: int


def chunks_for_span(chunks: Sequence[ChunkRef], start_ns: int, end_ns: int) -> list[ChunkRef]:
    """The chunks (sorted by start time) whose time bounds overlap [start_ns, end_ns]."""
    return [c for c in chunks if c.end_ns >= start_ns and c.start_ns <= end_ns]


def coalesce(chunks: Sequence[ChunkRef]) -> tuple[int, int]:
    """One byte range (offset, length) that covers ``chunks``: a single ranged read."""
    if not chunks:
        raise ValueError("no chunks to read")
    start = min(c.offset for c in chunks)
    end = max(c.offset + c.length for c in chunks)
    return start, end - start

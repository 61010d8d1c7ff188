"""Typed errors for bad episodes: each names the file and the byte offset or topic, and the fix."""

from __future__ import annotations


class EpisodeError(Exception):
    """Base class: a problem with one episode file or one request against it."""

    def __init__(
        self, path: str, problem: str, *, offset: int | None = None, topic: str | None = None, fix: str = ""
    ) -> None:
        self.path = str(path)
        self.problem = problem
        self.offset = offset
        self.topic = topic
        self.fix = fix
        where = [self.path]
        if offset is not None:
            where.append(f"byte {offset}")
        if topic is not None:
            where.append(f"topic {topic}")
        text = f"{': '.join([', '.join(where), problem])}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class CorruptEpisodeError(EpisodeError):
    """The file is truncated or its records do not parse."""


class SummaryMissing(CorruptEpisodeError):
    """The file has no summary, or one without the chunk indexes, channels or statistics it needs.

    The file itself may be valid (MCAP's summary is optional, and a recording cut short has none):
    random access needs the index, a whole-file read (:func:`megahour.episodes.mcapio.read_recording`)
    does not.
    """


class MissingTopicError(EpisodeError):
    """A topic the layout or the sample spec needs is absent from the episode."""


class TimestampOrderError(EpisodeError):
    """A topic's log times go backwards or repeat."""


class UnknownSchemaError(EpisodeError):
    """A channel uses a schema this reader cannot decode."""


class SampleWindowError(EpisodeError):
    """The requested sample window reaches outside the episode."""


class LayoutError(ValueError):
    """A layout or read-pattern declaration is inconsistent (no file involved)."""

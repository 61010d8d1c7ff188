"""The last N lines of a step's output, fed in arbitrary byte chunks. Pure, bounded memory."""

from __future__ import annotations

from collections import deque

# A line longer than this (a progress bar that never prints a newline) keeps only its end.
MAX_PARTIAL_BYTES = 64 * 1024


class LogTail:
    def __init__(self, max_lines: int = 200) -> None:
        if max_lines < 1:
            raise ValueError(f"max_lines={max_lines}: keep at least one line")
        self._max_lines = max_lines
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        # Bytes are split before decoding so a multi-byte character cut across chunks survives.
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            self._lines.append(_render(raw))
        if len(self._partial) > MAX_PARTIAL_BYTES:
            self._partial = self._partial[-MAX_PARTIAL_BYTES:]

    def lines(self) -> list[str]:
        lines = list(self._lines)
        if self._partial:
            lines.append(_render(self._partial))
        return lines[-self._max_lines :]

    def text(self) -> str:
        lines = self.lines()
        return "\n".join(lines) + "\n" if lines else ""


def _render(raw: bytes) -> str:
    # A carriage return redraws the line on a terminal (tqdm); keep what a terminal would show.
    raw = raw.rstrip(b"\r")
    return raw.rsplit(b"\r", 1)[-1].decode("utf-8", errors="replace")

"""The last lines of a Ray job's driver log, fetched cheaply and capped.

A failed job's log tail goes into an exception (the `pulumi up` error) and into the `log_tail`
output (the state); one verl line can be megabytes (a pprint of a config, a tensor repr), so both
the number of lines and the characters per line are capped, and what is cut is marked.

Fetching (Ray's state API, the Jobs API as the fallback) is jobs/dashboard_client.py's.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

# The failure report and the log_tail output.
TAIL_LINES = 50
TAIL_LINE_MAX_CHARS = 500
# Step detection reads whole metric lines (verl prints ~100 metrics per step: a few KB).
SCAN_LINES = 500
SCAN_LINE_MAX_CHARS = 65_536

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CHUNK_BYTES = 1 << 16


class CappedLines:
    """Keeps the last `lines` lines of a byte stream, each cut to `max_chars` characters.

    Memory stays bounded by lines x max_chars whatever the stream holds: a line longer than the
    cap is cut while it is read, and only the count of the bytes dropped is kept.
    """

    def __init__(self, lines: int, max_chars: int) -> None:
        self.max_chars = max_chars
        self._keep_bytes = 4 * max_chars + 16  # a UTF-8 character is at most 4 bytes
        self._done: deque[str] = deque(maxlen=lines)
        self._head = bytearray()  # start of the current line, up to _keep_bytes
        self._dropped = 0  # bytes of the current line beyond _keep_bytes

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            room = self._keep_bytes - len(self._head)
            self._head += piece[:room]
            self._dropped += max(0, len(piece) - room)
            if end < 0:
                return
            self._finish_line()
            start = end + 1

    def lines(self) -> list[str]:
        """The kept lines (a last line without a newline included)."""
        if self._head or self._dropped:
            self._finish_line()
        return list(self._done)

    def _finish_line(self) -> None:
        text = _ANSI.sub("", bytes(self._head).decode("utf-8", errors="replace")).rstrip("\r")
        self._done.append(cap_line(text, self.max_chars, self._dropped))
        self._head.clear()
        self._dropped = 0


def cap_line(text: str, max_chars: int, dropped_bytes: int = 0) -> str:
    """text cut to max_chars, with a marker saying how much was cut."""
    if len(text) <= max_chars and not dropped_bytes:
        return text
    kept = text[:max_chars]
    cut = len(text[max_chars:].encode()) + dropped_bytes
    return f"{kept} [... {cut:,} more bytes cut]"


def capped_lines(text: str, lines: int, max_chars: int) -> list[str]:
    capper = CappedLines(lines, max_chars)
    capper.feed(text.encode())
    return capper.lines()


def capped_from_chunks(chunks: Iterable[bytes], lines: int, max_chars: int) -> list[str]:
    capper = CappedLines(lines, max_chars)
    for chunk in chunks:
        capper.feed(chunk)
    return capper.lines()


class LogNotAvailableError(RuntimeError):
    """The state API could not serve the driver log."""

"""The last lines of a Ray job's driver log, fetched cheaply and capped.

A failed job's log tail goes into an exception (the `pulumi up` error) and into the `log_tail`
output (the state); one verl line can be megabytes (a pprint of a config, a tensor repr), so both
the number of lines and the characters per line are capped, and what is cut is marked.

Fetching: Ray's state API serves the last N lines of the driver log,
``GET /api/v0/logs/file?submission_id=<id>&node_id=<driver node>&lines=N``. Measured against a
real Ray 2.60 head: without ``node_id`` (or ``node_ip``) the dashboard answers 500
(GetLogOptions: "node_id or node_ip must be provided ... when no actor or task_id"), so the
driver's node id comes from the job's details (``driver_node_id``); a last line without a newline
counts as a line. ``format=text`` asks Ray 2.34-2.44 not to prefix each chunk with "1" (ray PR
#46556; the parameter was removed again in #51787 and is ignored since). The body is read as a
stream, and each line is cut while reading, so a 5 MB line never sits in memory whole. When the
state API cannot serve the file (no driver node yet, an older head), the Jobs API's whole log
(``GET /api/jobs/<id>/logs``) is the fallback.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

if TYPE_CHECKING:
    from jobs.dashboard_access import ClientArgs

# The failure report and the log_tail output.
TAIL_LINES = 50
TAIL_LINE_MAX_CHARS = 500
# Step detection reads whole metric lines (verl prints ~100 metrics per step: a few KB).
SCAN_LINES = 500
SCAN_LINE_MAX_CHARS = 65_536

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CHUNK_BYTES = 1 << 16


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


def state_api_tail(
    args: ClientArgs,
    timeout: tuple[float, float],
    submission_id: str,
    driver_node_id: str | None,
    lines: int,
    max_chars: int,
) -> list[str]:
    """The last `lines` lines of the driver log through the state API (see the module doc).

    A plain streamed request with the Jobs API client's address, headers (token) and CA: Ray's
    own request helper reads the whole body before returning, which would defeat the streaming.
    """
    import requests

    if not driver_node_id:
        raise LogNotAvailableError(f"job {submission_id} has no driver node yet")
    query = urlencode(
        {
            "submission_id": submission_id,
            "node_id": driver_node_id,
            "lines": lines,
            "format": "text",
        }
    )
    with requests.get(
        f"{args.address}/api/v0/logs/file?{query}",
        headers=args.headers,
        verify=args.verify,
        timeout=timeout,
        stream=True,
    ) as response:
        if response.status_code in (401, 403):
            # The wording the provider's credential check recognises.
            raise RuntimeError(
                f"Request failed with status code {response.status_code}: {response.text[:300]}"
            )
        if response.status_code != 200:
            raise LogNotAvailableError(
                f"state API answered {response.status_code}: {response.text[:200]!r}"
            )
        return capped_from_chunks(response.iter_content(_CHUNK_BYTES), lines, max_chars)

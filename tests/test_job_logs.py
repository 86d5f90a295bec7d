"""The log tail cap (jobs/job_logs.py): bounded lines, bounded characters per line, cuts marked."""

from __future__ import annotations

from jobs.job_logs import CappedLines, cap_line, capped_from_chunks, capped_lines


def test_long_lines_are_cut_while_streaming_and_the_cut_is_marked() -> None:
    five_mb = b"x" * 5_000_000
    chunks = [b"start\n", five_mb[:3_000_000], five_mb[3_000_000:] + b"\nend\n"]
    lines = capped_from_chunks(chunks, lines=50, max_chars=500)
    assert lines[0] == "start" and lines[2] == "end"
    assert lines[1] == "x" * 500 + " [... 4,999,500 more bytes cut]"


def test_only_the_last_lines_are_kept_and_a_last_line_without_newline_counts() -> None:
    text = "".join(f"line {n}\n" for n in range(200)) + "partial"
    lines = capped_lines(text, lines=50, max_chars=500)
    assert len(lines) == 50
    assert lines[0] == "line 151" and lines[-1] == "partial"


def test_colour_codes_are_stripped_and_multibyte_text_survives_a_cut() -> None:
    capper = CappedLines(lines=5, max_chars=4)
    capper.feed(b"\x1b[36m(TaskRunner pid=1)\x1b[0m ok\n")
    capper.feed("ääääää\n".encode())
    assert capper.lines() == [
        "(Tas [... 17 more bytes cut]",
        "ääää [... 4 more bytes cut]",
    ]


def test_short_lines_are_untouched() -> None:
    assert cap_line("step:1 - a:1", 500) == "step:1 - a:1"
    assert capped_lines("", lines=50, max_chars=500) == []

"""The runner's recovery record as its driver log carries it (standard library only).

payloads/export/supervise.py prints, at the start and end of every training attempt, one line
``verl-gke-recovery: {json}``: max_restarts, restarts_used, the hang bounds, stacks_dir and the
attempts so far (number, started_at, ended_at, cause, resumed_from_step, steps_lost). The whole
record is recovery.json in the run folder. The last line in the log is the current state.
"""

from __future__ import annotations

import json
from typing import Any

from payloads.export.supervise import LOG_PREFIX


def latest_record(log_text: str) -> dict[str, Any] | None:
    """The last recovery line's object; None when the log has none (or only broken ones)."""
    for line in reversed(log_text.splitlines()):
        at = line.find(LOG_PREFIX)
        if at < 0:
            continue
        try:
            value = json.loads(line[at + len(LOG_PREFIX) :])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def describe(record: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for a report: attempts and restarts used, each attempt, the hang bound, stacks."""
    attempts = record.get("attempts") or []
    rows = [
        (
            "attempts",
            f"{len(attempts)} ({record.get('restarts_used')} of {record.get('max_restarts')} "
            "restarts used)",
        )
    ]
    for attempt in attempts:
        resumed = attempt.get("resumed_from_step")
        start = f"from step {resumed}" if resumed is not None else "from the start"
        end = attempt.get("cause") or "running"
        lost = attempt.get("steps_lost") or 0
        rows.append(
            (
                f"attempt {attempt.get('number')}",
                f"{attempt.get('started_at')} {start}: {end}"
                + (f", {lost} steps lost" if lost else ""),
            )
        )
    floor = record.get("hang_floor_s")
    if isinstance(floor, int | float):
        rows.append(
            (
                "hang bound",
                f"max({floor / 60:g} min, {record.get('hang_factor')} x slowest step); "
                f"{(record.get('first_step_bound_s') or 0) / 60:g} min to the first step",
            )
        )
    rows.append(("stacks", str(record.get("stacks_dir"))))
    return rows


def counts(record: dict[str, Any] | None) -> dict[str, int | None]:
    """The `attempts` and `restarts_used` outputs of a record (None for both without one)."""
    if record is None:
        return {"attempts": None, "restarts_used": None}
    used = record.get("restarts_used")
    return {
        "attempts": len(record.get("attempts") or []),
        "restarts_used": int(used) if isinstance(used, int | float) else None,
    }

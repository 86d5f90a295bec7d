"""The runner's recovery record as its driver log carries it (standard library only).

payloads/export/supervise.py prints, at the start and end of every training attempt, one line
``verl-gke-recovery: {json}``: max_restarts, restarts_used, the hang bounds, stacks_dir, the
capacity wait, why the run ended when no attempt's cause says it (``ended``: the GPUs did not
come back) and the attempts so far (number, started_at, ended_at, cause, resumed_from_step,
steps_lost, and the seconds waited by cause). The whole
record is recovery.json in the run folder. The last line in the log is the current state.
"""

from __future__ import annotations

import json
from typing import Any

from payloads.export.supervise import LOG_PREFIX

# How each wait of an attempt (supervise.Attempt.waits) is shown.
WAIT_NAMES = {
    "node_death_bound": "for Ray to declare the lost node dead",
    "capacity": "for the GPUs to come back",
    "capacity_before_first_step": "for GPUs before the first step (not counted as start-up)",
}


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
        waits = attempt.get("waits") or {}
        waited = ", ".join(
            f"{WAIT_NAMES.get(cause, cause)} {seconds / 60:.1f} min"
            for cause, seconds in waits.items()
            if isinstance(seconds, int | float)
        )
        rows.append(
            (
                f"attempt {attempt.get('number')}",
                f"{attempt.get('started_at')} {start}: {end}"
                + (f", {lost} steps lost" if lost else "")
                + (f"; waited: {waited}" if waited else ""),
            )
        )
    ended = record.get("ended")
    if isinstance(ended, dict):
        rows.append(("ended", f"{ended.get('cause')}: {ended.get('detail')}"))
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

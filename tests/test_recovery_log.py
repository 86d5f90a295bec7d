"""tools.run shows the runner's recovery record from the driver log: the line the supervisor
prints is the line jobs/recovery_log.py reads, and the report's rows say attempts, restarts used,
each attempt's cause and start, the hang bound and where stacks go."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

from jobs import recovery_log
from payloads.export import supervise
from tools import run


def _printed_record(tmp_path: Path) -> str:
    policy = supervise.Policy(max_restarts=3, first_step_bound_s=7200, hang_floor_s=1800)
    supervisor = supervise.Supervisor(
        ["true"], tmp_path, policy, supervise.Cluster("http://127.0.0.1:1"), print
    )
    supervisor.attempts = [
        supervise.Attempt(1, "2026-01-01T00:00:00Z", None, cause=supervise.HANG, steps_lost=2),
        supervise.Attempt(2, "2026-01-01T01:00:00Z", 10),
    ]
    out = io.StringIO()
    with redirect_stdout(out):
        supervisor._save()
    return out.getvalue()


def test_the_supervisors_line_is_read_back_and_shown(tmp_path: Path) -> None:
    log = "step:1 - timing_s/step:1\n" + _printed_record(tmp_path) + "step:11 - timing_s/step:1\n"
    record = recovery_log.latest_record(log)
    assert record is not None
    assert record["restarts_used"] == 1 and record["max_restarts"] == 3
    view = run.summarize("sid", "http://dash", "RUNNING", "", 1000, None, log, "whole log")
    text = run.render_text(view)
    assert "2 (1 of 3 restarts used)" in text
    assert "2026-01-01T00:00:00Z from the start: hang, 2 steps lost" in text
    assert "2026-01-01T01:00:00Z from step 10: running" in text
    assert "max(30 min, 3.0 x slowest step); 120 min to the first step" in text
    assert f"stacks      {tmp_path / 'stacks'}" in text
    assert run.to_json(view)["recovery"] == record
    assert (supervise.read_record(tmp_path) or {})["restarts_used"] == 1


def test_a_log_without_the_line_shows_no_recovery_rows() -> None:
    view = run.summarize("sid", "http://dash", "RUNNING", "", 1000, None, "step:1\n", "whole log")
    assert view.recovery is None and "attempts" not in run.render_text(view)


def test_each_wait_is_shown_under_its_cause_and_a_give_up_is_said() -> None:
    record = {
        "max_restarts": 3, "restarts_used": 0, "hang_floor_s": 1800, "hang_factor": 3.0,
        "first_step_bound_s": 7200, "stacks_dir": "/c/run/stacks",
        "ended": {"cause": "no_capacity", "detail": "the cluster's alive nodes held 8 of 16"},
        "attempts": [
            {"number": 1, "started_at": "t0", "cause": "node_lost", "resumed_from_step": None,
             "waits": {"capacity_before_first_step": 600.0, "node_death_bound": 65.0,
                       "capacity": 2700.0}},
        ],
    }  # fmt: skip
    rows = dict(recovery_log.describe(record))
    assert rows["attempts"] == "1 (0 of 3 restarts used)"
    assert rows["attempt 1"] == (
        "t0 from the start: node_lost; waited: for GPUs before the first step (not counted as "
        "start-up) 10.0 min, for Ray to declare the lost node dead 1.1 min, for the GPUs to come "
        "back 45.0 min"
    )
    assert rows["ended"] == "no_capacity: the cluster's alive nodes held 8 of 16"

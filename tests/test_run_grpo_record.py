"""The runner (payloads/export/run_grpo.py) takes the run's length from the rehearsal's record,
and "finished" is verl's own state: the record's last step reached and its checkpoint saved
(latest_checkpointed_iteration.txt, verl ray_trainer.py _save_checkpoint), never the trainer's
exit status. A stand-in trainer (tests/test_run_grpo.py TRAINER) saves a given step and exits
with a given status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from payloads.export import run_grpo
from tests.test_run_grpo import IDENTITY, LENGTH, RUNNER, TRAINER, calls, mark_exported
from training.assembly import REHEARSAL_RECORD_ENV

# Runs the runner as a subprocess, as the job does.
pytestmark = pytest.mark.integration


def write_record(path: Path, last_step: int, save_steps: list[int]) -> Path:
    """A record as verl_scripts/rehearsal.py writes it (only the parts the runner reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    length = {
        "steps_per_epoch": last_step,
        "epochs": 1,
        "total_training_steps": last_step,
        "source": "dataloader x epochs",
        "last_step": last_step,
        "save_steps": save_steps,
    }
    path.write_text(json.dumps({"schema": 1, "ok": True, "length": length, "problems": []}))
    return path


def run(
    run_dir: Path, target: Path, step: int, code: int = 0, *, record: Path | None
) -> subprocess.CompletedProcess[str]:
    """The runner with the record named as the job names it: in its environment."""
    env = {k: v for k, v in os.environ.items() if k != REHEARSAL_RECORD_ENV}
    if record is not None:
        env[REHEARSAL_RECORD_ENV] = str(record)
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(run_dir),
        "--identity", json.dumps(IDENTITY), "--export-target", str(target),
        "--length", json.dumps(LENGTH),
        "--", sys.executable, "-c", TRAINER, str(run_dir), str(step), str(code),
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_the_job_names_the_record_the_runner_reads() -> None:
    assert run_grpo.REHEARSAL_RECORD_ENV == REHEARSAL_RECORD_ENV


def test_a_trainer_exiting_0_before_the_last_step_has_not_finished(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    record = write_record(tmp_path / "rehearsals" / "r.json", 8, [4, 8])
    early = run(run_dir, target, step=4, record=record)
    assert early.returncode == run_grpo.NOT_FINISHED, early.stdout + early.stderr
    assert "the run ends at step 8" in early.stdout
    assert "latest checkpoint is step 4, not the run's last step 8" in early.stdout
    assert not (run_dir / run_grpo.TRAINING_DONE_FILE).exists()
    assert not target.exists()  # nothing exported
    # The next attempt trains on (resuming) and finishes at verl's last step.
    mark_exported(target, run_dir, 8)
    second = run(run_dir, target, step=8, record=record)
    assert second.returncode == 0, second.stdout + second.stderr
    assert calls(run_dir) == 2
    done = json.loads((run_dir / run_grpo.TRAINING_DONE_FILE).read_text())
    assert done["step"] == 8 and done["length"]["last_step"] == 8


def test_a_run_saved_at_the_records_last_step_is_not_trained_again(tmp_path: Path) -> None:
    # No training.done (the attempt died after its last save): verl would train step 9.
    run_dir, target = tmp_path / "run", tmp_path / "models"
    (run_dir / "global_step_8" / "actor").mkdir(parents=True)
    (run_dir / run_grpo.LATEST_FILE).write_text("8")
    mark_exported(target, run_dir, 8)
    record = write_record(tmp_path / "r.json", 8, [8])
    result = run(run_dir, target, step=9, record=record)
    assert result.returncode == 0, result.stdout + result.stderr
    assert calls(run_dir) == 0
    assert "is at the run's last step 8" in result.stdout


def test_without_a_record_the_plans_estimate_is_used_and_said(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    mark_exported(target, run_dir, 2)
    result = run(run_dir, target, step=2, record=tmp_path / "absent.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no usable record at {tmp_path / 'absent.json'}" in result.stdout
    assert "the plan's estimate (--length)" in result.stdout
    assert json.loads((run_dir / run_grpo.TRAINING_DONE_FILE).read_text())["step"] == 2


@pytest.mark.parametrize(
    "length",
    [None, {"last_step": "8"}, {"last_step": True}, {"last_step": -1}, "8"],
)
def test_a_record_without_a_usable_last_step_gives_no_length(
    tmp_path: Path, length: object
) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": 1, "ok": True, "length": length}))
    assert run_grpo.record_length(path) is None

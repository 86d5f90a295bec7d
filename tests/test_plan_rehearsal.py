"""`python -m tools.plan <stack> --rehearse`: the GRPO job through verl's own code in the local verl
virtualenv (planning/rehearsal.py), its refusal an exit status 2 with verl's message and a fix the
plan accepts, its step count the one the whole run is priced at."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from config import run_inputs
from planning.rehearsal import rehearsal_site
from tests.support.require import require, verl_python
from tools import plan as plan_cli

EXTRA = "verl-gke:job.extraOverrides"


def planned(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the a3u plan (verl v0.6.1)."""
    code = plan_cli.main(["a3u", *args])
    out, err = capsys.readouterr()
    return code, out, err


def rehearsed(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """planned(...) with --rehearse, in the local verl 0.6.1 virtualenv."""
    verl_python("0.6.1")
    site = rehearsal_site("0.6.1")
    require(site is None or site.is_dir(), f"no {site} (requirements-rehearsal-0.6.1.txt)")
    return planned(capsys, "--rehearse", *args)


def line_of(text: str, marker: str) -> str:
    (line,) = [x for x in text.splitlines() if marker in x]
    return line


def test_the_whole_run_is_priced_at_verls_count_from_the_rehearsal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """trainer.total_training_steps=0: the program's estimate is 0 steps; verl 0.6.1's fit()
    trains and saves one (its loop checks the step after training it)."""
    zero = f"{EXTRA}[0]=trainer.total_training_steps=0"
    code, out, err = planned(capsys, "--set", zero)
    assert code == 0, err
    assert "Rehearsal (offline): not run (--rehearse" in out
    assert "training: 0 min x " in out and "(0 steps (the program's estimate" in out
    code, out, err = rehearsed(capsys, "--set", zero)
    assert code == 0, err
    assert line_of(out, "Rehearsal (offline").endswith(": ok")
    rows = f"{run_inputs.GSM8K_ROWS['train']:,} rows"
    assert rows in line_of(out, "  rows: ")
    assert "fit() ends at step 1 (saves at 1)" in line_of(out, "  rows: ")
    assert "not checked here: the model's own tokenizer and chat template" in out
    run = line_of(out, "    training:")
    assert "(1 steps (verl's own count, from the rehearsal's record:" in run
    assert "verl saves at 1 (the rehearsal's record)" in line_of(out, "checkpoints in the kept")


def test_without_a_local_verl_virtualenv_the_plan_says_it_could_not_rehearse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERL_GKE_VERL_VENVS", str(tmp_path))
    code, out, err = planned(capsys, "--rehearse")
    assert code == 0, err
    said = line_of(out, "Rehearsal (offline")
    assert f"could not rehearse: no verl 0.6.1 virtualenv ({tmp_path}/0.6.1/bin/python" in said
    assert "the program's estimate" in line_of(out, "    training:")


def test_a_job_verl_refuses_exits_2_with_verls_message_and_an_accepted_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """verl 0.6.1's vLLMRollout refuses max_model_len above max_num_batched_tokens (8192 in the
    job) with chunked prefill on; the fix the plan prints is accepted by the plan."""
    typed = f"{EXTRA}[0]=actor_rollout_ref.rollout.max_model_len=16384"
    code, out, err = rehearsed(capsys, "--set", typed)
    assert code == 2, out
    assert "Plan for stack" not in out
    assert err.startswith("error: the offline rehearsal (verl 0.6.1's own code")
    assert f"- {EXTRA}[0] = 16384: ValueError: Enable chunked prefill" in err
    fix = shlex.split(err.split("Fix: ", 1)[1].strip())
    assert fix[0] == "--set"
    assert fix[1].startswith(f"{EXTRA}[1]=actor_rollout_ref.rollout.max_num_batched_tokens=")
    code, out, err = rehearsed(capsys, "--set", typed, *fix[:2])
    assert code == 0, err
    assert line_of(out, "Rehearsal (offline").endswith(": ok")


def test_a_length_the_example_rows_cannot_decide_is_not_a_refusal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dataset in the bucket has a size only the data-prep Job sees: verl's length problem on
    the example rows (one batch) is shown as not checked, not refused."""
    code, out, err = rehearsed(
        capsys,
        "--set",
        "verl-gke:dataset=gs://example-project-verl-a3u/mydata",
        "--set",
        f"{EXTRA}[0]=trainer.total_training_steps=100",
    )
    assert code == 0, err
    unchecked = line_of(out, "not checked here: the run's length")
    assert "before total_training_steps = 100 is reached" in unchecked
    assert "only the data-prep Job sees" in unchecked
    assert "(100 steps (the program's estimate" in out


def test_an_item_past_the_end_of_a_list_field_names_the_next_index(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # pulumi/pulumi map.go Map.Set: an index may be at most the list's length.
    assert plan_cli.main(["a3u", "--set", f"{EXTRA}[3]=trainer.total_epochs=1"]) == 2
    err = capsys.readouterr().err
    assert f"the list has 0 item(s); the next is {EXTRA}[0]" in err

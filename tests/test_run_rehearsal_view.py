"""`python -m tools.run <stack>` shows the rehearsal's answers from the stack outputs
(__main__.py exports jobs/rehearsal_verdict.py's outputs; tools/run_target.py Rehearsal)."""

from __future__ import annotations

from tools import run as run_tool
from tools.run_target import Rehearsal

OUTPUTS = {
    "rehearsalRecord": "gs://b/rehearsals/a4/exp/0123456789ab.json",
    "rehearsalSteps": 58,
    "rehearsalSaveSteps": [10, 20, 30, 40, 50, 58],
    "rehearsalRows": {
        "train_rows": 7473, "train_rows_kept": 7400, "val_rows": 1319, "val_rows_kept": 1319,
    },
    "rehearsalRewardSamples": [
        {"row": 0, "ground_truth": "72", "score_correct": 1.0, "score_wrong": 0.0}
    ],
    "rehearsalVersions": {
        "verl": "0.6.1", "vllm": "0.10.2", "transformers": "4.57.1", "torch": None,
    },
    "rehearsalProblems": [],
}  # fmt: skip
LOG = "step:2 - training/global_step:2 - critic/score/mean:0.5 - timing_s/step:80.0\n"


def view() -> run_tool.RunView:
    return run_tool.summarize("a4-grpo-1", "http://x", "RUNNING", None, 0, None, LOG, "whole log")


def rows(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        label, _, value = line.partition("  ")
        found.setdefault(label.strip(), []).append(value.strip())
    return found


def test_the_status_shows_the_rehearsals_answers_and_verls_step_count() -> None:
    rehearsal = Rehearsal.from_outputs(OUTPUTS)
    assert rehearsal is not None
    shown = rows(run_tool.render_text(view(), None, rehearsal))
    # The log names no total: verl's own count from the rehearsal does.
    assert shown["step"] == ["2 of 58"]
    assert shown["run length"] == ["58 steps (verl's count); saves at 10, 20, 30, 40, 50, 58"]
    assert shown["rows kept"] == ["train 7400 of 7473, val 1319 of 1319"]
    assert shown["reward sample"] == [
        "row 0: right answer 1.0, wrong answer 0.0 (ground truth '72')"
    ]
    assert shown["image versions"] == ["transformers 4.57.1, verl 0.6.1, vllm 0.10.2"]
    assert shown["rehearsal record"] == [OUTPUTS["rehearsalRecord"]]
    assert run_tool.to_json(view(), rehearsal)["rehearsal"]["steps"] == 58


def test_a_stack_from_before_the_rehearsal_shows_none() -> None:
    assert Rehearsal.from_outputs({"jobSubmissionId": "x"}) is None
    assert "rehearsal" not in run_tool.render_text(view())


def test_problems_are_listed() -> None:
    rehearsal = Rehearsal.from_outputs({**OUTPUTS, "rehearsalProblems": ["a: b. Fix: c"]})
    assert rehearsal is not None
    assert rows(run_tool.render_text(view(), None, rehearsal))["rehearsal problem"] == [
        "a: b. Fix: c"
    ]

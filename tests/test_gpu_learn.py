"""bench/gpu_learn.py, the learning run's bench: its CPU path run as a user runs it, its task, and
the figures it reads from verl's step lines.

- `--device cpu`: the learning job and the 0.5B memory job (training.assembly for 1 node x 1 GPU)
  pass the provider's Check in the real `python -m pulumi.dynamic` host and compose in verl
  0.6.1's config; in verl 0.9.0's virtualenv the task's rows, tokenizer and a few warm-up steps
  on CPU, and the data-prep Job's own command on them.
- The task: a fixed split with no problem in both halves, the warm-up's biased answers.
- The figures: a step repeated after the resume takes the later attempt's value; the rise is the
  last three steps' mean reward less the first three's.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_learn
from bench import gpu_learn_task as task
from tests.support.require import verl_python

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One CPU run of the bench for the tests that read it."""
    folder = tmp_path_factory.mktemp("gpu-learn-cpu")
    out = folder / "report.json"
    command = [
        sys.executable, str(REPO / "bench" / "gpu_learn.py"), "--device", "cpu",
        "--out", str(out), "--work", str(folder / "work"),
        "--verl-061", str(verl_python("0.6.1")), "--verl-090", str(verl_python("0.9.0")),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.integration
def test_both_jobs_pass_the_providers_check_and_compose_in_verl_061(
    report: dict[str, Any],
) -> None:
    learn, memory = report["plan"]["learn"], report["plan"]["memory"]
    assert learn["check_failures"] == [] and memory["check_failures"] == []
    assert f"trainer.total_epochs={gpu_learn.EPOCHS}" in learn["overrides"]
    assert any(o.startswith("custom_reward_function.path=") for o in learn["overrides"])
    assert learn["evaluation"] == task.TEST_PROBLEMS  # the whole held-out split
    assert memory["evaluation"] is False  # no export, so nothing to evaluate
    assert "--evaluation" in learn["entrypoint"] and "--evaluation" not in memory["entrypoint"]
    verdicts = report["compose"]["results"]
    assert {name: v["ok"] for name, v in verdicts.items()} == {"learn": True, "memory": True}


@pytest.mark.integration
def test_data_prep_writes_the_task_rows_and_the_warmed_up_model(report: dict[str, Any]) -> None:
    data = report["data"]
    assert "failed" not in data, data.get("failed")
    dataset = data["markers"]["dataset"]
    assert dataset["inputs"]["dataset"] == task.DATASET
    assert dataset["outputs"]["rows"] == {"train.parquet": 350, "test.parquet": 150}
    assert data["markers"]["model-learn-qwen2"]["outputs"]["weight_files"] == 1
    warm = data["warm_up"]
    assert warm["loss_last"] < warm["loss_first"]
    assert data["vocabulary"] <= json.loads((REPO / task.MODEL_CONFIG).read_text())["vocab_size"]


def test_the_held_out_problems_are_not_trained_on() -> None:
    train, test = task.problems()
    assert len(test) == task.TEST_PROBLEMS and len(train) + len(test) == 500
    assert not {(p.a, p.b) for p in train} & {(p.a, p.b) for p in test}
    assert task.problems() == (train, test)  # seeded: every run trains and tests alike


def test_the_warm_up_answers_the_sum_a_quarter_of_the_time_else_negated() -> None:
    rng = random.Random(1)
    problem = task.Problem(12, 7)
    answers = [task.warm_answer(problem, rng) for _ in range(4000)]
    assert set(answers) == {19, -19}
    assert abs(answers.count(19) / len(answers) - task.CORRECT_SHARE) < 0.03


def _step_line(step: int, score: float, grad: float) -> str:
    return (
        f"(TaskRunner pid=7) step:{step} - actor/grad_norm:np.float64({grad}) - "
        f"critic/score/mean:np.float64({score}) - timing_s/step:np.float64(1.5)"
    )


def test_a_step_repeated_after_the_resume_takes_the_later_attempts_value() -> None:
    first = "\n".join(_step_line(s, 0.1 * s, 1.0) for s in range(1, 5))
    second = "\n".join(_step_line(s, 0.5, 2.0) for s in range(3, 8))
    result: dict[str, Any] = {}
    gpu_learn.learning_figures([first, second], result)
    assert list(result["reward_mean_by_step"]) == [1, 2, 3, 4, 5, 6, 7]
    assert result["reward_mean_by_step"][3] == 0.5 and result["grad_norm_by_step"][2] == 1.0
    assert result["reward_first3_mean"] == round((0.1 + 0.2 + 0.5) / 3, 4)
    assert result["reward_last3_mean"] == 0.5
    assert result["reward_rise"] == round(0.5 - (0.1 + 0.2 + 0.5) / 3, 4)
    assert result["step_seconds_median_after_first"] == 1.5


@pytest.mark.integration
def test_the_stand_in_rollout_answers_as_the_model_does_greedily(tmp_path: Path) -> None:
    """verl 0.6.1's HFRollout passes position_ids to generate(); transformers 4.57.1 does not
    advance given positions, so answers come out garbled unless the stand-in leaves them out."""
    python = verl_python("0.6.1")
    model = tmp_path / "model"
    build = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from bench import gpu_learn_task as t; m = Path(sys.argv[2]);"
        "t.warm_up(m, t.build_tokenizer(m), 40, 'cpu', batch=32)"
    )
    built = subprocess.run(
        [str(python), "-c", build, str(REPO), str(model)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-3000:]
    request = {
        "model": str(model),
        "prompts": ["What is 3 plus 4?", "What is 41 plus 9?", "What is 17 plus 5?"],
        "max_new_tokens": 8,
    }
    done = subprocess.run(
        [str(python), str(REPO / "verl_scripts" / "standin_generation_check.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers["standin"] == answers["alone"]
    assert answers["alone"][0].startswith("####")  # the warm-up's format: a real answer
    assert answers["positions_passed"] != answers["alone"]

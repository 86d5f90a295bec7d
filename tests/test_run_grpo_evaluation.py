"""The GRPO runner evaluates the export (payloads/export/run_grpo.py -> evaluate.py), for real: the
runner as a subprocess with the stand-in trainer of tests/test_run_grpo.py, the real export
script (the export already done: its marker), and the real evaluate.py with a scripted
generation backend (tests/support/scripted_backend.py), the tiny tokenizer and verl's own reward
loader. The runner runs under verl 0.9.0's virtualenv python, which has pyarrow, transformers and
verl (the runner itself is stdlib-only); evaluate.py runs here instead of as a Ray task
(`--on-node=`).

Rules it encodes:
- the evaluation runs after the export, and its summary is the job's last tagged line (the line
  the job provider keeps as the job's result);
- the held-out prompts are those verl keeps under the job's max_prompt_length (a longer one is
  dropped before --prompts are taken, and counted), rendered with the job's
  data.apply_chat_template_kwargs, sampled with the rollout's top_p and top_k;
- a retried job (training finished, the export's marker unchanged) reuses the report;
- a failed evaluation leaves the export and the job's exit status 0, and its report says why;
- a failed export is not evaluated.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from payloads.export import eval_backends, eval_report, evaluate, export_model
from tests.support import scripted_backend
from tests.support.ray_head import RayHead
from tests.support.require import verl_python
from tests.test_export_model import wait_for_end
from tests.test_run_grpo import IDENTITY, LENGTH, TRAINER, mark_exported

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "payloads" / "export" / "run_grpo.py"

MAKE_INPUTS = """
import sys
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
sys.path.insert(0, sys.argv[1])
from tests.support import tiny_model
root = Path(sys.argv[2])
tokenizer = tiny_model.build_tokenizer(root / "base")
# Qwen3's switch, as its chat template reads it: enable_thinking=False adds to the prompt.
tokenizer.chat_template = tiny_model.CHAT_TEMPLATE.replace(
    "<|im_start|>assistant\\n{% endif %}",
    "<|im_start|>assistant\\n{% if enable_thinking is defined and enable_thinking is false %}"
    "the answer is {% endif %}{% endif %}",
)
tokenizer.save_pretrained(root / "base")
rows = [
    {"data_source": "own", "prompt": [{"role": "user", "content": f"what is {i} plus 1 ?"}],
     "reward_model": {"style": "rule", "ground_truth": str(i + 1)}, "extra_info": {"index": i}}
    for i in range(4)
]
# Row 1: a prompt 4 tokens longer than the others (15 rendered, 18 without thinking), which
# verl drops under max_prompt_length 14 (run()'s).
long = [{"role": "user", "content": "what is 1 plus 1 plus 1 plus 1 ?"}]
rows.insert(1, {**rows[0], "prompt": long, "extra_info": {"index": 99}})
pq.write_table(pa.Table.from_pylist(rows), root / "test.parquet")
"""

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip().endswith(ground_truth))
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base model's folder (the tiny tokenizer), a held-out parquet, a reward file."""
    root = tmp_path_factory.mktemp("eval-inputs")
    subprocess.run(
        [str(verl_python("0.9.0")), "-c", MAKE_INPUTS, str(REPO), str(root)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (root / "reward.py").write_text(REWARD)
    # The base model answers prompts 0 and 1 greedily and one of its two samples right.
    base = [
        {"greedy": str(i + 1) if i < 2 else "0", "samples": [str(i + 1), "9"]} for i in range(4)
    ]
    (root / "base" / scripted_backend.ANSWERS).write_text(json.dumps(base))
    return root


def export_folder(inputs: Path, target: Path, run_dir: Path, step: int) -> None:
    """A finished export: the tokenizer, the scripted answers (all right), and the marker."""
    mark_exported(target, run_dir, step)
    for name in os.listdir(inputs / "base"):
        if name not in (scripted_backend.ANSWERS, scripted_backend.PROMPTS):
            (target / name).write_bytes((inputs / "base" / name).read_bytes())
    trained = [{"greedy": str(i + 1), "samples": [str(i + 1)] * 2} for i in range(4)]
    (target / scripted_backend.ANSWERS).write_text(json.dumps(trained))


def run(
    inputs: Path, run_dir: Path, target: Path, **options: Any
) -> subprocess.CompletedProcess[str]:
    evaluation = {
        "base": str(inputs / "base"),
        "data": str(inputs / "test.parquet"),
        "samples": 2,
        "temperature": 0.7,
        "max_new_tokens": 16,
        "max_prompt_length": 14,
        "top_p": 0.9,
        "top_k": 5,
        "chat_template_overrides": ["+data.apply_chat_template_kwargs.enable_thinking=False"],
        "tensor_parallel": 1,
        "reward_file": str(inputs / "reward.py"),
        "reward_name": "compute_score",
        "prompts": 3,
        **options,
    }
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        eval_backends.BACKEND_ENV: "tests.support.scripted_backend:ScriptedGenerator",
    }
    python = str(verl_python("0.9.0"))
    command = [
        python, str(RUNNER), "--run-dir", str(run_dir), "--identity", json.dumps(IDENTITY),
        "--export-target", str(target), "--length", json.dumps(LENGTH),
        "--evaluation", json.dumps(evaluation), "--evaluation-option=--on-node=",
        "--", python, "-c", TRAINER, str(run_dir), "2", "0",
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300, check=False
    )


def calls(folder: Path) -> int:
    path = folder / scripted_backend.PROMPTS
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_export_is_evaluated_after_it_and_a_retried_job_reuses_the_report(
    inputs: Path, tmp_path: Path
) -> None:
    run_dir, target = tmp_path / "ckpt" / "w16-abcd1234", tmp_path / "models" / "exp"
    export_folder(inputs, target, run_dir, 2)
    first = run(inputs, run_dir, target)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert out.index("run_grpo: export:") < out.index("run_grpo: evaluation:")
    summary = evaluate.find_summary(out)
    assert summary is not None and summary["status"] == "ok"
    # Prompts 0..2: greedy base 2/3, trained 1; mean@2 base 1/2, trained 1.
    assert summary["prompts"] == 3
    assert summary["base"]["greedy"]["mean"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["trained"]["greedy"]["mean"] == 1.0
    assert summary["difference"]["mean_at_k"] == {"mean": 0.5, "low": 0.5, "high": 0.5}
    assert summary["regressed"] is False
    report = json.loads((target / eval_report.REPORT_NAME).read_text())
    assert report["export"]["step"] == 2 and len(report["per_prompt"]) == 3
    # Row 1 is over max_prompt_length: prompts 0..2 are the file's rows 0, 2 and 3.
    assert [row["index"] for row in report["per_prompt"]] == [0, 2, 3]
    assert report["held_out"] == {
        "rows": 5,
        "dropped_over_max_prompt_length": 1,
        "max_prompt_length": 14,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert summary["held_out"] == report["held_out"]
    assert report["per_prompt"][2]["base"]["greedy_answer"] == "0"
    assert report["per_prompt"][2]["trained"]["sample_scores"] == [1.0, 1.0]
    # What the backend was given: verl's rendering (the chat template with the generation
    # prompt; the word-level tokenizer drops whitespace, so compared without it) and settings.
    record = json.loads((inputs / "base" / scripted_backend.PROMPTS).read_text().splitlines()[-1])
    rendered = (
        "<|im_start|>user\nwhat is 0 plus 1 ?<|im_end|>\n<|im_start|>assistant\nthe answer is"
    )
    assert "".join(record["prompts"][0].split()) == "".join(rendered.split())
    assert (record["samples"], record["temperature"], record["max_new_tokens"]) == (2, 0.7, 16)
    assert (record["top_p"], record["top_k"]) == (0.9, 5)

    base_calls = calls(inputs / "base")
    again = run(inputs, run_dir, target)  # the job resubmitted: training done, export done
    assert again.returncode == 0, again.stdout[-3000:]
    assert "already holds this export's evaluation; reused" in again.stdout
    assert evaluate.find_summary(again.stdout)["reused"] is True  # type: ignore[index]
    assert calls(inputs / "base") == base_calls


def test_a_failed_evaluation_keeps_the_export_and_says_why(inputs: Path, tmp_path: Path) -> None:
    run_dir, target = tmp_path / "ckpt" / "w16-abcd1234", tmp_path / "models" / "exp"
    export_folder(inputs, target, run_dir, 2)
    marker = (target / export_model.MARKER).read_text()
    missing = tmp_path / "no-such-split.parquet"  # e.g. a dataset folder without its test split
    result = run(inputs, run_dir, target, data=str(missing))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the evaluation failed" in result.stdout
    assert f"the export in {target} stays as it is" in result.stdout
    summary = evaluate.find_summary(result.stdout)
    assert summary is not None and summary["status"] == "failed"
    assert str(missing) in summary["reason"]
    report = json.loads((target / eval_report.REPORT_NAME).read_text())
    assert report["status"] == "failed" and str(missing) in report["reason"]
    assert (target / export_model.MARKER).read_text() == marker


def test_a_failed_export_is_not_evaluated(inputs: Path, tmp_path: Path) -> None:
    run_dir, target = tmp_path / "ckpt" / "w16-abcd1234", tmp_path / "models" / "exp"
    target.parent.mkdir(parents=True)
    target.write_text("a file where the export folder belongs")  # the export fails
    result = run(inputs, run_dir, target)
    assert result.returncode != 0
    assert "run_grpo: evaluation:" not in result.stdout
    assert evaluate.find_summary(result.stdout) is None


# --- on a Ray node -------------------------------------------------------------------------------


def test_on_a_ray_node_the_task_evaluates_and_the_driver_prints_its_summary(
    inputs: Path, tmp_path: Path, head: RayHead
) -> None:
    """`--on-node CPU` on a local head (the product asks for GPU): the driver submits this CLI as
    a Ray task, which runs in the job's working_dir on the node and writes the report; the
    driver's own last line is the worker's summary (a task's lines reach the log prefixed)."""
    from ray.job_submission import JobSubmissionClient

    target = tmp_path / "models" / "exp"
    export_folder(inputs, target, tmp_path / "ckpt", 2)
    command = [
        sys.executable, "evaluate.py", "--base", str(inputs / "base"), "--trained", str(target),
        "--data", str(inputs / "test.parquet"), "--reward-file", str(inputs / "reward.py"),
        "--prompts", "2", "--samples", "1", "--max-new-tokens", "8", "--max-prompt-length", "14",
        "--on-node", "CPU",
    ]  # fmt: skip
    env = {
        "PYTHONPATH": str(REPO),
        eval_backends.BACKEND_ENV: "tests.support.scripted_backend:ScriptedGenerator",
        evaluate.WORKER_PYTHON_ENV: str(verl_python("0.9.0")),
        "VERL_GKE_EVAL_WAIT_REPORT_S": "1",
    }
    client = JobSubmissionClient(head.dashboard_url)
    job_id = client.submit_job(
        entrypoint=shlex.join(command),
        runtime_env={"working_dir": str(RUNNER.parent), "env_vars": env},
    )
    status, log = wait_for_end(head, job_id)
    assert status == "SUCCEEDED", log[-5000:]
    summary = evaluate.find_summary(log)
    assert summary is not None and summary["status"] == "ok", log[-5000:]
    assert summary["prompts"] == 2 and summary["trained"]["greedy"]["mean"] == 1.0
    assert "(_run_on_worker pid=" in log
    report = json.loads((target / eval_report.REPORT_NAME).read_text())
    assert report["status"] == "ok" and len(report["per_prompt"]) == 2

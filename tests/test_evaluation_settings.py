"""`verl-gke:evaluation` from settings to the job and back to the stack outputs.

- Bad values are refused before anything is created, each with a fix that is itself accepted.
- The runner gets evaluate.py's flags from the spec: the base model is the job's model path, the
  held-out set the job's data.val_files, the answers as long as data.max_response_length, the
  tensor parallelism the rollout's, the temperature, top_p and top_k the rollout's (verl's
  rollout.yaml defaults 1.0, 1 and -1, or the job's actor_rollout_ref.rollout.* overrides), the
  prompts as long as data.max_prompt_length (verl drops longer ones), the chat template's kwargs
  the job's data.apply_chat_template_kwargs overrides, the reward the run's own; evaluate.py's
  own parser accepts them.
- The plan says what the evaluation costs; the job's result (evaluate.py's summary line) becomes
  the evaluation outputs, and an export below its base beyond the interval is a warning in
  `pulumi up`'s log, not only an output.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from config.settings import SettingsError, StackSettings, load_settings
from payloads.export import eval_report, evaluate, run_grpo
from planning import offline_engine
from planning.offline_engine import UNKNOWN_OUTPUT, run_stack
from pricing.billing import price_book
from pricing.whole_run import evaluation_line
from tests.program import REAL, plan
from tools import run as tools_run
from training import model_evaluation
from training.assembly import training_job

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
KEY = "verl-gke:evaluation"


def settings(stack: str = "a4", **config: str) -> StackSettings:
    return load_settings(stack, {**REAL, **config}, offline=False).settings


def evaluation_flags(entrypoint: str) -> dict[str, Any] | None:
    words = shlex.split(entrypoint)
    runner = words[: words.index("--")]
    if "--evaluation" not in runner:
        return None
    return json.loads(runner[runner.index("--evaluation") + 1])


# --- validation ----------------------------------------------------------------------------------


def apply_fixes(raw: dict[str, Any], message: str) -> dict[str, Any]:
    """The object after every `pulumi config set/rm --path verl-gke:evaluation.X` of the message."""
    fixed = dict(raw)
    for field in re.findall(rf"pulumi config rm --path {KEY}\.(\w+) -s", message):
        fixed.pop(field, None)
    for field, value in re.findall(rf"pulumi config set --path {KEY}\.(\w+) (\S+) -s", message):
        fixed[field] = json.loads(value)
    return fixed


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"samples": -1}, f"{KEY}.samples = -1"),
        ({"samples": 100}, f"{KEY}.samples = 100"),
        ({"prompts": 0}, f"{KEY}.prompts = 0"),
        ({"temperature": 0}, f"{KEY}.temperature = 0"),
        ({"temperature": 9.5, "samples": "many"}, f"{KEY}.temperature = 9.5"),
        ({"enabled": "sometimes"}, f"{KEY}.enabled = 'sometimes'"),
        ({"sample": 8}, f"{KEY}.sample: not a field of {KEY}"),
    ],
)
def test_bad_values_are_refused_with_a_fix_that_is_accepted(raw: dict[str, Any], says: str) -> None:
    with pytest.raises(SettingsError) as refused:
        settings(**{KEY: json.dumps(raw)})
    message = str(refused.value)
    assert says in message and "nothing was created" in message
    fixed = apply_fixes(raw, message)
    assert fixed != raw
    settings(**{KEY: json.dumps(fixed)})  # accepted


def test_the_setting_is_an_undeclared_object_key_set_field_by_field() -> None:
    # Pulumi.yaml lists it among the object keys (maintenance/project_config.py): set with --path.
    from maintenance.project_config import declarations

    declared, undeclared = declarations()
    assert KEY in undeclared and KEY not in declared


# --- what the runner gets ------------------------------------------------------------------------


def test_the_runner_evaluates_the_export_with_the_jobs_own_values() -> None:
    stack = settings("a4")
    job = training_job(stack)
    spec = job.spec
    flags = evaluation_flags(job.entrypoint)
    assert flags == {
        "base": spec.model_path,
        "data": "/data/gsm8k/test.parquet",
        "samples": 4,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": spec.max_response_length,
        "max_prompt_length": spec.max_prompt_length,
        "tensor_parallel": spec.rollout_tensor_parallel_size,
        "out": f"/data/models/{spec.experiment_name}/{eval_report.REPORT_NAME}",
    }
    assert flags["data"] == spec.val_files
    # evaluate.py's own parser takes what the runner passes on (run_grpo.evaluation_argv).
    argv = ["--trained", "/data/models/x", *run_grpo.evaluation_argv(flags)]
    parsed = evaluate.parser().parse_args(argv)
    assert parsed.max_new_tokens == spec.max_response_length
    assert parsed.max_prompt_length == spec.max_prompt_length
    assert parsed.tensor_parallel == spec.rollout_tensor_parallel_size
    assert parsed.prompts is None  # every row of the held-out split


def test_settings_and_the_rollout_temperature_reach_the_flags() -> None:
    override = {
        "verl-gke:job": json.dumps(
            {"extraOverrides": ["actor_rollout_ref.rollout.temperature=0.6"]}
        )
    }
    assert evaluation_flags(training_job(settings(**override)).entrypoint)["temperature"] == 0.6  # type: ignore[index]
    chosen = {KEY: json.dumps({"samples": 8, "prompts": 200, "temperature": 0.9}), **override}
    flags = evaluation_flags(training_job(settings(**chosen)).entrypoint)
    assert flags is not None
    assert (flags["samples"], flags["prompts"], flags["temperature"]) == (8, 200, 0.9)


def test_the_rollouts_top_p_top_k_and_chat_template_kwargs_reach_the_flags() -> None:
    overrides = [
        "actor_rollout_ref.rollout.top_p=0.95",
        "actor_rollout_ref.rollout.top_k=20",
        "+data.apply_chat_template_kwargs.enable_thinking=False",
    ]
    job = training_job(settings(**{"verl-gke:job": json.dumps({"extraOverrides": overrides})}))
    flags = evaluation_flags(job.entrypoint)
    assert flags is not None
    assert (flags["top_p"], flags["top_k"]) == (0.95, 20)
    assert flags["chat_template_overrides"] == [
        "+data.apply_chat_template_kwargs.enable_thinking=False"
    ]
    parsed = evaluate.parser().parse_args(
        ["--trained", "/data/models/x", *run_grpo.evaluation_argv(flags)]
    )
    assert (parsed.top_p, parsed.top_k) == (0.95, 20)
    assert parsed.chat_template_overrides == flags["chat_template_overrides"]


def test_the_runs_own_reward_is_the_evaluations() -> None:
    stack = settings(**{"verl-gke:reward": "tests/data/run_inputs/rewards.py:exact"})
    flags = evaluation_flags(training_job(stack).entrypoint)
    assert flags is not None and flags["reward_name"] == "exact"
    assert flags["reward_file"].startswith("/data/rewards/") and flags["reward_file"].endswith(
        ".py"
    )
    # The same file and function verl's trainer gets (custom_reward_function.path / .name).
    assert f"custom_reward_function.path={flags['reward_file']}" in training_job(stack).entrypoint


@pytest.mark.parametrize(
    "config", [{KEY: json.dumps({"enabled": False})}, {"verl-gke:exportModel": "false"}]
)
def test_no_evaluation_when_turned_off_or_nothing_is_exported(config: dict[str, str]) -> None:
    job = training_job(settings(**config))
    assert evaluation_flags(job.entrypoint) is None and job.evaluation is None
    assert model_evaluation.plan_line(None, job.spec).startswith("Evaluation: off")


def test_a_lora_run_is_not_evaluated() -> None:
    # Its export holds the untrained base weights beside lora_adapter/ (export_model.py).
    lora = {
        "verl-gke:job": json.dumps({"extraOverrides": ["actor_rollout_ref.model.lora_rank=32"]})
    }
    job = training_job(settings(**lora))
    assert "--lora-alpha" in job.entrypoint
    assert evaluation_flags(job.entrypoint) is None
    assert model_evaluation.plan_line(job.evaluation, job.spec).startswith(
        "Evaluation: none for a LoRA run"
    )


# --- the plan ------------------------------------------------------------------------------------


def test_the_plan_says_what_the_evaluation_generates_and_costs() -> None:
    result = plan("a4", "standard")
    text = "\n".join(result.messages)
    stack = settings("a4")
    job = training_job(stack)
    assert f"each answer 1,319 prompts of {job.spec.val_files}" in text
    tokens = 1319 * (1 + 4) * job.spec.max_response_length * 2
    line = evaluation_line(stack, price_book(stack), job.evaluation, job.model.arch.num_params)
    assert f"at most {tokens:,} tokens (1,319 prompts x (1 + 4) x" in line
    assert "estimate" in line and "not measured" in line
    fewer = settings("a4", **{KEY: json.dumps({"prompts": 100, "samples": 0})})
    job = training_job(fewer)
    line = evaluation_line(fewer, price_book(fewer), job.evaluation, job.model.arch.num_params)
    assert f"at most {100 * 1 * job.spec.max_response_length * 2:,} tokens" in line


# --- outputs and the warning ---------------------------------------------------------------------


def test_the_job_result_is_the_evaluation_summary() -> None:
    result = plan("a4", "standard")
    grpo = result.one(RAY_JOB, "grpo-job")
    assert grpo.inputs["result_tag"] == eval_report.RESULT_TAG
    assert result.outputs["evaluationReport"] == (
        "gs://acme-ml-prod-verl-a4/models/grpo-qwen2.5-32b-instruct-a4/.verl-gke-eval.json"
    )
    for key in model_evaluation.OUTPUT_KEYS:
        assert result.outputs[key] == UNKNOWN_OUTPUT, key  # known once the job has ended


def summary(regressed: bool) -> dict[str, Any]:
    return {
        "check": eval_report.RESULT_TAG,
        "status": "ok",
        "prompts": 1319,
        "primary": "mean_at_k",
        "interval": eval_report.INTERVAL_TEXT,
        "base": {"mean_at_k": {"mean": 0.61, "low": 0.59, "high": 0.63}},
        "trained": {"mean_at_k": {"mean": 0.52, "low": 0.5, "high": 0.54}},
        "difference": {"mean_at_k": {"mean": -0.09, "low": -0.11, "high": -0.07}},
        "regressed": regressed,
        "report": "/data/models/e/.verl-gke-eval.json",
    }


def with_result(monkeypatch: pytest.MonkeyPatch, result: dict[str, Any]) -> Any:
    answer = offline_engine.OfflineMocks.new_resource

    def finished(self: Any, args: Any) -> tuple[str, dict[str, Any]]:
        resource_id, state = answer(self, args)
        if args.typ == RAY_JOB and args.name == "grpo-job":
            state.update(status="SUCCEEDED", result=result)
        return resource_id, state

    monkeypatch.setattr(offline_engine.OfflineMocks, "new_resource", finished)
    return run_stack("a4", {}, strict=False)


def test_an_export_below_its_base_is_flagged_in_the_outputs_and_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = with_result(monkeypatch, summary(regressed=True))
    outputs = result.outputs
    assert outputs["evaluationStatus"] == "ok"
    assert (outputs["evaluationBaseScore"], outputs["evaluationTrainedScore"]) == (0.61, 0.52)
    assert outputs["evaluationPrompts"] == 1319
    assert outputs["evaluationInterval"]["low"] == -0.11
    assert outputs["evaluationRegressed"] is True
    (warning,) = [w for w in result.notices if "BELOW its base model" in w]
    assert "mean_at_k 0.52 vs 0.61 on 1319 held-out prompts" in warning
    assert outputs["evaluationReport"] in warning


def test_an_export_within_the_interval_is_not_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    result = with_result(monkeypatch, summary(regressed=False))
    assert result.outputs["evaluationRegressed"] is False
    assert not [w for w in result.notices if "evaluation" in w.lower()]


def test_a_failed_evaluation_is_reported_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = {
        "check": eval_report.RESULT_TAG,
        "status": "failed",
        "reason": "vLLM ran out of memory",
    }
    result = with_result(monkeypatch, failed)
    assert result.outputs["evaluationStatus"] == "failed"
    assert result.outputs["evaluationFailure"] == "vLLM ran out of memory"
    assert result.outputs["evaluationBaseScore"] is None
    assert any(
        "evaluation of the export failed: vLLM ran out of memory" in w for w in result.notices
    )


def test_tools_run_shows_the_evaluation_from_the_driver_log() -> None:
    held_out = {"rows": 1319, "dropped_over_max_prompt_length": 2, "max_prompt_length": 256}
    line = json.dumps({**summary(regressed=True), "settings": {"samples": 4}, "held_out": held_out})
    log = f"step:58 - critic/score/mean:0.5\nrun_grpo: evaluation: x against y\n{line}\n"
    view = tools_run.summarize("sid", "http://h", "SUCCEEDED", "", 1, 2, log, "whole log")
    text = tools_run.render_text(view)
    assert "mean@4: base 0.6100, trained 0.5200, trained - base -0.0900" in text
    assert "(95 % interval -0.1100..-0.0700) on 1319 prompts" in text
    assert "BELOW its base model" in text
    assert "2 held-out prompts longer than maxPromptLength 256 dropped" in text
    assert "/data/models/e/.verl-gke-eval.json" in text
    assert tools_run.to_json(view)["evaluation"]["regressed"] is True


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_the_default_sampling_is_verls_rollout_sampling(release: str) -> None:
    """The evaluation samples at the rollout's temperature, top_p and top_k: verl's rollout.yaml
    defaults where the job does not set them (training/model_evaluation.py VERL_ROLLOUT_*)."""
    import subprocess

    import yaml

    from tests.support.require import verl_python

    where = subprocess.run(
        [str(verl_python(release)), "-c", "import verl, os; print(os.path.dirname(verl.__file__))"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    rollout = yaml.safe_load(Path(where, "trainer/config/rollout/rollout.yaml").read_text())
    assert rollout["temperature"] == model_evaluation.VERL_ROLLOUT_TEMPERATURE
    assert rollout["top_p"] == model_evaluation.VERL_ROLLOUT_TOP_P
    assert rollout["top_k"] == model_evaluation.VERL_ROLLOUT_TOP_K

"""The evaluation of the export against its base model (payloads/export/evaluate.py), as the GRPO
job's runner runs it after the export: its arguments, rendered from the spec and
`verl-gke:evaluation` (config/evaluation.py), and what it costs in generated tokens and time.

Values flow settings -> spec -> the runner's `--evaluation` argument; the runner passes them to
evaluate.py as its flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import pulumi

from config import run_inputs
from config.bucket_layout import GSM8K_TEST, bucket_url, eval_report_path
from config.evaluation import KEY as EVALUATION_KEY
from config.settings import StackSettings
from payloads.export import eval_report
from training.grpo_spec import GrpoSpec
from training.run_life import extra_override_value, lora_alpha

Number = TypeVar("Number", int, float)

ROLLOUT_TEMPERATURE_KEY = "actor_rollout_ref.rollout.temperature"
ROLLOUT_TOP_P_KEY = "actor_rollout_ref.rollout.top_p"
ROLLOUT_TOP_K_KEY = "actor_rollout_ref.rollout.top_k"
# verl's default rollout temperature, top_p and top_k (verl/trainer/config/rollout/rollout.yaml,
# v0.6.1 and 0.9.0: 1.0, 1 and -1; top_p 1 and top_k -1 switch both off).
VERL_ROLLOUT_TEMPERATURE = 1.0
VERL_ROLLOUT_TOP_P = 1.0
VERL_ROLLOUT_TOP_K = -1
# verl's data.apply_chat_template_kwargs (verl/trainer/config/data/legacy_data.yaml, v0.6.1 and
# 0.9.0): passed as **kwargs to apply_chat_template by RLHFDataset (rl_dataset.py) and the agent
# loop (0.9.0 experimental/agent_loop/agent_loop.py), e.g. Qwen3's enable_thinking.
CHAT_TEMPLATE_KWARGS_KEY = "data.apply_chat_template_kwargs"
# Dense bf16 tensor-core peak per GPU, FLOP/s (NVIDIA's datasheets: H100/H200 SXM 1,979 TFLOPS
# and B200 4.5 PFLOPS and GB200 5 PFLOPS per GPU, each "with sparsity", i.e. twice the dense).
DENSE_BF16_PEAK = MappingProxyType(
    {"nvidia-h200-141gb": 989e12, "nvidia-b200": 2.25e15, "nvidia-gb200": 2.5e15}
)
# Generation throughput: an ESTIMATE, not measured here. A generated token costs about
# 2 x parameters FLOPs; batched decoding is taken to reach this share of the dense peak.
DECODE_UTILIZATION = 0.10
THROUGHPUT_SOURCE = (
    f"estimate: 2 x parameters FLOPs per token at {DECODE_UTILIZATION:.0%} of the GPUs' dense "
    "bf16 peak, not measured; every answer counted at the full response length, so an upper "
    "bound on tokens; model loading not counted"
)


@dataclass(frozen=True)
class EvaluationPlan:
    """What the runner's evaluation does: evaluate.py's flags, and the sizes that cost."""

    arguments: Mapping[str, Any]
    prompts: int | None  # None: the dataset's split size is not known at plan time
    samples: int
    max_new_tokens: int
    tensor_parallel: int
    report_path: str  # mounted path of the report

    def generated_tokens(self) -> int | None:
        """Most tokens generated: prompts x (1 greedy + k sampled) x response length, x 2 models."""
        if self.prompts is None:
            return None
        return self.prompts * (1 + self.samples) * self.max_new_tokens * 2


def rollout_temperature(spec: GrpoSpec) -> float:
    """actor_rollout_ref.rollout.temperature as the job sets it, else verl's default."""
    return _rollout_number(spec, ROLLOUT_TEMPERATURE_KEY, VERL_ROLLOUT_TEMPERATURE, float)


def rollout_top_p(spec: GrpoSpec) -> float:
    """actor_rollout_ref.rollout.top_p as the job sets it, else verl's default."""
    return _rollout_number(spec, ROLLOUT_TOP_P_KEY, VERL_ROLLOUT_TOP_P, float)


def rollout_top_k(spec: GrpoSpec) -> int:
    """actor_rollout_ref.rollout.top_k as the job sets it, else verl's default."""
    return _rollout_number(spec, ROLLOUT_TOP_K_KEY, VERL_ROLLOUT_TOP_K, int)


def _rollout_number(spec: GrpoSpec, key: str, default: Number, kind: type[Number]) -> Number:
    """The number extraOverrides gives `key`, else `default` (also for a value that is not one
    of `kind`: verl's own config check refuses it before the job starts)."""
    value = extra_override_value(spec, key)
    try:
        return kind(value) if value is not None else default
    except ValueError:
        return default


def chat_template_overrides(spec: GrpoSpec) -> list[str]:
    """The job's extraOverrides of data.apply_chat_template_kwargs (the whole mapping or one of
    its keys), as given: evaluate.py composes them with verl's config as the job does."""
    return [
        override
        for override in spec.extra_overrides
        if (key := override.lstrip("+").split("=", 1)[0]) == CHAT_TEMPLATE_KWARGS_KEY
        or key.startswith(f"{CHAT_TEMPLATE_KWARGS_KEY}.")
    ]


def held_out_rows(settings: StackSettings) -> int | None:
    """Rows of the held-out split known at plan time: GSM8K's test split."""
    dataset = run_inputs.dataset_of(settings)
    return run_inputs.GSM8K_ROWS["test"] if dataset.val_files == GSM8K_TEST else None


def evaluation_plan(spec: GrpoSpec, settings: StackSettings) -> EvaluationPlan | None:
    """None when there is nothing to evaluate (no export), the user turned it off, or the run
    trains LoRA: its export holds the untrained base weights beside the adapter
    (payloads/export/export_model.py lora_contents), and evaluate.py loads no adapter."""
    chosen = settings.evaluation_settings
    if not (settings.export_model and chosen.enabled) or lora_alpha(spec) is not None:
        return None
    temperature = chosen.temperature or rollout_temperature(spec)
    arguments: dict[str, Any] = {
        "base": spec.model_path,
        "data": spec.val_files,
        "samples": chosen.samples,
        "temperature": temperature,
        "top_p": rollout_top_p(spec),
        "top_k": rollout_top_k(spec),
        "max_new_tokens": spec.max_response_length,
        "max_prompt_length": spec.max_prompt_length,
        "tensor_parallel": spec.rollout_tensor_parallel_size,
        "out": eval_report_path(spec.experiment_name),
    }
    if chosen.prompts is not None:
        arguments["prompts"] = chosen.prompts
    if overrides := chat_template_overrides(spec):
        arguments["chat_template_overrides"] = overrides
    reward = run_inputs.reward_of(settings)
    if reward is not None:
        arguments["reward_file"] = reward.mounted_path
        arguments["reward_name"] = reward.function
    rows = held_out_rows(settings)
    prompts = (
        chosen.prompts if rows is None or chosen.prompts is None else min(rows, chosen.prompts)
    )
    return EvaluationPlan(
        arguments=MappingProxyType(arguments),
        prompts=prompts if prompts is not None else rows,
        samples=chosen.samples,
        max_new_tokens=spec.max_response_length,
        tensor_parallel=spec.rollout_tensor_parallel_size,
        report_path=eval_report_path(spec.experiment_name),
    )


def generation_hours(plan: EvaluationPlan, num_params: int, gpu_type: str) -> float | None:
    """Hours of generation at the estimated throughput on the plan's tensor-parallel GPUs."""
    tokens = plan.generated_tokens()
    peak = DENSE_BF16_PEAK.get(gpu_type)
    if tokens is None or peak is None or num_params <= 0:
        return None
    per_second = plan.tensor_parallel * peak * DECODE_UTILIZATION / (2 * num_params)
    return tokens / per_second / 3600


def plan_line(plan: EvaluationPlan | None, spec: GrpoSpec) -> str:
    """What the evaluation does, for the run block."""
    if plan is None and lora_alpha(spec) is not None:
        return (
            "Evaluation: none for a LoRA run (its export is the untrained base model + the "
            "adapter; the evaluation loads no adapter)"
        )
    if plan is None:
        return (
            f"Evaluation: off ({EVALUATION_KEY}.enabled is false, or verl-gke:exportModel is false)"
        )
    prompts = (
        f"{plan.prompts:,} prompts" if plan.prompts is not None else "every prompt"
    ) + f" of {spec.val_files}"
    return (
        f"Evaluation: the export and {spec.model_path} each answer {prompts}, greedy and "
        f"{plan.samples} samples at temperature {plan.arguments['temperature']:g}, up to "
        f"{plan.max_new_tokens} tokens, scored by the run's reward; report "
        f"{plan.report_path} ({EVALUATION_KEY})"
    )


# --- the result: the runner's summary line, read back by the job provider ------------------------

# The GRPO job's result tag: evaluate.py prints its summary as one JSON line {"check": RESULT_TAG}
# and the job provider (jobs/ray_job.py find_tagged_result) keeps the last one as `result`.
RESULT_TAG = eval_report.RESULT_TAG


def _primary(result: Mapping[str, Any], part: str) -> Mapping[str, Any]:
    return (result.get(part) or {}).get(result.get("primary") or "", {}) or {}


def evaluation_outputs(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stack outputs of the evaluation (None each while there is no result)."""
    ok = result is not None and result.get("status") == "ok"
    if result is None:
        return {key: None for key in OUTPUT_KEYS}
    difference = _primary(result, "difference")
    return {
        "evaluationStatus": result.get("status"),
        "evaluationFailure": None if ok else result.get("reason"),
        "evaluationMetric": result.get("primary") if ok else None,
        "evaluationPrompts": _count(result.get("prompts")) if ok else None,
        "evaluationBaseScore": _primary(result, "base").get("mean") if ok else None,
        "evaluationTrainedScore": _primary(result, "trained").get("mean") if ok else None,
        "evaluationInterval": {
            "difference": difference.get("mean"),
            "low": difference.get("low"),
            "high": difference.get("high"),
            "what": result.get("interval"),
        }
        if ok
        else None,
        "evaluationRegressed": bool(result.get("regressed")) if ok else None,
    }


OUTPUT_KEYS = (
    "evaluationStatus",
    "evaluationFailure",
    "evaluationMetric",
    "evaluationPrompts",
    "evaluationBaseScore",
    "evaluationTrainedScore",
    "evaluationInterval",
    "evaluationRegressed",
)


def regression_warning(result: Mapping[str, Any] | None, report_url: str | None) -> str | None:
    """The warning for `pulumi up`'s log: an export below its base model beyond the interval,
    or an evaluation that failed (the export stays either way)."""
    if result is None:
        return None
    where = f" Report: {report_url}." if report_url else ""
    if result.get("status") != "ok":
        return (
            f"The evaluation of the export failed: {str(result.get('reason'))[:2000]}. The "
            f"exported model stays; it was not compared with its base model.{where}"
        )
    if not result.get("regressed"):
        return None
    metric = result.get("primary")
    diff = _primary(result, "difference")
    return (
        f"The exported model scores BELOW its base model beyond the 95 % interval: {metric} "
        f"{_primary(result, 'trained').get('mean')} vs {_primary(result, 'base').get('mean')} "
        f"on {_count(result.get('prompts'))} held-out prompts (trained - base {diff.get('mean')}, "
        f"interval {diff.get('low')}..{diff.get('high')}). Check the run before using it.{where}"
    )


def result_rows(result: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """`python -m tools.run`'s lines for the evaluation."""
    if result is None:
        return []
    if result.get("status") != "ok":
        reason = str(result.get("reason") or "").splitlines()
        return [("evaluation", f"failed: {reason[0] if reason else 'no reason given'}")]
    rows = []
    for metric in ("greedy", "mean_at_k"):
        base = (result.get("base") or {}).get(metric)
        trained = (result.get("trained") or {}).get(metric)
        diff = (result.get("difference") or {}).get(metric)
        if not (base and trained and diff):
            continue
        k = (result.get("settings") or {}).get("samples")
        label = "greedy pass@1" if metric == "greedy" else f"mean@{_count(k)}"
        rows.append(
            (
                "evaluation",
                f"{label}: base {base['mean']:.4f}, trained {trained['mean']:.4f}, "
                f"trained - base {diff['mean']:+.4f} (95 % interval {_bound(diff['low'])}.."
                f"{_bound(diff['high'])}) on {_count(result.get('prompts'))} prompts",
            )
        )
    if result.get("regressed"):
        rows.append(("evaluation", "the export scores BELOW its base model beyond the interval"))
    held_out = result.get("held_out") or {}
    if held_out.get("dropped_over_max_prompt_length"):
        rows.append(
            (
                "evaluation",
                f"{_count(held_out['dropped_over_max_prompt_length'])} held-out prompts longer "
                f"than maxPromptLength {_count(held_out.get('max_prompt_length'))} dropped, as "
                "verl drops them",
            )
        )
    if result.get("report"):
        rows.append(("eval report", str(result["report"])))
    return rows


def _bound(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4f}"


def evaluation_report_url(settings: StackSettings, plan: EvaluationPlan | None) -> str | None:
    """gs:// URL of the report (None: no evaluation)."""
    return None if plan is None else bucket_url(settings.bucket_name, plan.report_path)


def warn_evaluation(result: Mapping[str, Any] | None, report_url: str | None) -> None:
    """regression_warning into `pulumi up`'s log."""
    warning = regression_warning(result, report_url)
    if warning is not None:
        pulumi.log.warn(warning)


def _count(value: Any) -> int | None:
    """A count as an int: Pulumi's state hands numbers back as floats (protobuf Struct)."""
    return None if value is None else int(value)

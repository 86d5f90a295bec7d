"""`verl-gke:evaluation`: the evaluation of every export against its base model.

After the export, the GRPO job's runner has the exported model and the base model answer the
held-out split (payloads/export/evaluate.py) and scores them with the run's own reward. This
setting is an object, set field by field:

    pulumi config set --path verl-gke:evaluation.samples 8
    pulumi config set --path verl-gke:evaluation.enabled false

enabled (default true), prompts (default: every row of the held-out split), samples (k answers
sampled per prompt beside the greedy one, default 4; 0: greedy only) and temperature (of the
sampled answers; default: the rollout's, actor_rollout_ref.rollout.temperature). The rest follows
the job: top_p and top_k are the rollout's, the chat template gets the job's
data.apply_chat_template_kwargs, and prompts longer than maxPromptLength are dropped, as verl
drops them (training/model_evaluation.py).

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

KEY = "verl-gke:evaluation"
# The most samples per prompt: each costs one more answer per prompt and model.
MAX_SAMPLES = 64
# vLLM's and transformers' sampling accept any temperature > 0; above 2 answers are mostly noise.
MAX_TEMPERATURE = 2.0


class EvaluationSettings(BaseModel):
    """The fields of verl-gke:evaluation (camelCase keys, like every other setting)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    enabled: bool = True
    prompts: int | None = Field(default=None, ge=1, le=1_000_000)
    samples: int = Field(default=4, ge=0, le=MAX_SAMPLES)
    temperature: float | None = Field(default=None, gt=0, le=MAX_TEMPERATURE)


def parse(value: Any) -> dict[str, Any]:
    """The raw setting as an object: Pulumi hands an object set with --path as JSON text."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"not a JSON object ({error.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object (set its fields with pulumi config set --path)")
    return value


def evaluation_settings(raw: dict[str, Any]) -> EvaluationSettings:
    return EvaluationSettings.model_validate(raw)


def _fix_value(field: str, error: dict[str, Any]) -> Any:
    """The value most likely meant: the upper bound for a value above it, else the default
    (a value below the lower bound or of the wrong type says nothing of what was meant)."""
    ctx = error.get("ctx") or {}
    if error.get("type") == "less_than_equal" and "le" in ctx:
        return ctx["le"]
    return EvaluationSettings.model_fields[field].get_default()


def problems(raw: dict[str, Any], stack: str) -> list[str]:
    """One message per bad field of verl-gke:evaluation, each with a fix that is accepted."""
    try:
        EvaluationSettings.model_validate(raw)
    except ValidationError as error:
        found = []
        fields = {f.alias or name: name for name, f in EvaluationSettings.model_fields.items()}
        for item in error.errors():
            key = str(item["loc"][0]) if item["loc"] else ""
            where = f"{KEY}.{key}"
            if key not in fields:
                found.append(
                    f"{where}: not a field of {KEY} (fields: {', '.join(fields)}). Fix: pulumi "
                    f"config rm --path {where} -s {stack}"
                )
                continue
            value = _fix_value(fields[key], dict(item))
            fix = (
                f"pulumi config rm --path {where} -s {stack} (the default applies)"
                if value is None
                else f"pulumi config set --path {where} {_shown(value)} -s {stack}"
            )
            message = str(item["msg"]).removeprefix("Value error, ")
            found.append(f"{where} = {item['input']!r}: {message}. Fix: {fix}")
        return found
    return []


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)

"""The rehearsal's --context (verl_scripts/rehearsal.py): the Hydra key -> setting map it names
problems and fixes by, so that a refusal in `pulumi up` (the rehearsal Job) and in the offline
plan both say `verl-gke:job.<field>`, `verl-gke:job.extraOverrides[i]`, `verl-gke:model` or
`verl-gke:reward` and a `pulumi config` command, not a Hydra key."""

from __future__ import annotations

from typing import Any

from config import run_inputs
from training.grpo_spec import CONFIG_KEY, MODEL_KEY, GrpoSpec, modelled_keys, setting_of
from training.model_facts import table_facts


def rehearsal_context(spec: GrpoSpec, model: str | None = None) -> dict[str, Any]:
    """Hydra key -> the setting a user changes for it: a modelled key's verl-gke:job field, an
    extraOverrides entry's index, the model path's verl-gke:model; where a new override goes."""
    settings = {key: setting_of(alias) for key, alias in modelled_keys().items()}
    settings["actor_rollout_ref.model.path"] = MODEL_KEY
    for index, override in enumerate(spec.extra_overrides):
        key = override.lstrip("+").partition("=")[0]
        settings[key] = f"{CONFIG_KEY}.extraOverrides[{index}]"
    for key in set(run_inputs.REWARD_CONFIG_KEY.values()):
        settings[f"{key}.path"] = settings[f"{key}.name"] = run_inputs.REWARD_KEY
    context: dict[str, Any] = {
        "settings": settings,
        "append": f"{CONFIG_KEY}.extraOverrides[{len(spec.extra_overrides)}]",
    }
    if model is not None:
        context["model"] = model
        # The instruction-tuned sibling the refusal of a model without a chat template offers,
        # where the program's model table has it (meta-llama/Llama-3.1-8B -> ...-Instruct).
        if "instruct" not in model.lower() and known_model(f"{model}-Instruct"):
            context["chat_model"] = f"{model}-Instruct"
    return context


def known_model(model: str) -> bool:
    """Whether the program's model table has `model`."""
    try:
        table_facts(model)
    except (KeyError, ValueError):
        return False
    return True

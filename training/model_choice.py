"""Problems with the model are reported against the key the user set: `verl-gke:model` unless
`verl-gke:job.modelPath` was set explicitly (the job's modelPath is derived from the model id, so
naming it would point at a key the user never touched)."""

from __future__ import annotations

from config.settings import DEFAULT_MODEL, StackSettings, config_key
from training.grpo_spec import GrpoSpec
from training.memory_fit import KNOWN_MODELS, known_model


def model_setting_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """verl-gke:model must be in the known-model table: its attention heads are checked against
    the rollout TP and its memory against the GPU before anything is created."""
    if "modelPath" in settings.job or known_model(spec.model_path) is not None:
        return []  # an explicit modelPath keeps the job preflight's own message
    return [
        f"{config_key('model')} = {settings.model!r}: not in the known-model table, so its "
        f"attention heads cannot be checked against the rollout tensor parallel size nor its "
        f"memory against the GPU (known: {', '.join(sorted(KNOWN_MODELS))}). "
        f"Fix: {settings.fix('model', DEFAULT_MODEL)}"
    ]

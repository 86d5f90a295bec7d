"""No secret reaches the GRPO job's entrypoint or runtime env: both are stored in plain text in
the Pulumi state and in Ray's job record. The detector is the job provider's
(jobs/secret_scan.py), run here before any resource exists, so a token pasted into a job setting
is refused by the preflight instead of by the provider after the cluster was built."""

from __future__ import annotations

from typing import Any

from config.settings import SECRET_FIELDS, StackSettings, config_key
from jobs.secret_scan import find_secrets, redact
from training.grpo_spec import CONFIG_KEY, GrpoSpec

_WHY = (
    "the GRPO job's entrypoint and runtime env are stored in plain text in the Pulumi state and "
    "in the Ray job record"
)
_FIX = (
    "the pods read the HF token from the Kubernetes Secret hf-secret (pulumi config set --secret "
    "verl-gke:hfToken hf_...) and the W&B key from wandb-secret (verl-gke:wandbApiKey)"
)


def known_secrets(settings: StackSettings) -> dict[str, str]:
    """The stack's own secret values -> the marker shown instead of them."""
    known = {}
    for name in sorted(SECRET_FIELDS):
        value = getattr(settings, name)
        if value is not None and value.get_secret_value():
            known[value.get_secret_value()] = f"<redacted: {config_key(name)}>"
    return known


def job_settings_secret_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """One problem per job setting that carries a secret, naming the key, the value redacted and
    the fix (remove it)."""
    known = known_secrets(settings)
    problems = []
    for alias, value in spec.model_dump(by_alias=True).items():
        setting = f"{CONFIG_KEY}.{alias}"
        # Setting names are verl's (ppo_max_token_len_per_gpu is no token): only values count.
        for found in find_secrets(setting, value, known, check_names=False):
            shown = redact(str(_at(value, found.path[len(setting) :])), known)
            where = "it from " if found.path != setting else ""
            problems.append(
                f"{found.path} = {shown!r}: looks like a secret (a Hugging Face token or the "
                f"value of a secret setting); {_WHY}. Fix: remove {where}{setting}; {_FIX}"
            )
    return problems


def rendered_secret_problems(
    entrypoint: str, runtime_env: dict[str, Any], settings: StackSettings
) -> list[str]:
    """The same check on what is submitted, for anything the program itself added."""
    known = known_secrets(settings)
    found = [
        *find_secrets("entrypoint", entrypoint, known),
        *find_secrets("runtime_env", runtime_env, known),
    ]
    return [
        f"the GRPO job's {f.path} carries a secret (value not shown); {_WHY}. Fix: remove it "
        f"from {CONFIG_KEY}; {_FIX}"
        for f in found
    ]


def _at(value: Any, index: str) -> Any:
    """The item `[i]` of a list setting (the only nesting a job setting has), or the value."""
    if index.startswith("[") and index.endswith("]") and isinstance(value, list | tuple):
        return value[int(index[1:-1])]
    return value

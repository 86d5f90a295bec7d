"""Experiment-tracker rules of the GRPO job that depend on the stack, not on verl."""

from __future__ import annotations

from config.settings import StackSettings, config_key
from training.grpo_spec import CONFIG_KEY, GrpoSpec


def tracker_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """verl's wandb logger without a key fails in the TaskRunner after the GPUs are up
    (wandb: "api_key not configured (no-tty)"); refuse it before anything is created."""
    key = settings.wandb_api_key
    if "wandb" not in spec.logger or (key is not None and key.get_secret_value()):
        return []
    others = [name for name in spec.logger if name != "wandb"] or ["console"]
    return [
        f"{CONFIG_KEY}.logger = {list(spec.logger)}: the wandb logger needs a Weights & Biases "
        f"API key, and {config_key('wandb_api_key')} is not set. Fix: pulumi config set --secret "
        f"{config_key('wandb_api_key')} <your key> -s {settings.stack}, or set "
        f"{CONFIG_KEY}.logger to {others}"
    ]

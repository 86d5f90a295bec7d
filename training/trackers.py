"""Experiment-tracker rules of the GRPO job that depend on the stack, not on verl.

Every logger's output must reach the bucket or a tracker the stack has credentials for, checked
before anything is created (what each needs: verl/utils/tracking.py Tracking.__init__, v0.6.1 and
ddbcdb7):
- console: the driver log (Cloud Logging via the head's sidecar); always rendered
  (grpo_spec.rendered_loggers).
- file, tensorboard: written to the run folder on the bucket (grpo_spec.logger_env).
- wandb: needs WANDB_API_KEY, which the Ray pods get from verl-gke:wandbApiKey.
- the rest are refused: the stack has no way to give the Ray pods what they need without putting
  it in the job's runtime env, which the Jobs API returns to anyone with dashboard access.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType

from config.settings import StackSettings, config_key
from training.grpo_spec import CONFIG_KEY, GrpoSpec

# Logger -> why the stack cannot run it (what verl's Tracking reads at v0.6.1 and ddbcdb7).
UNSUPPORTED_LOGGERS: Mapping[str, str] = MappingProxyType(
    {
        "mlflow": (
            "verl logs to MLFLOW_TRACKING_URI, default sqlite:////tmp/mlruns.db on the node of "
            "verl's TaskRunner (lost with the pod), and the stack has no setting for a tracking "
            "server (SQLite on the GCS FUSE bucket has no file locking)"
        ),
        "swanlab": (
            "verl logs in with SWANLAB_API_KEY in SWANLAB_MODE=cloud, which the stack cannot "
            "pass to the Ray pods as a secret"
        ),
        "vemlp_wandb": (
            "verl reads VOLC_ACCESS_KEY_ID, VOLC_SECRET_ACCESS_KEY and MLP_TRACKING_REGION, "
            "which the stack cannot pass to the Ray pods as secrets (a missing one is a KeyError "
            "after the model loaded)"
        ),
        "clearml": (
            "verl calls clearml.Task.init, which needs a ClearML server and its API credentials "
            "(CLEARML_API_ACCESS_KEY / CLEARML_API_SECRET_KEY or clearml.conf), which the stack "
            "cannot pass to the Ray pods as secrets"
        ),
        "trackio": (
            "verl calls trackio.init, which keeps its runs in a local SQLite database unless "
            "given a Hugging Face Space and token: the stack cannot pass a token to the Ray "
            "pods as a secret, and SQLite needs file locking, which the GCS FUSE bucket lacks"
        ),
    }
)
# Loggers whose output the stack keeps; the fix offers the user's others among these.
KEPT_LOGGERS = ("console", "file", "tensorboard", "wandb")


def tracker_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """One problem per logger whose output would be lost or whose credentials are missing."""
    problems = [
        f"{CONFIG_KEY}.logger = {list(spec.logger)}: {name}: {UNSUPPORTED_LOGGERS[name]}. Fix: "
        f"{_logger_command(_keep(spec, settings), settings.stack)} (file and tensorboard write "
        "into the run's checkpoint folder on the bucket)"
        for name in spec.logger
        if name in UNSUPPORTED_LOGGERS
    ]
    key = settings.wandb_api_key
    if "wandb" in spec.logger and (key is None or not key.get_secret_value()):
        # verl's wandb.init fails in the TaskRunner after the GPUs are up ("api_key not
        # configured (no-tty)").
        problems.append(
            f"{CONFIG_KEY}.logger = {list(spec.logger)}: the wandb logger needs a Weights & "
            f"Biases API key, and {config_key('wandb_api_key')} is not set. Fix: pulumi config "
            f"set --secret {config_key('wandb_api_key')} '{WANDB_KEY_PLACEHOLDER}' -s "
            f"{settings.stack} (your key from https://wandb.ai/authorize), or "
            f"{_logger_command(_keep(spec, settings, drop_wandb=True), settings.stack)}"
        )
    return problems


# The key's placeholder in a fix: the offline plan plans it with a stand-in, `pulumi up` refuses it
# as a placeholder (config/settings.py _OFFLINE_EXAMPLES).
WANDB_KEY_PLACEHOLDER = "<your-wandb-api-key>"


def _logger_command(loggers: list[str], stack: str) -> str:
    """`pulumi config set --path verl-gke:job.logger '["console"]'`: a list as JSON text, which
    the job reads as the list (grpo_spec._text_list)."""
    return f"pulumi config set --path {CONFIG_KEY}.logger '{json.dumps(loggers)}' -s {stack}"


def _keep(spec: GrpoSpec, settings: StackSettings, drop_wandb: bool = False) -> list[str]:
    """The user's loggers that the stack can run (wandb only with its key), else ['console']."""
    key = settings.wandb_api_key
    has_key = key is not None and bool(key.get_secret_value())
    kept = [
        name
        for name in spec.logger
        if name in KEPT_LOGGERS and not (name == "wandb" and (drop_wandb or not has_key))
    ]
    return kept or ["console"]

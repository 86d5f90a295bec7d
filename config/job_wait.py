"""`verl-gke:jobWait`: when `pulumi up` returns for the GRPO job.

The setting speaks in camelCase like every other key; the job provider (jobs/ray_job.py,
`wait_for`) in snake_case. The fabric check keeps its own wait (it gates GRPO and always runs to
its verdict), so this only concerns the training run.

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

KEY = "verl-gke:jobWait"


class JobWait(StrEnum):
    # RUNNING and still so after the provider's start-up grace.
    RUNNING = "running"
    # verl logged its first training step: start-up (image, model load, vLLM, validation) is
    # behind, which is where most runs that fail, fail.
    FIRST_STEP = "firstStep"
    # SUCCEEDED, the model export included.
    FINISHED = "finished"

    @property
    def provider_mode(self) -> str:
        """The job provider's `wait_for` value."""
        return {"running": "running", "firstStep": "first_step", "finished": "finished"}[self]


DEFAULT = JobWait.FIRST_STEP

# The boolean the setting used to be: true blocked until the end, false returned once running.
_LEGACY = {"true": JobWait.FINISHED, "false": JobWait.RUNNING}


def _legacy_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in _LEGACY:
        return value.strip().lower()
    return None


def coerce(value: Any) -> Any:
    """A legacy boolean as the mode it meant; anything else unchanged (the enum validates it)."""
    legacy = _legacy_text(value)
    return _LEGACY[legacy] if legacy is not None else value


def legacy_notices(value: Any, stack: str) -> list[str]:
    """A notice for a stack that still sets the old boolean, with the command that updates it."""
    legacy = _legacy_text(value)
    if legacy is None:
        return []
    mode = _LEGACY[legacy]
    return [
        f"{KEY} = {legacy} is the old boolean form; it now reads as {mode.value!r}. Modes: "
        f"running, firstStep (default), finished. Fix: pulumi config set {KEY} {mode.value} "
        f"-s {stack}"
    ]

"""Cached offline runs of the real program for the program tests (one run per combination)."""

from __future__ import annotations

import copy
from functools import cache

from planning.offline_engine import PlanResult, run_stack
from planning.startup_links import JobFacts, job_facts
from tools.plan import planned_settings
from training.assembly import training_job

# The five stack/mode combinations the program supports.
COMBINATIONS = (
    ("a4x", "standard"),
    ("a4", "autopilot"),
    ("a4", "standard"),
    ("a3u", "autopilot"),
    ("a3u", "standard"),
)

# Real-looking values instead of the committed placeholders, so assertions read like a deploy.
REAL = {
    "gcp:project": "acme-ml-prod",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "gpu-res",
    "verl-gke:hfToken": "hf_test_token_value",
}


@cache
def _plan(stack: str, overrides: tuple[tuple[str, str], ...], unset: tuple[str, ...]) -> PlanResult:
    return run_stack(stack, dict(overrides), unset=unset, strict=True)


def plan(
    stack: str, mode: str | None = None, *, unset: tuple[str, ...] = (), **extra: str
) -> PlanResult:
    """Plan like a real deploy; `extra` uses config keys with ':' spelled as '__'.

    Each call gets its own copy of the cached run, so a test that edits what it got (a manifest
    it breaks on purpose) cannot change what another test sees: the suite passes in any order.
    """
    overrides = {k: v for k, v in REAL.items() if k not in unset}
    if mode:
        overrides["verl-gke:mode"] = mode
    overrides.update({key.replace("__", ":"): value for key, value in extra.items()})
    return copy.deepcopy(_plan(stack, tuple(sorted(overrides.items())), unset))


@cache
def run_facts(stack: str, mode: str) -> JobFacts:
    """The run's own start-up facts (model, KL terms, validation) of plan(stack, mode), from its
    settings and GRPO spec."""
    settings = planned_settings(stack, {**REAL, "verl-gke:mode": mode}, strict=True)
    job = training_job(settings)
    return job_facts(settings, job.spec, job.model)

"""verl-gke:maxRestarts, hangMinutes and firstStepMinutes reach the job's runner as its
arguments (training/model_export.py renders them; supervise.add_arguments parses them), with the
restart budget's default per capacity mode, and the plan shows the hang bound."""

from __future__ import annotations

import argparse
import shlex

import pytest

from config.capacity import Capacity
from config.recovery import DEFAULT_MAX_RESTARTS
from payloads.export import supervise
from tools import plan as plan_cli
from tools.plan import planned_settings
from training.assembly import training_job

CONFIG = {"verl-gke:reservation": "", "verl-gke:capacity": "spot"}


def _runner_args(overrides: dict[str, str]) -> argparse.Namespace:
    settings = planned_settings("a4", overrides, strict=False)
    argv = shlex.split(training_job(settings).entrypoint)
    parser = argparse.ArgumentParser()
    supervise.add_arguments(parser)
    known, _ = parser.parse_known_args(argv[: argv.index("--")])
    return known


def test_the_settings_reach_the_runner_as_its_policy() -> None:
    args = _runner_args(
        {**CONFIG, "verl-gke:maxRestarts": "4", "verl-gke:hangMinutes": "45",
         "verl-gke:firstStepMinutes": "90"}
    )  # fmt: skip
    policy = supervise.policy_from(args)
    assert policy.max_restarts == 4
    assert policy.hang_floor_s == 45 * 60 and policy.first_step_bound_s == 90 * 60
    assert policy.gpus_needed == 16  # a4's default: 2 nodes x 8 GPUs, the worker group


@pytest.mark.parametrize("capacity", [Capacity.SPOT, Capacity.FLEX_START])
def test_the_restart_budget_defaults_per_capacity_mode(capacity: Capacity) -> None:
    args = _runner_args({**CONFIG, "verl-gke:capacity": capacity.value})
    assert args.max_restarts == DEFAULT_MAX_RESTARTS[capacity]
    assert DEFAULT_MAX_RESTARTS[Capacity.SPOT] > DEFAULT_MAX_RESTARTS[Capacity.FLEX_START]


def test_a_restart_budget_out_of_range_is_refused_naming_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a4", "--set", "verl-gke:maxRestarts=-1"]) != 0
    assert "maxRestarts" in capsys.readouterr().err


def test_the_plan_shows_the_hang_bound_and_the_stack_dump_location(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a4x", "--set", "verl-gke:hangMinutes=40"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("Recovery:"))
    assert "no new step within max(40 min, 3 x the slowest step)" in line
    assert "/stacks/" in line and "at most 3 times" in line


STANDARD_FLEX = {
    "verl-gke:reservation": "", "verl-gke:capacity": "flexStart", "verl-gke:mode": "standard",
    "verl-gke:capacityWaitMinutes": "120",
}  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "wait_minutes"),
    [
        # Node creation ~35 min (est., the conservative end of 10-35) + the worker's start 10 min.
        (CONFIG, 45),
        ({**CONFIG, "verl-gke:capacity": "flexStart", "verl-gke:mode": "autopilot"}, 45),
        # a4's own reservation: the node comes back after GKE auto-repair's ~10 min NotReady.
        ({}, 55),
        # Standard flex-start queues a new ProvisioningRequest first: the stack's own wait.
        (STANDARD_FLEX, 120),
    ],
)
def test_the_lost_node_wait_follows_the_capacity_mode(
    overrides: dict[str, str], wait_minutes: int
) -> None:
    args = _runner_args(overrides)
    assert supervise.policy_from(args).capacity_wait_s == wait_minutes * 60


def test_the_plan_shows_the_lost_node_wait(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["a4", "--set", "verl-gke:capacity=spot", "--set", "verl-gke:reservation="]
    assert plan_cli.main(argv) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("Recovery:"))
    assert "GPUs missing after a lost node are waited for 45 min" in line
    assert "time without the worker group's GPUs not counted" in line

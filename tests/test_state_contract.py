"""What users' stack state depends on, pinned: moving or renaming any of it is a conscious change
made with an alias (`pulumi.Alias`), never a side effect of a refactor.

- The RayJob's dynamic provider is pickled into the state by reference (module path + class);
  the dynamic-provider host imports that module from the program's folder for every later
  preview, update, refresh and destroy.
- Every resource's URN contains its type token, and a component's type token is the parent
  part of its children's URNs: a changed token is a delete and re-create of the whole subtree.
"""

from __future__ import annotations

import base64
import importlib
import pickletools

import dill
import pytest

from jobs.ray_job import RayJobProvider
from jobs.rehearsal_verdict import RehearsalVerdictProvider
from tests.program import COMBINATIONS, plan

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
PROVIDER_REFERENCE = ("jobs.ray_job", "RayJobProvider")
VERDICT = "pulumi-python:dynamic/jobs:RehearsalVerdict"
VERDICT_PROVIDER_REFERENCE = ("jobs.rehearsal_verdict", "RehearsalVerdictProvider")
COMPONENT_TYPES = {
    # Only with verl-gke:capacity flexStart on Standard (tests/test_capacity.py).
    "verl-gke:capacity:GpuCapacityRequest",
    "verl-gke:data_preparation:DataPreparation",
    "verl-gke:gke_cluster:GkeCluster",
    "verl-gke:gpu_networking:GpuNetworking",
    "verl-gke:gpu_node_pool:GpuNodePool",
    "verl-gke:grpo_training:GrpoTraining",
    "verl-gke:host_network:HostNetwork",
    # Image streaming (x86 stacks by default) or, without it on Standard, the pre-puller.
    "verl-gke:image_prepull:ImagePrepull",
    "verl-gke:image_registry:ImageRegistry",
    "verl-gke:kuberay_operator:KubeRayOperator",
    # Data prep's second Job, the weights (components/model_weights.py).
    "verl-gke:model_weights:ModelWeights",
    # The nodes' own service account (every stack and mode).
    "verl-gke:node_identity:NodeIdentity",
    "verl-gke:nvidia_dra_driver:NvidiaDraDriver",
    "verl-gke:ray_cluster:RayCluster",
    "verl-gke:rdma_networks:RdmaNetworks",
    "verl-gke:rehearsal:Rehearsal",
    "verl-gke:run_telemetry:RunTelemetry",
    "verl-gke:storage:TrainingStorage",
    "verl-gke:workload_namespace:WorkloadNamespace",
}


def pickled_globals(serialized: str) -> list[tuple[str, str]]:
    """(module, name) of every class or function the pickle refers to by reference."""
    strings: list[str] = []
    found: list[tuple[str, str]] = []
    for opcode, arg, _ in pickletools.genops(base64.b64decode(serialized)):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(str(arg))
        elif opcode.name == "STACK_GLOBAL":
            found.append((strings[-2], strings[-1]))
        elif opcode.name == "GLOBAL":
            module, name = str(arg).split(" ", 1)
            found.append((module, name))
    return found


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_job_provider_is_pickled_by_its_module_path(stack: str, mode: str) -> None:
    jobs = plan(stack, mode).of_type(RAY_JOB)
    assert jobs
    for job in jobs:
        serialized = job.inputs["__provider"]
        # The first reference is the provider's class; the host imports it from there.
        assert pickled_globals(serialized)[0] == PROVIDER_REFERENCE
        # Loaded the way the dynamic-provider host loads it (dill), it is that class.
        provider = dill.loads(base64.b64decode(serialized))
        assert type(provider) is RayJobProvider
        assert (type(provider).__module__, type(provider).__qualname__) == PROVIDER_REFERENCE


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_verdict_provider_is_pickled_by_its_module_path(stack: str, mode: str) -> None:
    (verdict,) = plan(stack, mode).of_type(VERDICT)
    serialized = verdict.inputs["__provider"]
    assert pickled_globals(serialized)[0] == VERDICT_PROVIDER_REFERENCE
    assert type(dill.loads(base64.b64decode(serialized))) is RehearsalVerdictProvider


def test_component_type_tokens_across_every_stack_and_mode() -> None:
    registered = {
        resource.type
        for stack, mode in COMBINATIONS
        for resource in plan(stack, mode).resources
        if resource.type.startswith("verl-gke:")
    }
    flex_start = plan(
        "a4", "standard", unset=("verl-gke:reservation",), **{"verl-gke__capacity": "flexStart"}
    )
    registered |= {r.type for r in flex_start.resources if r.type.startswith("verl-gke:")}
    assert registered == COMPONENT_TYPES
    # The dynamic resource's own type (module="jobs", name="RayJob" in jobs/ray_job.py).
    assert all(plan(stack, mode).of_type(RAY_JOB) for stack, mode in COMBINATIONS)


def test_type_tokens_follow_one_scheme() -> None:
    # verl-gke:<module under components/>:<class>, so the token says where the class lives.
    for token in COMPONENT_TYPES:
        package, module, cls = token.split(":")
        assert package == "verl-gke"
        loaded = importlib.import_module(f"components.{module}")
        assert getattr(loaded, cls).__name__ == cls, token

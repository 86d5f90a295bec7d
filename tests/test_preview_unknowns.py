"""The whole program previewed with unknown cluster outputs, its jobs checked by the real host.

A real first `pulumi up` previews before it creates anything: the GKE cluster's endpoint and CA
are unknown, so the dashboard inputs of both Ray jobs (GRPO and the fabric check) are too. The
same holds for any update that replaces the cluster. Here __main__.py runs for every stack and
mode under the offline engine in that state (planning/offline_engine.py, unknown_outputs=True), and
each RayJob's inputs, exactly as the program registered them, go through the engine's provider
calls on the real `python -m pulumi.dynamic` host:

- first preview: Check(olds = none) must accept them (a failure here fails `pulumi up`);
- preview after a cluster replacement: Check(olds = the inputs of the last up), then Diff
  against that up's outputs must answer "replace, delete first", never fail;
- preview of the unchanged stack (cluster known): Diff must answer "no changes".
"""

from __future__ import annotations

from functools import cache

import pytest
from google.protobuf import struct_pb2
from pulumi.output import Unknown
from pulumi.runtime.proto import provider_pb2

from jobs.ray_job import OUTPUT_KEYS, JobInputs
from planning.offline_engine import UNKNOWN_OUTPUT, PlanResult, RecordedResource, run_stack
from tests.program import COMBINATIONS, REAL, plan
from tests.support.dynamic_host import (
    PROVIDER_KEY,
    DynamicHost,
    from_wire,
    wire,
)

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
JOBS = ("grpo-job", "grpo-fabric-check")


@cache
def first_preview(stack: str, mode: str) -> PlanResult:
    return run_stack(stack, {**REAL, "verl-gke:mode": mode}, strict=True, unknown_outputs=True)


def engine_view(job: RecordedResource) -> struct_pb2.Struct:
    """The job's inputs as the engine hands them to the host (secret wrappers stripped: the host
    accepts no secrets, and `__provider` is one)."""
    return wire(from_wire(job.wire_inputs))


def last_up_outputs(inputs: struct_pb2.Struct, sid: str) -> struct_pb2.Struct:
    """The state a previous `pulumi up` left: what Create returns for a running job."""
    props = from_wire(inputs)
    job = JobInputs.parse(props)
    observed = {key: None for key in OUTPUT_KEYS}
    observed.update(submission_id=sid, status="RUNNING", message="Job is currently running.")
    return wire({**observed, **job.to_props(), PROVIDER_KEY: props[PROVIDER_KEY]})


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_first_preview_registers_both_jobs_with_the_cluster_unknown(stack: str, mode: str) -> None:
    result = first_preview(stack, mode)
    jobs = {job.name: job for job in result.of_type(RAY_JOB)}
    assert sorted(jobs) == sorted(JOBS)
    for job in jobs.values():
        dashboard = job.inputs["dashboard"]
        assert isinstance(dashboard["kube_api_endpoint"], Unknown), job.name
        assert isinstance(dashboard["cluster_ca_certificate"], Unknown), job.name
        # What does not depend on the cluster is known, so Check still validates it.
        assert dashboard["service"].endswith("-head-svc") and dashboard["namespace"]
        assert isinstance(job.inputs["entrypoint"], str) and job.inputs["entrypoint"]
    # The preview shows the job's outputs as known only after apply.
    for key in ("jobSubmissionId", "jobStatus", "fabricCheckBusbwGbps", "checkpoints"):
        assert result.outputs[key] == UNKNOWN_OUTPUT, key


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_first_preview_passes_check_in_the_real_host(
    host: DynamicHost, stack: str, mode: str
) -> None:
    for job in first_preview(stack, mode).of_type(RAY_JOB):
        checked = host.check(job.urn, None, engine_view(job))
        assert [(f.property, f.reason) for f in checked.failures] == [], job.name
        returned = from_wire(checked.inputs)["dashboard"]
        assert isinstance(returned["kube_api_endpoint"], Unknown), job.name
        assert isinstance(returned["cluster_ca_certificate"], Unknown), job.name


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_preview_of_a_replaced_cluster_replaces_the_jobs_and_unchanged_is_no_change(
    host: DynamicHost, stack: str, mode: str
) -> None:
    known = plan(stack, mode)  # the last `pulumi up`: the cluster and its endpoint exist
    replaced = first_preview(stack, mode)  # a new cluster: endpoint and CA unknown again
    for name in JOBS:
        old, new = known.one(RAY_JOB, name), replaced.one(RAY_JOB, name)
        assert old.urn == new.urn
        old_inputs = host.check(old.urn, None, engine_view(old))
        assert list(old_inputs.failures) == [], name
        sid = f"{stack}-{name}-0123456789ab"
        state = last_up_outputs(old_inputs.inputs, sid)

        checked = host.check(new.urn, old_inputs.inputs, engine_view(new))
        assert list(checked.failures) == [], name
        diff = host.diff(new.urn, sid, state, checked.inputs, old_inputs.inputs)
        assert diff.changes == provider_pb2.DiffResponse.DIFF_SOME, name
        assert (list(diff.replaces), diff.deleteBeforeReplace) == (["dashboard"], True), name

        again = host.check(old.urn, old_inputs.inputs, engine_view(old))
        unchanged = host.diff(old.urn, sid, state, again.inputs, old_inputs.inputs)
        assert unchanged.changes == provider_pb2.DiffResponse.DIFF_NONE, name

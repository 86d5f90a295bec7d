"""The Pulumi CLI minimum (3.207.0, for replaceWith): the program refuses an older engine before
it registers anything, and the project file and the PR workflow state and pin the same floor.

No Pulumi CLI runs here, so the engine is the SDK's mock monitor told what an old CLI reports:
no replaceWith in GetDeploymentInfo (CLIs with that RPC), or no GetDeploymentInfo at all and a
`SupportsFeature("replaceWith")` probe that answers false (older CLIs). The program that runs is
the real __main__.py.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from pulumi.runtime import mocks, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from config.pulumi_cli import MIN_PULUMI_CLI, PulumiCliTooOld, require_cli_features
from planning import offline_engine
from tests.program import REAL

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "pull-request.yml"
REPLACE_WITH = resource_pb2.RESOURCE_MONITOR_FEATURE_REPLACE_WITH


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


class _OldCliMonitor(offline_engine.RecordingMonitor):
    """Reports every feature a current engine does, except replaceWith."""

    def GetDeploymentInfo(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        info = super().GetDeploymentInfo(request)
        kept = [f for f in info.supportedFeatures if f != REPLACE_WITH]
        return resource_pb2.DeploymentInfo(supportedFeatures=kept)


class _Unimplemented(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED


class _PreDeploymentInfoMonitor(offline_engine.RecordingMonitor):
    """A CLI from before GetDeploymentInfo: the SDK probes each feature by its legacy name."""

    def __init__(self, engine_mocks: mocks.Mocks, supported: set[str]) -> None:
        super().__init__(engine_mocks)
        self._supported = supported

    def GetDeploymentInfo(self, request: Any) -> Any:  # noqa: N802
        raise _Unimplemented()

    def SupportsFeature(self, request: Any) -> Any:  # noqa: N802
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id in self._supported)


def _run_program(monitor: offline_engine.RecordingMonitor, stack: str = "a4x") -> None:
    config = {**offline_engine.stack_config(stack), **REAL}
    set_all_config(config, [key for key in config if key in offline_engine.SECRET_KEYS])
    settings.set_root_resource(None)
    mocks.set_mocks(
        offline_engine.OfflineMocks(),
        project=offline_engine.PROJECT,
        stack=stack,
        preview=True,
        monitor=monitor,
    )
    program = str(REPO / "__main__.py")
    _sync_await(run_pulumi_func(lambda: runpy.run_path(program, run_name="__main__")))


@pytest.mark.parametrize("stack", ["a4x", "a3u"])
def test_an_engine_without_replace_with_stops_the_program_before_any_resource(stack: str) -> None:
    monitor = _OldCliMonitor(offline_engine.OfflineMocks())
    with pytest.raises(PulumiCliTooOld) as caught:
        _run_program(monitor, stack)
    message = str(caught.value)
    assert f"Pulumi CLI {MIN_PULUMI_CLI} or newer" in message
    assert "replaceWith" in message and "pulumi version" in message
    assert [r.type for r in monitor.recorded] == []


def test_the_same_program_runs_when_the_engine_supports_replace_with() -> None:
    # The control: the only difference from the test above is the reported feature.
    monitor = offline_engine.RecordingMonitor(offline_engine.OfflineMocks())
    _run_program(monitor)
    assert any(r.type == "gcp:container/cluster:Cluster" for r in monitor.recorded)


@pytest.mark.parametrize(
    ("supported", "accepted"),
    [({"secrets", "resourceReferences", "deletedWith"}, False), ({"replaceWith"}, True)],
)
def test_legacy_feature_probes_decide_the_same_way(supported: set[str], accepted: bool) -> None:
    # The SDK's own start-up path (`_load_monitor_feature_support`, run before every program)
    # against an engine without GetDeploymentInfo.
    settings.configure(
        settings.Settings(
            project="verl-gke",
            stack="a4x",
            monitor=_PreDeploymentInfoMonitor(offline_engine.OfflineMocks(), supported),
        )
    )

    async def start_program() -> None:
        # As `run_in_stack`: load the features, then run the program, in one context (the
        # features live in context variables).
        await settings._load_monitor_feature_support()
        require_cli_features()

    if accepted:
        _sync_await(start_program())
    else:
        with pytest.raises(PulumiCliTooOld):
            _sync_await(start_program())


def test_project_file_states_the_minimum() -> None:
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["requiredPulumiVersion"] == f">={MIN_PULUMI_CLI}"


def test_pr_workflow_pins_the_cli_to_the_sdk_version() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    pins = [
        step["with"]["pulumi-version"]
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if str(step.get("uses", "")).startswith("pulumi/actions@")
    ]
    assert pins, "the preview job runs pulumi/actions"
    (sdk,) = re.findall(r"^pulumi==([0-9.]+)$", (REPO / "requirements.txt").read_text(), flags=re.M)
    for pin in pins:
        # An exact version, never a range such as the action's default "^3".
        assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", str(pin)), pin
        assert str(pin) == sdk
        assert _version(str(pin)) >= _version(MIN_PULUMI_CLI)


def test_every_workflow_job_has_a_timeout() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    for name, job in workflow["jobs"].items():
        assert 0 < int(job["timeout-minutes"]) <= 60, name

"""verl-gke:capacity: GKE's support matrix enforced before any resource, the GPU
capacity of each mode, all nodes or none, GPUs released when the run ends, the plan's cost facts
on every stack and mode, and the kept bucket adopted after `pulumi destroy`."""

from __future__ import annotations

import re

import pytest

from config.capacity import IDLE_TIMEOUT_SECONDS, MAX_RUN_DURATION_SECONDS
from config.profiles import PROFILES, Capacity, Mode
from config.settings import SettingsError, load_settings
from manifests import capacity as capacity_manifests
from planning import offline_engine
from planning.cost_facts import what_you_pay_for
from planning.offline_engine import EXISTING_BUCKETS_ENV, PlanResult, run_stack
from tests.program import COMBINATIONS, REAL, plan
from tests.support import schemas

NODE_POOL = "gcp:container/nodePool:NodePool"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
PROVISIONING_REQUEST = "kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest"
POD_TEMPLATE = "kubernetes:core/v1:PodTemplate"
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
BUCKET = "gcp:storage/bucket:Bucket"
NO_RESERVATION = ("verl-gke:reservation",)


def outside(stack: str, mode: str, capacity: str, **extra: str) -> PlanResult:
    """A stack without a reservation asking for `capacity`."""
    extra = {f"verl-gke__{key}": value for key, value in extra.items()}
    return plan(stack, mode, unset=NO_RESERVATION, **{"verl-gke__capacity": capacity}, **extra)


def settings_for(stack: str, mode: str, config: dict[str, str]):
    base = {**REAL, "verl-gke:mode": mode, **config}
    return load_settings(stack, {k: v for k, v in base.items() if v is not None}, offline=False)


def pool(result: PlanResult) -> dict:
    return dict(result.one(NODE_POOL).inputs)


def worker_group(result: PlanResult) -> dict:
    (group,) = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"]
    return group


# --- the reservation default is unchanged --------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_with_a_reservation_the_default_is_reservation_and_fixed(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    assert settings_for(stack, mode, {}).settings.capacity is Capacity.RESERVATION
    spec = result.one(RAY_CLUSTER).inputs["spec"]
    assert "enableInTreeAutoscaling" not in spec and "autoscalerOptions" not in spec
    group = worker_group(result)
    nodes = PROFILES[stack].default_gpu_nodes
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes,) * 3
    assert result.one(RAY_CLUSTER).custom_timeouts == {"create": "150m", "update": "150m"}
    assert not result.of_type(PROVISIONING_REQUEST)
    if mode == "standard":
        inputs = pool(result)
        assert inputs["nodeCount"] == nodes
        assert "autoscaling" not in inputs and "queuedProvisioning" not in inputs
        config = inputs["nodeConfig"]
        assert "flexStart" not in config and "spot" not in config
        assert config["reservationAffinity"]["consumeReservationType"] == "SPECIFIC_RESERVATION"
        assert inputs["management"] == {"autoRepair": True, "autoUpgrade": True}


# --- flex-start, Standard: all nodes or none ------------------------------------------------


@pytest.mark.parametrize("stack", ["a4", "a3u"])
def test_flex_start_standard_asks_for_all_nodes_at_once(stack: str) -> None:
    result = outside(stack, "standard", "flexStart")
    nodes = PROFILES[stack].default_gpu_nodes
    inputs = pool(result)
    assert "nodeCount" not in inputs and inputs["initialNodeCount"] == 0
    assert inputs["autoscaling"] == {
        "totalMinNodeCount": 0,
        "totalMaxNodeCount": nodes,
        "locationPolicy": "ANY",
    }
    assert inputs["queuedProvisioning"] == {"enabled": True}
    assert inputs["nodeConfig"]["flexStart"] is True
    assert "spot" not in inputs["nodeConfig"]
    assert inputs["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "NO_RESERVATION"
    }
    assert inputs["management"]["autoRepair"] is False

    request = result.one(PROVISIONING_REQUEST)
    template = result.one(POD_TEMPLATE)
    name = template.inputs["metadata"]["name"]
    assert request.inputs["spec"] == {
        "provisioningClassName": "queued-provisioning.gke.io",
        "parameters": {"maxRunDurationSeconds": str(MAX_RUN_DURATION_SECONDS)},
        "podSets": [{"count": nodes, "podTemplateRef": {"name": name}}],
    }
    gpu_pool = result.one(NODE_POOL)
    assert result.depends_on(request, gpu_pool)

    group = worker_group(result)
    annotations = group["template"]["metadata"]["annotations"]
    assert annotations[capacity_manifests.CONSUME_ANNOTATION] == name
    assert annotations[capacity_manifests.CLASS_ANNOTATION] == "queued-provisioning.gke.io"
    pod = group["template"]["spec"]
    assert {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    # The request counts pods of the workers' shape on the workers' nodes: the autoscaler sizes
    # the nodes from the template's pods, so their placement (nodeSelector, tolerated taints)
    # must be the workers' (GKE "flex-start with queued provisioning": the PodTemplate states
    # what the consuming pods ask for).
    counted = template.inputs["template"]["spec"]
    assert counted["nodeSelector"] == pod["nodeSelector"]
    assert sorted(map(str, counted["tolerations"])) == sorted(map(str, pod["tolerations"]))
    # GKE applies its pod validations and mutations to a PodTemplate labelled
    # cloud.google.com/apply-warden-policies (its own metadata.labels; same GKE page), needed to
    # compute the nodes' resources.
    assert template.inputs["metadata"]["labels"]["cloud.google.com/apply-warden-policies"] == "true"
    assert "metadata" not in template.inputs["template"]
    # The keys the cluster autoscaler reads (autoscaler apis/provisioningrequest/
    # autoscaling.x-k8s.io/v1/types.go, ProvisioningRequestPodAnnotationKey and
    # ProvisioningClassPodAnnotationKey), not the deprecated cluster-autoscaler.kubernetes.io/ ones.
    assert annotations["autoscaling.x-k8s.io/consume-provisioning-request"] == name
    assert annotations["autoscaling.x-k8s.io/provisioning-class-name"] == (
        request.inputs["spec"]["provisioningClassName"]
    )
    assert not any(key.startswith("cluster-autoscaler.kubernetes.io/") for key in annotations)
    assert schemas.custom_resource_errors(request.inputs, schemas.required_crds_dir()) == []
    worker = pod["containers"][0]["resources"]["requests"]
    assert counted["containers"][0]["resources"]["requests"] == {
        key: worker[key] for key in ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage")
    }
    # ... and names the image the workers pull (through the stream repository on x86).
    assert counted["containers"][0]["image"] == pod["containers"][0]["image"]
    schemas.validate_core(template.inputs, "1.34")


# --- scale to zero outside a reservation ------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "mode", "capacity"),
    [
        ("a4", "standard", "flexStart"),
        ("a4", "autopilot", "flexStart"),
        ("a3u", "standard", "spot"),
        ("a3u", "autopilot", "spot"),
        ("a3u", "standard", "flexStart"),
        ("a4", "autopilot", "spot"),
    ],
)
def test_outside_a_reservation_workers_and_nodes_scale_to_zero(
    stack: str, mode: str, capacity: str
) -> None:
    result = outside(stack, mode, capacity)
    nodes = PROFILES[stack].default_gpu_nodes
    cluster = result.one(RAY_CLUSTER)
    spec = cluster.inputs["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"]["idleTimeoutSeconds"] == IDLE_TIMEOUT_SECONDS
    group = worker_group(result)
    # N at start so the job's demand (and the request) exist; the autoscaler may take it to 0.
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, 0, nodes)
    assert "spec.workerGroupSpecs[0].replicas" in cluster.ignore_changes
    if mode == "standard":
        autoscaling = pool(result)["autoscaling"]
        assert (autoscaling["totalMinNodeCount"], autoscaling["totalMaxNodeCount"]) == (0, nodes)
    else:
        priority = result.one(COMPUTE_CLASS).inputs["spec"]["priorities"][0]
        assert "reservations" not in priority
        expected = {"flexStart": {"enabled": True}} if capacity == "flexStart" else {}
        expected = {"spot": True} if capacity == "spot" else expected
        assert {k: priority[k] for k in ("flexStart", "spot") if k in priority} == expected
    if mode == "autopilot":
        body = result.one(COMPUTE_CLASS).inputs
        assert schemas.custom_resource_errors(body, None) == []
    assert schemas.custom_resource_errors(cluster.inputs, schemas.required_crds_dir()) == []


def test_spot_standard_is_a_spot_pool_without_reservation() -> None:
    inputs = pool(outside("a3u", "standard", "spot"))
    assert inputs["nodeConfig"]["spot"] is True
    assert "flexStart" not in inputs["nodeConfig"] and "queuedProvisioning" not in inputs
    assert inputs["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "NO_RESERVATION"
    }
    assert inputs["management"]["autoRepair"] is True


def test_the_capacity_wait_sets_how_long_pulumi_waits_for_the_ray_cluster() -> None:
    result = outside("a3u", "standard", "spot", capacityWaitMinutes="240")
    assert result.one(RAY_CLUSTER).custom_timeouts == {"create": "300m", "update": "300m"}
    with pytest.raises(SettingsError, match="capacityWaitMinutes"):
        settings_for("a3u", "standard", {"verl-gke:capacityWaitMinutes": "5"})


# --- every unsupported combination is refused, with a fix that is accepted -----------------


def _fix_config(message: str, stack: str) -> dict[str, str | None]:
    """Apply the first `Fix:` of a message (pulumi config set/rm) to a config."""
    fix = message.split("Fix: ", 1)[1]
    if match := re.match(rf"pulumi config rm (\S+) -s {stack}", fix):
        return {match[1]: None}
    match = re.match(rf"pulumi config set (\S+) (\S+) -s {stack}", fix)
    assert match, fix
    return {match[1]: match[2]}


def _refusal(stack: str, mode: str, config: dict[str, str | None]) -> str:
    with pytest.raises(SettingsError) as caught:
        settings_for(stack, mode, config)
    (line,) = [p for p in str(caught.value).splitlines() if "verl-gke:capacity" in p]
    return line


UNSUPPORTED = [
    (profile.name, mode.value, capacity.value)
    for profile in PROFILES.values()
    for mode, support in profile.capacity.items()
    for capacity in Capacity
    if capacity not in support.supported
]


# AI Hypercomputer "Choose a consumption option" (docs.cloud.google.com/ai-hypercomputer/docs/
# consumption-models, comparison table; "Capacity overview" lists the same): future reservations
# for A4X, A4 and A3 Ultra (calendar mode for A4 and A3 Ultra too), flex-start and Spot for any GPU
# machine except A4X. On-demand is not among them for any of these machines.
AI_HYPERCOMPUTER_OPTIONS = {
    "a4x-highgpu-4g": {Capacity.RESERVATION},
    "a4-highgpu-8g": {Capacity.RESERVATION, Capacity.FLEX_START, Capacity.SPOT},
    "a3-ultragpu-8g": {Capacity.RESERVATION, Capacity.FLEX_START, Capacity.SPOT},
}
EVERY_MODE = [(p.name, m.value) for p in PROFILES.values() for m in p.modes]


def test_the_support_matrix_offers_only_what_ai_hypercomputer_sells() -> None:
    for profile in PROFILES.values():
        assert set(profile.capacity) == set(profile.modes), profile.name
        for mode, support in profile.capacity.items():
            sold = AI_HYPERCOMPUTER_OPTIONS[profile.machine_type]
            assert set(support.supported) <= sold, (profile.name, mode)


@pytest.mark.parametrize(("stack", "mode"), EVERY_MODE)
@pytest.mark.parametrize("reservation", ["gpu-res", None])
def test_the_default_capacity_is_one_ai_hypercomputer_sells(
    stack: str, mode: str, reservation: str | None
) -> None:
    sold = AI_HYPERCOMPUTER_OPTIONS[PROFILES[stack].machine_type]
    if PROFILES[stack].reservation_required and reservation is None:
        with pytest.raises(SettingsError) as caught:
            settings_for(stack, mode, {"verl-gke:reservation": None})
        assert "verl-gke:reservation is not set" in str(caught.value)
        return
    loaded = settings_for(stack, mode, {"verl-gke:reservation": reservation})
    assert loaded.settings.capacity in sold
    assert loaded.settings.capacity is not Capacity.ON_DEMAND


@pytest.mark.parametrize(("stack", "mode", "capacity"), UNSUPPORTED)
@pytest.mark.parametrize("reservation", ["gpu-res", None])
def test_unsupported_combinations_are_refused_with_reason_and_fix(
    stack: str, mode: str, capacity: str, reservation: str | None
) -> None:
    config = {"verl-gke:capacity": capacity, "verl-gke:reservation": reservation}
    line = _refusal(stack, mode, config)
    assert f"verl-gke:capacity = {capacity!r}" in line
    assert PROFILES[stack].capacity[Mode(mode)].refused_reason in line
    if PROFILES[stack].reservation_required and reservation is None:
        return  # the reservation itself is missing too; test_settings covers that message
    fixed = settings_for(stack, mode, {**config, **_fix_config(line, stack)})
    assert fixed.settings.capacity in AI_HYPERCOMPUTER_OPTIONS[PROFILES[stack].machine_type]


def test_on_demand_is_refused_everywhere() -> None:
    assert {(s, m) for s, m, c in UNSUPPORTED if c == Capacity.ON_DEMAND.value} == set(EVERY_MODE)


@pytest.mark.parametrize("capacity", ["flexStart", "spot"])
def test_a_reservation_with_capacity_outside_it_is_refused(capacity: str) -> None:
    line = _refusal("a3u", "standard", {"verl-gke:capacity": capacity})
    assert "NO_RESERVATION" in line
    fixed = settings_for(
        "a3u", "standard", {"verl-gke:capacity": capacity, **_fix_config(line, "a3u")}
    )
    assert fixed.settings.capacity.value == capacity and fixed.settings.reservation is None


def test_reservation_capacity_without_a_reservation_is_refused() -> None:
    config = {"verl-gke:reservation": None, "verl-gke:capacity": "reservation"}
    line = _refusal("a4", "autopilot", config)
    assert "no reservation to draw" in line
    # The second suggestion (no reservation at hand) is accepted too.
    assert "verl-gke:capacity flexStart" in line
    fixed = settings_for("a4", "autopilot", {**config, "verl-gke:capacity": "flexStart"})
    assert fixed.settings.capacity is Capacity.FLEX_START


def test_without_a_reservation_the_default_is_flex_start_scaled_from_zero() -> None:
    loaded = settings_for("a3u", "standard", {"verl-gke:reservation": None})
    assert loaded.settings.capacity is Capacity.FLEX_START
    assert loaded.settings.capacity_plan.scale_to_zero


def test_the_committed_reservation_placeholder_is_ignored_outside_a_reservation() -> None:
    # `python -m tools.plan a4 --set verl-gke:capacity=flexStart` on the committed stack file.
    result = run_stack("a4", {"verl-gke:capacity": "flexStart"})
    assert any("placeholder" in n and "uses no reservation" in n for n in result.notices)
    priority = result.one(COMPUTE_CLASS).inputs["spec"]["priorities"][0]
    assert priority["flexStart"] == {"enabled": True} and "reservations" not in priority


# --- the plan shows what you pay for -----------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_plan_shows_the_cost_facts_on_every_stack_and_mode(stack: str, mode: str) -> None:
    profile = PROFILES[stack]
    settings = settings_for(stack, mode, {}).settings
    text = "\n".join(what_you_pay_for(plan(stack, mode), settings))
    assert profile.machine_type in text
    assert f"GPU nodes: {settings.gpu_nodes}, GPUs: {settings.total_gpus}" in text
    assert "reservation gpu-res" in text and "billed whether used or not" in text
    assert re.search(r"first training step: \d+ min", text)
    if mode == Mode.AUTOPILOT.value:
        assert "in ComputeClass dranet-" in text


def test_the_plan_says_how_long_capacity_is_waited_for_outside_a_reservation() -> None:
    config = {"verl-gke:reservation": None, "verl-gke:capacity": "flexStart"}
    settings = settings_for("a4", "standard", config).settings
    text = "\n".join(what_you_pay_for(outside("a4", "standard", "flexStart"), settings))
    assert "capacity: flexStart, no reservation" in text
    assert "up to 90 min for the GPU nodes" in text and "scale to 0" in text
    assert "billed whether used or not" not in text


def test_tools_plan_prints_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    from tools.plan import main

    assert main(["a3u", "--set", "verl-gke:capacity=spot"]) == 0
    out = capsys.readouterr().out
    assert "What you pay for:" in out and "capacity: spot, no reservation" in out


# --- destroy and come back ------------------------------------------------------------------


def test_a_kept_bucket_is_adopted_and_a_missing_one_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {**REAL}
    bucket_name = "acme-ml-prod-verl-a3u"
    monkeypatch.delenv(EXISTING_BUCKETS_ENV, raising=False)
    first = run_stack("a3u", config, strict=True)
    assert first.one(BUCKET).inputs["name"] == bucket_name
    assert first.one(BUCKET).import_id == ""
    # After `pulumi destroy` the bucket (retainOnDelete) is still in the project.
    assert first.one(BUCKET).retain_on_delete
    monkeypatch.setenv(EXISTING_BUCKETS_ENV, f"other-bucket,{bucket_name}-old,{bucket_name}")
    again = run_stack("a3u", config, strict=True)
    assert again.one(BUCKET).import_id == bucket_name
    # Only the exact name counts, not a bucket that merely shares the prefix.
    monkeypatch.setenv(EXISTING_BUCKETS_ENV, f"{bucket_name}-old")
    assert run_stack("a3u", config, strict=True).one(BUCKET).import_id == ""
    # The job resumes where it left off: the same checkpoint folder in the adopted bucket.
    job = "pulumi-python:dynamic/jobs:RayJob"
    roots = {r.inputs.get("checkpoint_root") for r in first.of_type(job)} - {None}
    assert roots and roots == {r.inputs.get("checkpoint_root") for r in again.of_type(job)} - {None}
    assert offline_engine.EXISTING_BUCKETS_ENV == EXISTING_BUCKETS_ENV

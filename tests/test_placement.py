"""A4X placement: a reservation block or sub-block (one NVL72 domain) and an existing workload
policy (`verl-gke:placementPolicy`), in the forms GKE takes them.

Sources:
- AI Hypercomputer "Create a custom AI-optimized GKE cluster which uses A4X"
  (docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x, updated
  2026-04-06): the node pool's `--reservation` is
  `[projects/PROJECT_ID/reservations/]RESERVATION_NAME/reservationBlocks/BLOCK_NAME`, plus
  `/reservationSubBlocks/SUB_BLOCK_NAME` to place the VMs on a single sub-block; the pool takes
  the workload policy by name (`--placement-policy=WORKLOAD_POLICY_NAME`).
- gcloud hands `--reservation` to the API as the reservation affinity's value under the key
  `compute.googleapis.com/reservation-name`; Cluster Toolkit's gke-node-pool
  (reservation_definitions.tf at 1047080) builds that value the same way, the reservation path
  with its `/reservationBlocks/...` suffix kept.
- terraform-provider-google-beta v7.45.0 resource_container_node_pool.go,
  `placement_policy.policy_name`: the name of a resource policy "in the same project and region
  as the node pool".
- GKE ComputeClass CRD reference: `reservations.specific[].reservationBlock.reservationSubBlock`.
"""

from __future__ import annotations

import re

import pytest

from config.settings import SettingsError, load_settings
from tests.program import REAL, plan
from tests.support import schemas

NODE_POOL = "gcp:container/nodePool:NodePool"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
SUB_BLOCK = (
    "res-a/reservationBlocks/res-a-block-0001/reservationSubBlocks/res-a-block-0001-sub-0002"
)
GUIDE_FORMS = [
    "res-a",
    "res-a/reservationBlocks/res-a-block-0001",
    SUB_BLOCK,
    "projects/acme-ml-prod/reservations/res-a/reservationBlocks/b1/reservationSubBlocks/s2",
    "projects/shared-gpus/reservations/res-a",
]


def settings(stack: str, mode: str | None = None, **config: str | None):
    base = {**REAL, **({"verl-gke:mode": mode} if mode else {}), **config}
    values = {k: v for k, v in base.items() if v is not None}
    return load_settings(stack, values, offline=False).settings


def refusal(stack: str, key: str, **config: str | None) -> str:
    with pytest.raises(SettingsError) as caught:
        settings(stack, **config)
    (line,) = [p for p in str(caught.value).splitlines() if f"{key} = " in p]
    return line


def apply_fix(line: str, stack: str) -> dict[str, str | None]:
    """The first `Fix:` of a message (pulumi config set/rm) as config."""
    fix = line.split("Fix: ", 1)[1]
    if match := re.match(rf"pulumi config rm (\S+) -s {stack}", fix):
        return {match[1]: None}
    match = re.match(rf"pulumi config set (\S+) (\S+) -s {stack}", fix)
    assert match, fix
    return {match[1]: match[2]}


@pytest.mark.parametrize("reservation", GUIDE_FORMS)
def test_every_reservation_form_of_the_a4x_guide_reaches_the_pool_as_given(
    reservation: str,
) -> None:
    pool = plan("a4x", **{"verl-gke__reservation": reservation}).one(NODE_POOL).inputs
    assert pool["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": [reservation],
    }


@pytest.mark.parametrize(
    "reservation",
    [
        "res-a/reservationSubBlocks/s1",  # a sub-block lives inside a block
        "res-a/reservationBlocks/b1/reservationSubBlocks/",
        "res-a/reservationBlocks/b1/subBlocks/s1",
    ],
)
def test_reservation_paths_gke_does_not_take_are_refused_with_a_fix(reservation: str) -> None:
    line = refusal("a4x", "verl-gke:reservation", **{"verl-gke:reservation": reservation})
    assert "reservationSubBlocks/SUB_BLOCK" in line
    assert settings("a4x", **apply_fix(line, "a4x")).reservation is not None


def test_autopilot_compute_class_names_the_sub_block() -> None:
    result = plan("a4", "autopilot", **{"verl-gke__reservation": SUB_BLOCK})
    (compute_class,) = [
        r.inputs for r in result.resources if r.inputs.get("kind") == "ComputeClass"
    ]
    (specific,) = compute_class["spec"]["priorities"][0]["reservations"]["specific"]
    assert specific == {
        "name": "res-a",
        "project": "acme-ml-prod",
        "reservationBlock": {
            "name": "res-a-block-0001",
            "reservationSubBlock": {"name": "res-a-block-0001-sub-0002"},
        },
    }
    assert schemas.custom_resource_errors(compute_class, None) == []


@pytest.mark.parametrize(
    "policy",
    [
        "team-a4x-policy",
        "projects/acme-ml-prod/regions/us-central1/resourcePolicies/team-a4x-policy",
        "https://www.googleapis.com/compute/v1/projects/acme-ml-prod/regions/us-central1/"
        "resourcePolicies/team-a4x-policy",
    ],
)
def test_an_existing_workload_policy_is_used_by_name_and_none_is_created(policy: str) -> None:
    result = plan("a4x", **{"verl-gke__placementPolicy": policy})
    assert not result.of_type(POLICY)
    assert result.one(NODE_POOL).inputs["placementPolicy"] == {
        "type": "COMPACT",
        "policyName": "team-a4x-policy",
    }


def test_without_the_setting_the_stack_creates_its_own_policy() -> None:
    result = plan("a4x")
    name = result.one(POLICY).inputs["name"]
    assert result.one(NODE_POOL).inputs["placementPolicy"]["policyName"] == name


@pytest.mark.parametrize(
    "policy",
    [
        "projects/other-project/regions/us-central1/resourcePolicies/team-a4x-policy",
        "projects/acme-ml-prod/regions/europe-west4/resourcePolicies/team-a4x-policy",
    ],
)
def test_a_policy_outside_the_pools_project_and_region_is_refused(policy: str) -> None:
    line = refusal("a4x", "verl-gke:placementPolicy", **{"verl-gke:placementPolicy": policy})
    assert "own project and region" in line and "policy_name" in line
    assert settings("a4x", **apply_fix(line, "a4x")).placement_policy is None


@pytest.mark.parametrize("policy", ["Team_Policy", "regions/us-central1/resourcePolicies/p"])
def test_a_malformed_policy_is_refused(policy: str) -> None:
    line = refusal("a4x", "verl-gke:placementPolicy", **{"verl-gke:placementPolicy": policy})
    assert "resourcePolicies/NAME" in line
    assert settings("a4x", **apply_fix(line, "a4x")).placement_policy is None


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "autopilot")])
def test_profiles_without_a_workload_policy_refuse_the_setting(stack: str, mode: str) -> None:
    config = {"verl-gke:placementPolicy": "team-policy", "verl-gke:mode": mode}
    line = refusal(stack, "verl-gke:placementPolicy", **config)
    assert settings(stack, **{**config, **apply_fix(line, stack)}).placement_policy is None

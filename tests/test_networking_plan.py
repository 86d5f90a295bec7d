"""The one dispatch on the GPU-networking variant (config/networking.py): what each stack/mode
gets, and an unknown variant fails instead of being wired like another one."""

from __future__ import annotations

import dataclasses

import pytest

from config.networking import NetworkingPlan, NodeNics, PodNics, networking_plan
from config.profiles import PROFILES, GpuNetworking
from config.settings import StackSettings, load_settings
from manifests.ray_cluster import worker_networking
from tests.program import COMBINATIONS, REAL


def settings_for(stack: str, mode: str) -> StackSettings:
    return load_settings(stack, {**REAL, "verl-gke:mode": mode}, offline=False).settings


EXPECTED = {
    ("a4x", "standard"): (False, NodeNics.ACCELERATOR_PROFILE, PodNics.PER_NIC_CLAIMS),
    ("a4", "autopilot"): (False, NodeNics.GKE_MANAGED, PodNics.ALL_NICS_CLAIM),
    ("a4", "standard"): (True, NodeNics.ADDITIONAL_NETWORKS, PodNics.NETWORK_MAPPING),
    ("a3u", "autopilot"): (False, NodeNics.GKE_MANAGED, PodNics.ALL_NICS_CLAIM),
    ("a3u", "standard"): (True, NodeNics.ADDITIONAL_NETWORKS, PodNics.NETWORK_MAPPING),
}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_each_stack_and_mode_gets_its_plan(stack: str, mode: str) -> None:
    settings = settings_for(stack, mode)
    plan = settings.networking
    assert (plan.rdma_vpcs, plan.node_nics, plan.pod_nics) == EXPECTED[(stack, mode)]
    assert plan.variant is PROFILES[stack].networking_for(settings.mode)


def test_every_variant_has_a_plan() -> None:
    plans = {variant: networking_plan(variant) for variant in GpuNetworking}
    assert all(plan.variant is variant for variant, plan in plans.items())
    # Every way of wiring NICs is used by some variant: none is dead code.
    assert {plan.node_nics for plan in plans.values()} == set(NodeNics)
    assert {plan.pod_nics for plan in plans.values()} == set(PodNics)


def test_an_unknown_variant_fails_at_the_dispatch() -> None:
    with pytest.raises(AssertionError, match="infiniband"):
        networking_plan("infiniband")  # type: ignore[arg-type]


def test_an_unknown_pod_wiring_fails_in_the_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_for("a3u", "standard")
    unknown = dataclasses.replace(settings.networking, pod_nics="carrier-pigeon")
    monkeypatch.setattr(StackSettings, "networking", property(lambda _: unknown))
    assert isinstance(settings.networking, NetworkingPlan)
    with pytest.raises(AssertionError, match="carrier-pigeon"):
        worker_networking(settings, None)

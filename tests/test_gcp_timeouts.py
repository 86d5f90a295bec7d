"""A custom timeout on a GCP resource is never shorter than the bridged provider's own default.

Rule: a Pulumi `custom_timeouts` value replaces the Terraform provider's default for that
operation (pulumi-terraform-bridge, provider.go); a create that times out leaves GKE building an
object that is then outside the state. pulumi-gcp 10.2.0 bridges terraform-provider-google-beta
8.x (its SDK has google-beta 8.0.0's removals, e.g. no `notebooks` module, and its 31-character
node-pool `name_prefix`); the resources declare the defaults below
(`Timeouts: &schema.ResourceTimeout`), the same at v7.45.0 and after the 8.0.0 merge.
"""

from __future__ import annotations

import pytest

from tests.program import COMBINATIONS, plan
from tests.support.durations import minutes

# terraform-provider-google-beta v7.45.0 (3dc173a3) and main after the 8.0.0 merge (93c65b2d),
# google-beta/services/<service>/<file>.
PROVIDER_DEFAULT_MINUTES: dict[str, dict[str, float]] = {
    # container/resource_container_cluster.go: 90 min create/read/update/delete.
    "gcp:container/cluster:Cluster": {"create": 90, "update": 90, "delete": 90},
    # container/resource_container_node_pool.go: 2 h create/update/delete (since #18250).
    "gcp:container/nodePool:NodePool": {"create": 120, "update": 120, "delete": 120},
    # compute/resource_compute_resource_policy.go: 20 min create/update/delete.
    "gcp:compute/resourcePolicy:ResourcePolicy": {"create": 20, "update": 20, "delete": 20},
}


def test_durations_parse_as_the_engine_writes_them() -> None:
    assert minutes("90m") == 90 and minutes("2h") == 120 and minutes("1h30m") == 90
    with pytest.raises(ValueError):
        minutes("90")


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_no_gcp_custom_timeout_is_shorter_than_the_provider_default(stack: str, mode: str) -> None:
    timed = [
        r for r in plan(stack, mode).resources if r.type.startswith("gcp:") and r.custom_timeouts
    ]
    for resource in timed:
        defaults = PROVIDER_DEFAULT_MINUTES.get(resource.type)
        assert defaults is not None, (
            f"{resource.type} {resource.name} sets custom timeouts; add its provider defaults "
            f"(terraform-provider-google-beta Timeouts block) to PROVIDER_DEFAULT_MINUTES"
        )
        for operation, value in resource.custom_timeouts.items():
            assert minutes(value) >= defaults[operation], (resource.name, operation, value)
    # The cluster carries custom timeouts on every stack, so the rule is checked somewhere.
    assert any(r.type == "gcp:container/cluster:Cluster" for r in timed)

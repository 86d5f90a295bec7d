"""`verl-gke:placementPolicy`: an existing workload policy for the GPU pool's placement (A4X), in
the form GKE takes it.

A node pool names its placement policy by name, and the policy must be in the pool's own project
and region (terraform-provider-google-beta v7.45.0 resource_container_node_pool.go,
`placement_policy.policy_name`; AI Hypercomputer A4X guide:
`--placement-policy=WORKLOAD_POLICY_NAME`).
The setting also takes the policy's self-link, as `gcloud compute resource-policies describe`
prints it, and reduces it to the name.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_LINK = re.compile(
    r"^(https://(www|compute)\.googleapis\.com/compute/(v1|beta)/)?"
    r"projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)/resourcePolicies/(?P<name>[^/]+)$"
)


def policy_name(value: str) -> str:
    """The name GKE takes, from a name or a self-link."""
    return value.rsplit("/", 1)[-1]


def policy_problem(value: str, project: str, region: str) -> str | None:
    """Why GKE would not take `value` as the pool's placement policy, or None."""
    link = _LINK.match(value)
    if (link is None and "/" in value) or not _NAME.match(policy_name(value)):
        return (
            "expected a workload policy's NAME or its self-link "
            "projects/PROJECT/regions/REGION/resourcePolicies/NAME"
        )
    if link and (link["project"], link["region"]) != (project, region):
        return (
            f"GKE takes a node pool's placement policy by name from the pool's own project and "
            f"region ({project}, {region}; terraform-provider-google-beta "
            f"resource_container_node_pool.go, policy_name)"
        )
    return None

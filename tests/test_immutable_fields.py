"""A custom resource's immutable fields change only by replacement.

The API server rejects an update that changes a field whose CRD validation is `self == oldSelf`
(Kubernetes "Validation rules", transition rules), and pulumi-kubernetes updates a custom resource
in place unless the resource's `replaceOnChanges` names the changed path (pulumi-kubernetes
CustomResource; Pulumi resource option replaceOnChanges). So every immutable path a resource sets
must be covered by its replaceOnChanges, read from the CRDs the cluster installs
(VERL_GKE_CRDS_DIR: resource.nvidia.com ComputeDomain at v25.3.2, autoscaling.x-k8s.io
ProvisioningRequest, ray.io RayCluster).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.program import COMBINATIONS, plan
from tests.support.schemas import required_crds_dir

IMMUTABLE = "self == oldSelf"
CUSTOM_RESOURCE_KINDS = ("ComputeDomain", "ProvisioningRequest", "RayCluster")


def _immutable_paths(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    rules = [v.get("rule", "").replace(" ", "") for v in schema.get("x-kubernetes-validations", [])]
    if IMMUTABLE.replace(" ", "") in rules:
        yield path
    for key, child in schema.get("properties", {}).items():
        yield from _immutable_paths(child, f"{path}.{key}" if path else key)
    if "items" in schema:
        yield from _immutable_paths(schema["items"], f"{path}[*]")


def immutable_fields(directory: Path) -> dict[tuple[str, str], set[str]]:
    """(apiVersion, kind) -> the dotted paths the CRD declares immutable."""
    found: dict[tuple[str, str], set[str]] = {}
    for file in sorted(directory.glob("*.yaml")):
        for crd in yaml.safe_load_all(file.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                found[key] = set(_immutable_paths(schema))
    return found


def _is_set(inputs: Any, path: str) -> bool:
    value = inputs
    for part in path.replace("[*]", "").split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    return True


def _covered(path: str, replace_on_changes: frozenset[str]) -> bool:
    plain = path.replace("[*]", "")
    return any(
        option in ("*", plain) or plain.startswith(f"{option}.") for option in replace_on_changes
    )


def _directory() -> Path:
    return required_crds_dir()


def test_the_compute_domain_crd_declares_its_spec_immutable() -> None:
    fields = immutable_fields(_directory())
    assert "spec" in fields[("resource.nvidia.com/v1beta1", "ComputeDomain")]


# Every stack/mode, plus flex-start without a reservation (the ProvisioningRequest).
FLEX_START = {"verl-gke__capacity": "flexStart"}
CASES = [(stack, mode, {}) for stack, mode in COMBINATIONS] + [
    ("a4", "standard", FLEX_START),
    ("a3u", "standard", FLEX_START),
]


@pytest.mark.parametrize(("stack", "mode", "extra"), CASES)
def test_immutable_custom_resource_fields_replace_the_resource(
    stack: str, mode: str, extra: dict[str, str]
) -> None:
    fields = immutable_fields(_directory())
    unset = ("verl-gke:reservation",) if extra else ()
    result = plan(stack, mode, unset=unset, **extra)
    checked: set[str] = set()
    for resource in result.resources:
        inputs = dict(resource.inputs)
        for path in sorted(fields.get((inputs.get("apiVersion"), inputs.get("kind")), set())):
            if not _is_set(inputs, path):
                continue
            checked.add(inputs["kind"])
            assert _covered(path, resource.replace_on_changes), (
                f"{resource.name}: {path} is immutable ({IMMUTABLE}) but replaceOnChanges is "
                f"{sorted(resource.replace_on_changes)}"
            )
            # A fixed name: the old object must be gone before the new one is created.
            assert resource.delete_before_replace, resource.name
    if stack == "a4x":
        assert "ComputeDomain" in checked
    if extra:
        assert "ProvisioningRequest" in checked


def test_an_in_place_compute_domain_is_caught() -> None:
    """Without replaceOnChanges the rule above fails for the ComputeDomain."""
    fields = immutable_fields(_directory())[("resource.nvidia.com/v1beta1", "ComputeDomain")]
    assert not any(_covered(path, frozenset()) for path in fields)
    assert all(_covered(path, frozenset({"spec"})) for path in fields)

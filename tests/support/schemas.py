"""Offline schema validation of rendered Kubernetes objects.

Core kinds (including resource.k8s.io/v1) go through kubernetes-validate in strict mode at the
cluster's Kubernetes version. Custom resources are validated against their CRDs'
`openAPIV3Schema`, made strict (unknown fields rejected), from the directory named by
VERL_GKE_CRDS_DIR (default: .crds/ of the clone, which .ci/setup fills). GKE's ComputeClass has
no public CRD; it is checked against a small schema of the fields this program uses, written
from GKE's docs.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.support import require

CRDS_ENV = "VERL_GKE_CRDS_DIR"
CRDS_MISSING = (
    f"no CRD schemas: custom resources are validated against the CRDs of .ci/crds.txt, in .crds/ "
    f"of the clone or the folder {CRDS_ENV} names"
)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# cloud.google.com/v1 ComputeClass: the fields used here (GKE docs, "About custom compute
# classes", the ComputeClass CRD reference and the DRANET tutorial). Strict, so a typo in a
# field name fails.
_STRING = {"type": "string"}
COMPUTE_CLASS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "cloud.google.com/v1"},
        "kind": {"const": "ComputeClass"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["priorities"],
            "properties": {
                "nodePoolAutoCreation": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"enabled": {"type": "boolean"}},
                },
                "nodePoolConfig": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "dra": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "networking": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {"enabled": {"type": "boolean"}},
                                }
                            },
                        }
                    },
                },
                "priorities": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "machineType": _STRING,
                            "gpu": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["count", "type"],
                                "properties": {
                                    "count": {"type": "integer", "minimum": 1},
                                    "type": _STRING,
                                },
                            },
                            "acceleratorNetworkProfile": {"enum": ["auto"]},
                            # GKE ComputeClass CRD reference: `spot: true`; flex-start rule as
                            # in public ComputeClasses (config/profiles.py, capacity sources).
                            "spot": {"type": "boolean"},
                            "flexStart": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["enabled"],
                                "properties": {"enabled": {"type": "boolean"}},
                            },
                            "reservations": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["affinity"],
                                "properties": {
                                    "affinity": {"enum": ["Specific", "AnyBestEffort", "None"]},
                                    "specific": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "additionalProperties": False,
                                            "required": ["name"],
                                            "properties": {
                                                "name": _STRING,
                                                "project": _STRING,
                                                "reservationBlock": {
                                                    "type": "object",
                                                    "additionalProperties": False,
                                                    "required": ["name"],
                                                    "properties": {
                                                        "name": _STRING,
                                                        "reservationSubBlock": {
                                                            "type": "object",
                                                            "additionalProperties": False,
                                                            "required": ["name"],
                                                            "properties": {"name": _STRING},
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def crds_dir() -> Path | None:
    value = os.environ.get(CRDS_ENV)
    return Path(value) if value else None


def required_crds_dir() -> Path:
    """The CRD folder; a test that needs it is skipped locally and fails in CI without it
    (tests/support/require.py)."""
    directory = crds_dir()
    require.require(directory is not None, CRDS_MISSING)
    assert directory is not None
    require.require(
        directory.is_dir() and any(directory.glob("*.yaml")),
        f"{CRDS_ENV}={directory} holds no CRD files (*.yaml)",
    )
    return directory


def validation_version(kubernetes_version: str) -> str:
    """kubernetes-validate's schema version for a GKE version such as `1.34` or `1.34.1-gke.1`."""
    major, minor = kubernetes_version.split(".")[:2]
    return f"{major}.{minor}.0"


def validate_core(body: Mapping[str, Any], kubernetes_version: str) -> None:
    """Raises kubernetes_validate.ValidationError for an invalid object and SchemaNotFoundError
    for a kind kubernetes-validate does not know (a custom resource)."""
    kubernetes_validate.validate(dict(body), validation_version(kubernetes_version), strict=True)


def is_core_kind(body: Mapping[str, Any], kubernetes_version: str) -> bool:
    probe = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": {"name": "x"}}
    try:
        kubernetes_validate.validate(probe, validation_version(kubernetes_version), strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        return True
    return True


def _strict(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema that rejects unknown fields, as the API server prunes
    them (and kubectl --validate=strict rejects them)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string") and "type" not in out and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@cache
def _crd_schemas(directory: str) -> dict[tuple[str, str], dict[str, Any]]:
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        for document in yaml.load_all(path.read_text(), Loader=_Loader):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            for version in spec["versions"]:
                api_version = f"{spec['group']}/{version['name']}"
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(api_version, spec["names"]["kind"])] = _strict(schema)
    return schemas


def known_custom_kinds(directory: Path) -> set[tuple[str, str]]:
    return set(_crd_schemas(str(directory)))


def custom_resource_errors(body: Mapping[str, Any], directory: Path | None) -> list[str]:
    """Every schema violation of a custom resource; also checks its metadata as ObjectMeta.
    `directory` (the CRDs) may be None for ComputeClass, whose schema is built in."""
    key = (body["apiVersion"], body["kind"])
    if key == ("cloud.google.com/v1", "ComputeClass"):
        schema = COMPUTE_CLASS_SCHEMA
    elif directory is None:
        return [f"no CRD directory to validate {key[0]} {key[1]}: {CRDS_MISSING}"]
    else:
        schemas = _crd_schemas(str(directory))
        if key not in schemas:
            return [f"no CRD for {key[0]} {key[1]} in {directory}"]
        schema = schemas[key]
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(copy.deepcopy(dict(body)))
    ]
    errors.extend(_metadata_errors(body))
    return errors


def _metadata_errors(body: Mapping[str, Any]) -> list[str]:
    # CRD schemas leave metadata as a bare object; the API server checks it as ObjectMeta.
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": body.get("metadata")}
    try:
        kubernetes_validate.validate(probe, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"metadata: {error}"]
    return []


def walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (dotted path, value) pair of a nested manifest."""
    yield path, value
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]")

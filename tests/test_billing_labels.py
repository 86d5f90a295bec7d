"""Every GCP resource of a stack that takes labels carries the Pulumi project and stack, so a bill
can be split by stack (GKE "Create and manage cluster and node pool labels": labels are forwarded
to the billing system)."""

from __future__ import annotations

import inspect
import re

import pulumi_gcp as gcp
import pytest

from config.billing_labels import PROJECT_LABEL, STACK_LABEL, billing_labels, label_value
from planning.offline_engine import PROJECT
from tests.program import COMBINATIONS, plan

# GCP label rules (same page; Compute Engine and Cloud Storage state the same): keys start with a
# lowercase letter, keys and values are lowercase letters, digits, '_' and '-', at most 63 long.
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# The top-level arguments through which a pulumi_gcp resource takes GCP labels.
LABEL_ARGUMENTS = {"labels": "labels", "resource_labels": "resourceLabels"}


def _label_argument(type_token: str) -> str | None:
    """The input (camelCase, as recorded) through which the pulumi_gcp resource type of
    `type_token` ("gcp:storage/bucket:Bucket") takes labels, read from the SDK itself."""
    module, _, class_name = type_token.removeprefix("gcp:").partition(":")
    resource_class = getattr(getattr(gcp, module.split("/")[0]), class_name)
    parameters = inspect.signature(resource_class._internal_init).parameters
    return next((LABEL_ARGUMENTS[p] for p in LABEL_ARGUMENTS if p in parameters), None)


def _labelled_types(stack: str, mode: str) -> list[str]:
    """The label-taking GCP resources of the stack's render, each checked for both labels."""
    labelled = []
    for resource in plan(stack, mode).resources:
        if not resource.custom or not resource.type.startswith("gcp:"):
            continue
        argument = _label_argument(resource.type)
        if argument is None:
            continue
        labels = resource.inputs.get(argument) or {}
        assert labels.get(STACK_LABEL) == stack, (resource.type, resource.name, labels)
        assert labels.get(PROJECT_LABEL) == PROJECT, (resource.type, resource.name, labels)
        labelled.append(resource.type)
    return labelled


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_labelled_gcp_resource_carries_project_and_stack(stack: str, mode: str) -> None:
    labelled = _labelled_types(stack, mode)
    # The GKE cluster and the checkpoint bucket are in every stack.
    assert {"gcp:container/cluster:Cluster", "gcp:storage/bucket:Bucket"} <= set(labelled)


def test_the_image_streaming_repository_is_labelled_too() -> None:
    # Created where the stack streams the worker image (config/image_streaming.py).
    found = [t for stack, mode in COMBINATIONS for t in _labelled_types(stack, mode)]
    assert "gcp:artifactregistry/repository:Repository" in found


@pytest.mark.parametrize(
    ("project", "stack"),
    [("verl-gke", "a4x"), ("Verl.GKE", "team.A4x_prod-2"), ("p", "s" * 100)],
)
def test_labels_follow_gcp_label_rules(project: str, stack: str) -> None:
    # Pulumi stack and project names may hold capitals and '.' (up to 100 characters).
    for key, value in billing_labels(project, stack).items():
        assert LABEL_KEY.match(key), key
        assert LABEL_VALUE.match(value), value


def test_distinct_stacks_keep_distinct_labels() -> None:
    assert label_value("a4x") != label_value("a4")
    assert label_value("Team-A") == "team-a"

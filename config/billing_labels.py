"""GCP labels that let a bill be split by stack: every GCP resource of the stack that takes labels
carries the Pulumi project and stack.

Label rules (GKE "Create and manage cluster and node pool labels", the same for Compute Engine and
Cloud Storage): keys 1-63 characters starting with a lowercase letter, values 0-63 characters,
both of lowercase letters, digits, `_` and `-`.
"""

from __future__ import annotations

import re

STACK_LABEL = "verl-gke-stack"
PROJECT_LABEL = "verl-gke-project"
MAX_LABEL_LENGTH = 63
_NOT_ALLOWED = re.compile(r"[^a-z0-9_-]")


def label_value(text: str) -> str:
    """`text` as a label value: lowercased, other characters (a stack name may hold `.`, a
    project name `.` or capitals) turned into `_`, cut to 63 characters."""
    return _NOT_ALLOWED.sub("_", text.lower())[:MAX_LABEL_LENGTH]


def billing_labels(pulumi_project: str, stack: str) -> dict[str, str]:
    """The labels every labelled GCP resource of `stack` carries."""
    return {PROJECT_LABEL: label_value(pulumi_project), STACK_LABEL: label_value(stack)}

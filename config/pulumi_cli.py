"""The Pulumi CLI this program needs, checked before anything is registered.

The GRPO job uses the `replace_with` resource option (components/grpo_training.py), which the
engine supports from Pulumi CLI 3.207.0 (pulumi/pulumi CHANGELOG 3.207.0, #20693). Under an older
CLI the SDK would fail only when it reaches the job, after the cluster and node pools have been
registered. The engine reports what it supports before the program runs
(`GetDeploymentInfo`, or `SupportsFeature` probes on older CLIs), so the check is exact for
every CLI version and needs no version parsing.
"""

from __future__ import annotations

import pulumi
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.proto import resource_pb2

MIN_PULUMI_CLI = "3.207.0"


class PulumiCliTooOld(pulumi.RunError):
    """The CLI running the program lacks an engine feature the program uses."""


def require_engine() -> None:
    """Exit with how the program is run when no Pulumi engine runs it (`python __main__.py`):
    the language host connects the resource monitor before it runs the program
    (pulumi.runtime.settings.get_monitor), and the offline plan's mocks do the same."""
    if runtime_settings.get_monitor() is not None:
        return
    raise SystemExit(
        "This is a Pulumi program: the Pulumi CLI runs it, with a stack's configuration. Run "
        "`pulumi up -s a4x` (or a4, a3u; README, Quick start), or see what it would create "
        "without a cloud account: `.venv/bin/python -m tools.plan a4x`."
    )


def require_cli_features() -> None:
    """Fail with the minimum version and the fix unless the engine supports `replace_with`."""
    if runtime_settings.monitor_supports_feature(
        resource_pb2.RESOURCE_MONITOR_FEATURE_REPLACE_WITH
    ):
        return
    raise PulumiCliTooOld(
        f"This program needs Pulumi CLI {MIN_PULUMI_CLI} or newer: the GRPO job uses the "
        f"replaceWith resource option, which this CLI does not support. No resource was created. "
        f"Fix: install Pulumi CLI {MIN_PULUMI_CLI} or newer (docs/real-systems.md, "
        f'"Pulumi CLI 3.207.0 or newer"), check '
        f"with `pulumi version`, and run the command again."
    )

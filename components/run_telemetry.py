"""What a run needs to be watched from outside the cluster: the log forwarder's config (Ray's
logs to Cloud Logging, manifests/log_forwarding.py) and, when the stack has a key, the Weights &
Biases Secret the Ray pods read (manifests/trackers.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from manifests import log_forwarding, trackers


@dataclass(frozen=True)
class RunTelemetryArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace


class RunTelemetry(pulumi.ComponentResource):
    log_config: k8s.core.v1.ConfigMap
    wandb_secret: k8s.core.v1.Secret | None

    def __init__(
        self, name: str, args: RunTelemetryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:run_telemetry:RunTelemetry", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(
            parent=self, provider=args.cluster.provider, depends_on=[args.namespace]
        )
        body = log_forwarding.config_map(s)
        self.log_config = k8s.core.v1.ConfigMap(
            f"{name}-log-forwarder", metadata=body["metadata"], data=body["data"], opts=child
        )
        self.wandb_secret = None
        if trackers.wandb_enabled(s) and s.wandb_api_key is not None:
            secret = trackers.wandb_secret(s)
            self.wandb_secret = k8s.core.v1.Secret(
                f"{name}-wandb-secret",
                metadata=secret["metadata"],
                type=secret["type"],
                string_data=pulumi.Output.secret(
                    {trackers.WANDB_SECRET_KEY: s.wandb_api_key.get_secret_value()}
                ),
                opts=child,
            )
        self.register_outputs({"logForwarderConfig": body["metadata"]["name"]})

"""The worker-image pre-puller of a Standard stack without image streaming (A4X by default):
a DaemonSet on the GPU nodes (manifests/prepull.py), created with the cluster,
long before the GPU pool has nodes, so its pod starts pulling the moment a GPU node registers.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from config.settings import StackSettings
from manifests import prepull


@dataclass(frozen=True)
class ImagePrepullArgs:
    settings: StackSettings
    cluster: GkeCluster


class ImagePrepull(pulumi.ComponentResource):
    daemon_set: k8s.apps.v1.DaemonSet

    def __init__(
        self, name: str, args: ImagePrepullArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:image_prepull:ImagePrepull", name, None, opts)
        body = prepull.prepull_daemon_set(args.settings)
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=body["metadata"],
            spec=body["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.cluster.provider),
        )
        self.register_outputs({})

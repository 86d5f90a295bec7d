"""Where the nodes stream the worker image from (GKE Image streaming, config/image_streaming.py).

With image streaming (the x86 stacks by default): the two Google APIs streaming needs, an Artifact
Registry remote repository in front of Docker Hub in the cluster's region, and the reader role on
it for the nodes' service account (components/node_identity.py). Nothing here needs the cluster,
so it is created alongside the network, and the cluster waits for the Container File System API
(a Standard pool with gcfsConfig needs it at create time; components/gke_cluster.py). The pods'
Docker Hub images are rewritten to the repository (config/image_streaming.through_registry);
those pods wait for `ready`, so their first pull does not race the repository's creation or the
role grant.

Without streaming the worker image is pre-pulled instead (components/image_prepull.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from config.billing_labels import billing_labels
from config.image_streaming import (
    ARTIFACT_REGISTRY_API,
    CONTAINER_FILE_SYSTEM_API,
    DOCKER_HUB_UPSTREAM,
    READER_ROLE,
)
from config.settings import StackSettings


@dataclass(frozen=True)
class ImageRegistryArgs:
    settings: StackSettings
    # The nodes' service account as an IAM member (NodeIdentity.member): the nodes pull.
    node_member: pulumi.Input[str]


class ImageRegistry(pulumi.ComponentResource):
    # The APIs, enabled and kept enabled on destroy: other workloads of the project may use them.
    streaming_api: gcp.projects.Service
    registry_api: gcp.projects.Service
    repository: gcp.artifactregistry.Repository
    reader: gcp.artifactregistry.RepositoryIamMember
    # What a pod pulling through the repository waits for.
    ready: list[pulumi.Resource]

    def __init__(
        self, name: str, args: ImageRegistryArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:image_registry:ImageRegistry", name, None, opts)
        s = args.settings
        plan = s.image_pull
        if plan.repository_id is None:
            raise ValueError(
                f"{s.profile.name} {s.mode.value}: no image repository without image streaming"
            )
        self.streaming_api, self.registry_api = (
            gcp.projects.Service(
                f"{name}-{role}-api",
                project=s.project,
                service=service,
                # An API already on is only recorded (terraform-provider-google's
                # google_project_service create lists the enabled services first); disabling on
                # destroy would break whatever else in the project streams images or reads
                # Artifact Registry.
                disable_on_destroy=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for role, service in (
                ("streaming", CONTAINER_FILE_SYSTEM_API),
                ("registry", ARTIFACT_REGISTRY_API),
            )
        )
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-dockerhub",
            project=s.project,
            # Same region as the nodes: streaming reads the image from here.
            location=s.region,
            repository_id=plan.repository_id,
            format="DOCKER",
            mode="REMOTE_REPOSITORY",
            description="Docker Hub through Artifact Registry, for GKE Image streaming",
            labels=billing_labels(pulumi.get_project(), s.stack),
            remote_repository_config=gcp.artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                description="Docker Hub",
                docker_repository=gcp.artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                    public_repository=DOCKER_HUB_UPSTREAM
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.registry_api]),
        )
        # The nodes pull as their own service account, which has no other access to Artifact
        # Registry.
        self.reader = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-node-reader",
            project=s.project,
            location=s.region,
            repository=self.repository.repository_id,
            role=READER_ROLE,
            member=args.node_member,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.ready = [self.streaming_api, self.repository, self.reader]
        self.register_outputs({"registry": plan.registry})

"""The nodes' own Google service account, with only the roles GKE documents for nodes.

Every node runs as it: the Standard CPU and GPU pools (node_config.service_account) and
Autopilot's nodes (cluster_autoscaling.auto_provisioning_defaults.service_account). Without it
they would run as the Compute Engine default service account, which often holds Editor on the
project. Pods reach Google APIs through Workload Identity (the bucket: components/storage.py),
never through this account. Roles and sources: config/cluster_security.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from config.cluster_security import node_account_id, node_roles
from config.image_streaming import READER_ROLE, artifact_registry_repository
from config.settings import StackSettings
from config.stack_values import image_fields


@dataclass(frozen=True)
class NodeIdentityArgs:
    settings: StackSettings


class NodeIdentity(pulumi.ComponentResource):
    account: gcp.serviceaccount.Account
    email: pulumi.Output[str]
    # `serviceAccount:<email>`, for IAM bindings elsewhere (the stack's image repository).
    member: pulumi.Output[str]
    # What a node pool or cluster using the account waits for: the account and its roles.
    ready: list[pulumi.Resource]

    def __init__(
        self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:node_identity:NodeIdentity", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        self.account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            project=s.project,
            account_id=node_account_id(s.cluster_name),
            display_name=f"GKE nodes of {s.cluster_name}",
            opts=child,
        )
        self.email = self.account.email
        self.member = self.account.email.apply(lambda email: f"serviceAccount:{email}")
        roles = [
            gcp.projects.IAMMember(
                f"{name}-{role.rsplit('.', 1)[-1]}",
                project=s.project,
                role=role,
                member=self.member,
                opts=child,
            )
            for role in node_roles(s.image_pull.streaming)
        ]
        self.ready = [self.account, *roles, *self._image_readers(name, s)]
        self.register_outputs({"email": self.email})

    def _image_readers(self, name: str, s: StackSettings) -> list[pulumi.Resource]:
        """The reader role on each Artifact Registry repository of the stack's project that a
        configured image lives in (a user's own verlImage, say). Docker Hub images need none;
        the stack's remote repository grants its own (components/image_registry.py); a public
        repository of another project (Google's NCCL installer images) is readable by anyone,
        and a private one of another project is the user's to grant (docs/deploying.md,
        "Security baseline")."""
        repositories = {
            repo
            for field in image_fields()
            if (repo := artifact_registry_repository(getattr(s, field))) is not None
            and repo.project == s.project
        }
        return [
            gcp.artifactregistry.RepositoryIamMember(
                f"{name}-reader-{repo.project}-{repo.location}-{repo.repository}",
                project=repo.project,
                location=repo.location,
                repository=repo.repository,
                role=READER_ROLE,
                member=self.member,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for repo in sorted(repositories, key=lambda r: (r.project, r.location, r.repository))
        ]

"""Training storage: the GCS bucket, the workload's identity and access to the bucket, the Hugging
Face secret and the GCS FUSE volumes of the bucket: /data with and without the file cache, and
/checkpoints (the tutorial's gcsfuse-storage.yaml, split in two mounts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.workload_namespace import WorkloadNamespace
from config.billing_labels import billing_labels
from config.settings import StackSettings
from manifests import storage as manifests
from manifests.common import HF_SECRET_KEY, Manifest


def existing_bucket(settings: StackSettings) -> str | None:
    """The bucket's name when it already exists in the project (kept by an earlier destroy),
    else None. Listing by prefix answers "missing" with an empty list, where get_bucket would
    fail; once the bucket is in the stack's state, the same import id is a no-op."""
    found = gcp.storage.get_buckets(prefix=settings.bucket_name, project=settings.project)
    names = {bucket.name for bucket in found.buckets or []}
    return settings.bucket_name if settings.bucket_name in names else None


@dataclass(frozen=True)
class TrainingStorageArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace


class TrainingStorage(pulumi.ComponentResource):
    bucket: gcp.storage.Bucket
    bucket_url: pulumi.Output[str]
    service_account: k8s.core.v1.ServiceAccount
    bucket_access: gcp.storage.BucketIAMMember
    hf_secret: k8s.core.v1.Secret
    # /data with the file cache (GPU workers) and without it (Ray head, data prep).
    volume: k8s.core.v1.PersistentVolume
    claim: k8s.core.v1.PersistentVolumeClaim
    uncached_volume: k8s.core.v1.PersistentVolume
    uncached_claim: k8s.core.v1.PersistentVolumeClaim
    # The Ray pods' checkpoint mount of the same bucket (metadata never cached).
    checkpoint_volume: k8s.core.v1.PersistentVolume
    checkpoint_claim: k8s.core.v1.PersistentVolumeClaim

    def __init__(
        self, name: str, args: TrainingStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because it declares the bucket, its IAM binding and the Kubernetes storage objects
        in the order they depend on each other."""
        super().__init__("verl-gke:storage:TrainingStorage", name, None, opts)
        s = args.settings

        def child(depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(
                parent=self, provider=args.cluster.provider, depends_on=depends_on
            )

        # The bucket holds the checkpoints: by default `pulumi destroy` leaves it (and its
        # objects) in place; verl-gke:deleteBucketOnDestroy deletes both.
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=s.bucket_name,
            project=s.project,
            location=s.region,
            uniform_bucket_level_access=True,
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=True),
            public_access_prevention="enforced",
            force_destroy=s.delete_bucket_on_destroy,
            labels=billing_labels(pulumi.get_project(), s.stack),
            opts=pulumi.ResourceOptions(
                parent=self,
                retain_on_delete=not s.delete_bucket_on_destroy,
                # Destroy and come back: the bucket `pulumi destroy` kept is adopted by the next
                # `pulumi up` of the stack instead of failing on "you already own this bucket".
                import_=existing_bucket(s),
            ),
        )
        self.bucket_url = self.bucket.name.apply(lambda bucket: f"gs://{bucket}")

        project = gcp.organizations.get_project_output(project_id=s.project)
        self.bucket_access = gcp.storage.BucketIAMMember(
            f"{name}-object-user",
            bucket=self.bucket.name,
            role=manifests.OBJECT_USER_ROLE,
            member=project.number.apply(
                lambda number: manifests.workload_identity_principal(s, number)
            ),
            # The principal names the project's Workload Identity pool, which exists only once
            # the first cluster with Workload Identity does; IAM rejects it before that.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.cluster.cluster]),
        )

        account = manifests.service_account(s)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-ksa", metadata=account["metadata"], opts=child([args.namespace])
        )
        secret = manifests.hf_secret(s)
        self.hf_secret = k8s.core.v1.Secret(
            f"{name}-hf-secret",
            metadata=secret["metadata"],
            type=secret["type"],
            string_data=pulumi.Output.secret({HF_SECRET_KEY: s.hf_token.get_secret_value()}),
            opts=child([args.namespace]),
        )
        # Three PVs of the bucket: /data read-mostly with and without the file cache,
        # /checkpoints never cached (manifests/storage.py).
        self.volume, self.claim = self._fuse_mount(
            name, manifests.bucket_pv(s), manifests.bucket_pvc(s), child, args.namespace
        )
        self.uncached_volume, self.uncached_claim = self._fuse_mount(
            f"{name}-uncached",
            manifests.uncached_bucket_pv(s),
            manifests.uncached_bucket_pvc(s),
            child,
            args.namespace,
        )
        self.checkpoint_volume, self.checkpoint_claim = self._fuse_mount(
            f"{name}-checkpoint",
            manifests.checkpoint_pv(s),
            manifests.checkpoint_pvc(s),
            child,
            args.namespace,
        )
        self.register_outputs({"bucket": self.bucket.name, "bucketUrl": self.bucket_url})

    def _fuse_mount(
        self,
        prefix: str,
        volume: Manifest,
        claim: Manifest,
        child: Callable[[list[pulumi.Resource]], pulumi.ResourceOptions],
        namespace: WorkloadNamespace,
    ) -> tuple[k8s.core.v1.PersistentVolume, k8s.core.v1.PersistentVolumeClaim]:
        """A GCS FUSE PersistentVolume of the bucket and the claim bound to it."""
        pv = k8s.core.v1.PersistentVolume(
            f"{prefix}-pv",
            metadata=volume["metadata"],
            spec=volume["spec"],
            opts=child([self.bucket]),
        )
        pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{prefix}-pvc",
            metadata=claim["metadata"],
            spec=claim["spec"],
            opts=child([pv, namespace]),
        )
        return pv, pvc

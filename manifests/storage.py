"""Workload namespace, identity, the Hugging Face secret and the GCS FUSE volume (tutorial §4)."""

from __future__ import annotations

from config.settings import StackSettings
from manifests.common import (
    BUCKET_PV,
    BUCKET_PVC,
    HF_SECRET,
    Manifest,
    accepted_findings,
    default_namespace_findings,
    metadata,
)

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# Static binding by class name; no StorageClass object of that name exists (tutorial §4.4).
GCSFUSE_STORAGE_CLASS = "gcsfuse-sc"
# The PV's nominal size; GCS has no capacity, Kubernetes needs a number (tutorial §4.4).
GCSFUSE_CAPACITY = "768Gi"
# tutorial-facts §4.4, in the tutorial's order.
GCSFUSE_MOUNT_OPTIONS = (
    "implicit-dirs",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:0",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    "write:global-max-blocks:200000",
)
OBJECT_USER_ROLE = "roles/storage.objectUser"


def bucket_url(settings: StackSettings) -> str:
    return f"gs://{settings.bucket_name}"


def workload_namespace(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(settings.namespace, "workload"),
    }


def service_account(settings: StackSettings) -> Manifest:
    # No annotation: the bucket grants the KSA's own Workload Identity principal directly.
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(
            settings.ksa_name,
            "storage",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
    }


def workload_identity_principal(settings: StackSettings, project_number: str) -> str:
    """The IAM principal of the KSA (Workload Identity Federation, no Google service account)."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{settings.project}.svc.id.goog/subject/ns/{settings.namespace}/"
        f"sa/{settings.ksa_name}"
    )


def hf_secret(settings: StackSettings) -> Manifest:
    """The Secret without its value; the component adds `stringData` as a Pulumi secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(
            HF_SECRET,
            "storage",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "type": "Opaque",
    }


def bucket_pv(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(BUCKET_PV, "storage"),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "capacity": {"storage": GCSFUSE_CAPACITY},
            # The tutorial says Delete; the CSI driver cannot delete a bucket, so a released PV
            # would only turn Failed. Retain states what happens: the bucket stays.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": GCSFUSE_STORAGE_CLASS,
            # Reserved for our claim, so no other PVC of the class can bind it.
            "claimRef": {"namespace": settings.namespace, "name": BUCKET_PVC},
            "mountOptions": list(GCSFUSE_MOUNT_OPTIONS),
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "volumeHandle": settings.bucket_name,
                "volumeAttributes": {
                    "skipCSIBucketAccessCheck": "true",
                    "gcsfuseMetadataPrefetchOnMount": "true",
                },
            },
        },
    }


def bucket_pvc(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(BUCKET_PVC, "storage", settings.namespace),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": GCSFUSE_CAPACITY}},
            "storageClassName": GCSFUSE_STORAGE_CLASS,
            "volumeName": BUCKET_PV,
        },
    }

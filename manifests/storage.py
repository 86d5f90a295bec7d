"""Workload namespace, identity, the Hugging Face secret and the GCS FUSE volume (tutorial)."""

from __future__ import annotations

from config.bucket_layout import CHECKPOINT_PREFIX
from config.settings import StackSettings
from manifests.common import (
    BUCKET_PV,
    BUCKET_PVC,
    BUCKET_UNCACHED_PV,
    BUCKET_UNCACHED_PVC,
    CHECKPOINT_PV,
    CHECKPOINT_PVC,
    HF_SECRET,
    Manifest,
    accepted_findings,
    default_namespace_findings,
    metadata,
)
from manifests.fuse_mounts import FILE_CACHE_MAX_SIZE_MIB

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# Static binding by class name; no StorageClass object of that name exists (gcsfuse-storage.yaml).
GCSFUSE_STORAGE_CLASS = "gcsfuse-sc"
# The PV's nominal size; GCS has no capacity, Kubernetes needs a number (gcsfuse-storage.yaml).
GCSFUSE_CAPACITY = "768Gi"
# Three PVs of the one bucket. kubelet names a CSI volume `driver^volumeHandle`
# (pkg/volume/csi csiPlugin.GetVolumeName), so two PVs with one handle are one mount in a pod. The
# driver takes `<bucket>:<anything>` as the handle and mounts the bucket before the first ':'
# (gcs-fuse-csi-driver pkg/util/util.go ParseVolumeID, commit 2ed24c70 "Allow multiple volume
# handles with different mount options"; GKE >= 1.33.0-gke.1932000, docs/releases.md; this
# project's floor is 1.34). Bucket names cannot contain ':'.
DATA_HANDLE_SUFFIX = "data"
DATA_UNCACHED_HANDLE_SUFFIX = "data-uncached"
CHECKPOINT_HANDLE_SUFFIX = "checkpoints"
#
# Read-mostly, at DATA_MOUNT: verl checkout, GSM8K, the model. Metadata cached for good and a file
# cache with parallel downloads (GKE "Manually optimize Cloud Storage FUSE CSI driver for
# performance"; Google's model-loading recipe). Negative entries are not cached, so what data prep
# writes later is still found. Single writers only (data prep, HF_HOME, model export): nothing
# that another node must see changing in place.
#
# Every option gcsfuse's machine-type tuning also sets is given in flag form (`name=value`, passed
# as `--name=value`), never as a config-file key (`a:b:value`): on A3 Ultra, A4 and A4X gcsfuse
# v3.4.0 to v3.5.9 let the tuning override config-file values (docs/troubleshooting.md; cmd/root.go
# asks pflag only), e.g. metadata TTL -1 (cfg/params.yaml). Flags take precedence in every version.
# The CSI driver passes an option containing '=' as a flag and one with ':' and no '=' as a
# config-file key (pkg/sidecar_mounter/sidecar_mounter_config.go prepareMountArgs). The rule is
# tests/test_gcsfuse_options.py.
#
# Streaming writes (data prep, model export, checkpoints) draw blocks from a per-mount budget,
# write-global-max-blocks; when it is spent a file falls back to staged writes on the sidecar's
# disk (gcsfuse internal/fs/inode/file.go). gcsfuse's own budget depends on the version: 1600 on
# a high-performance machine, 4 (params.yaml default) elsewhere, and A4 (a4-highgpu-8g) and A4X
# join that group only in v3.5 (cfg/params.yaml machine-type-groups; v3.2.7 cfg/optimize.go).
# The flag gives every shipped version gcsfuse's high-performance value.
GCSFUSE_WRITE_GLOBAL_MAX_BLOCKS = 1600
READ_MOSTLY_MOUNT_OPTIONS = (
    "implicit-dirs",
    "metadata-cache-negative-ttl-secs=0",
    "metadata-cache-ttl-secs=-1",
    "stat-cache-max-size-mb=-1",
    "type-cache-max-size-mb=-1",
    # Bounded below the workers' cache volume (manifests/fuse_mounts.py).
    f"file-cache:max-size-mb:{FILE_CACHE_MAX_SIZE_MIB}",
    "file-cache:cache-file-for-range-read:true",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
    f"write-global-max-blocks={GCSFUSE_WRITE_GLOBAL_MAX_BLOCKS}",
)
# The same mount without the file cache, for the pods that declare no sized `gke-gcsfuse-cache`
# volume (the Ray head, the data-prep Job): there the webhook adds an emptyDir without a size
# limit as the cache (gcs-fuse-csi-driver pkg/webhook/sidecar_spec.go
# GetSidecarContainerVolumeSpec), held to the pod's ephemeral-storage limit, far below the data
# mount's cap. The driver gives gcsfuse a cache-dir only when file-cache:max-size-mb is present
# and not 0, otherwise "" (file cache off; pkg/sidecar_mounter/sidecar_mounter_config.go at
# 5fcdc04a). Data prep writes through this mount: no read-only, and its own writes update its
# own metadata cache (single writer).
READ_MOSTLY_UNCACHED_MOUNT_OPTIONS = tuple(
    option for option in READ_MOSTLY_MOUNT_OPTIONS if not option.startswith("file-cache:")
)
# Checkpoints, at CHECKPOINT_MOUNT (only the bucket's CHECKPOINT_PREFIX): verl rewrites
# latest_checkpointed_iteration.txt in place, so metadata is never cached. The TTL is explicit
# and a flag: high-performance machine types (A3 Ultra, A4, A4X) get a TTL of -1 otherwise
# (GKE "performance defaults" from 1.33.2-gke.4655000; gcsfuse's tuning, see above). No file
# cache: checkpoints are written once and read once on resume.
CHECKPOINT_MOUNT_OPTIONS = (
    f"only-dir={CHECKPOINT_PREFIX}",
    "implicit-dirs",
    "metadata-cache-negative-ttl-secs=0",
    "metadata-cache-ttl-secs=0",
    "write:enable-streaming-writes:true",
    f"write-global-max-blocks={GCSFUSE_WRITE_GLOBAL_MAX_BLOCKS}",
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


def volume_handle(bucket: str, suffix: str) -> str:
    """The PV's handle: the bucket, then a suffix that makes it distinct (see above)."""
    return f"{bucket}:{suffix}"


def _gcsfuse_pv(
    settings: StackSettings, name: str, claim: str, options: tuple[str, ...], suffix: str
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": metadata(name, "storage"),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "capacity": {"storage": GCSFUSE_CAPACITY},
            # The tutorial says Delete; the CSI driver cannot delete a bucket, so a released PV
            # would only turn Failed. Retain states what happens: the bucket stays.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": GCSFUSE_STORAGE_CLASS,
            # Reserved for our claim, so no other PVC of the class can bind it.
            "claimRef": {"namespace": settings.namespace, "name": claim},
            "mountOptions": list(options),
            "csi": {
                "driver": GCSFUSE_DRIVER,
                "volumeHandle": volume_handle(settings.bucket_name, suffix),
                # No metadata prefetch on mount: the Ray pods mount while data prep may still
                # be writing, and a prefetched listing would be kept for good.
                "volumeAttributes": {"skipCSIBucketAccessCheck": "true"},
            },
        },
    }


def _gcsfuse_pvc(settings: StackSettings, name: str, volume: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(name, "storage", settings.namespace),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": GCSFUSE_CAPACITY}},
            "storageClassName": GCSFUSE_STORAGE_CLASS,
            "volumeName": volume,
        },
    }


def bucket_pv(settings: StackSettings) -> Manifest:
    """The read-mostly mount of the whole bucket (DATA_MOUNT), file-cached."""
    return _gcsfuse_pv(
        settings, BUCKET_PV, BUCKET_PVC, READ_MOSTLY_MOUNT_OPTIONS, DATA_HANDLE_SUFFIX
    )


def bucket_pvc(settings: StackSettings) -> Manifest:
    return _gcsfuse_pvc(settings, BUCKET_PVC, BUCKET_PV)


def uncached_bucket_pv(settings: StackSettings) -> Manifest:
    """The read-mostly mount of the whole bucket (DATA_MOUNT) without the file cache."""
    return _gcsfuse_pv(
        settings,
        BUCKET_UNCACHED_PV,
        BUCKET_UNCACHED_PVC,
        READ_MOSTLY_UNCACHED_MOUNT_OPTIONS,
        DATA_UNCACHED_HANDLE_SUFFIX,
    )


def uncached_bucket_pvc(settings: StackSettings) -> Manifest:
    return _gcsfuse_pvc(settings, BUCKET_UNCACHED_PVC, BUCKET_UNCACHED_PV)


def checkpoint_pv(settings: StackSettings) -> Manifest:
    """The checkpoint mount (CHECKPOINT_MOUNT): the bucket's CHECKPOINT_PREFIX, never cached."""
    return _gcsfuse_pv(
        settings, CHECKPOINT_PV, CHECKPOINT_PVC, CHECKPOINT_MOUNT_OPTIONS, CHECKPOINT_HANDLE_SUFFIX
    )


def checkpoint_pvc(settings: StackSettings) -> Manifest:
    return _gcsfuse_pvc(settings, CHECKPOINT_PVC, CHECKPOINT_PV)

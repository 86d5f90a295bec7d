"""How the GPU nodes get the worker image: streamed through an Artifact Registry remote
repository in front of Docker Hub, or pre-pulled where streaming is off.

Pure: no Pulumi. Settings resolve `verl-gke:imageStreaming` to an ImagePullPlan here;
components/image_registry.py (streaming) and components/image_prepull.py (pre-pull) create what
the plan names, and every pod manifest that pulls from Docker Hub passes through
`through_registry`, the one function that rewrites image references.

Sources:
- GKE "Use Image streaming to pull container images"
  (docs.cloud.google.com/kubernetes-engine/docs/how-to/image-streaming): images in an Artifact
  Registry standard or remote repository are eligible; "Autopilot clusters automatically use
  Image streaming to pull eligible images"; Standard turns it on per node pool (gcfsConfig);
  "During the first pull of an eligible image you might not notice the benefit".
- Artifact Registry "Integrate with GKE" (docs.cloud.google.com/artifact-registry/docs/
  integrate-gke): nodes pull as the node service account, which needs the reader role on the
  repository (here: the stack's dedicated node service account, config/cluster_security.py).
- Artifact Registry "Reduce latency with image prewarming" (docs.cloud.google.com/
  artifact-registry/docs/prewarm-images): the Image streaming cache "typically populates on the
  first pull from a client that has image streaming enabled" (planning/startup_links.py models it).
- Image path form LOCATION-docker.pkg.dev/PROJECT-ID/REPOSITORY/IMAGE (Artifact Registry Docker
  docs); a remote repository in front of Docker Hub streams (wdenniss.com/using-image-streaming-
  with-dockerhub).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from config.profiles import IMAGE_STREAMING_UNSUPPORTED_ARCHES, AcceleratorProfile, Mode

READER_ROLE = "roles/artifactregistry.reader"
# GKE "Use Image streaming": "You must enable the Container File System API" (Autopilot and
# Standard); the remote repository is an Artifact Registry resource.
CONTAINER_FILE_SYSTEM_API = "containerfilesystem.googleapis.com"
ARTIFACT_REGISTRY_API = "artifactregistry.googleapis.com"
# The remote repository's upstream (pulumi-gcp RepositoryRemoteRepositoryConfigDockerRepository
# public_repository: "Possible values are: DOCKER_HUB").
DOCKER_HUB_UPSTREAM = "DOCKER_HUB"
# Registry hosts that mean Docker Hub; a reference whose first segment has no '.' or ':' (and is
# not localhost) is on Docker Hub too (the Docker reference grammar's default registry).
DOCKER_HUB_HOSTS = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
# Docker Hub's namespace for single-name official images ("ubuntu" is "library/ubuntu").
OFFICIAL_NAMESPACE = "library"


@dataclass(frozen=True)
class ImagePullPlan:
    """What the stack does for the worker image's pull."""

    # Images through the Artifact Registry remote repository, streamed by GKE.
    streaming: bool
    # Standard: gcfsConfig on the node pools the stack creates (Autopilot streams by itself).
    pool_streaming: bool
    # Standard without streaming: a DaemonSet pulls the worker image when a GPU node registers.
    prepull: bool
    # The remote repository (only with streaming): its id and the image prefix it serves.
    repository_id: str | None
    registry: str | None


def streaming_refusal(profile: AcceleratorProfile, worker_image: str) -> str | None:
    """Why `verl-gke:imageStreaming true` cannot be honoured for this profile and worker image,
    or None. GKE streams only images in Artifact Registry: a Docker Hub image goes through the
    stack's remote repository, an Artifact Registry image streams as it is, any other registry's
    image (ghcr.io, nvcr.io, ...) cannot stream."""
    arch = IMAGE_STREAMING_UNSUPPORTED_ARCHES.get(profile.arch)
    if arch is not None:
        return arch
    if docker_hub_path(worker_image) is None and not in_artifact_registry(worker_image):
        return (
            f"the worker image {worker_image} is neither on Docker Hub (streamed through the "
            f"stack's remote repository) nor in Artifact Registry, the only images GKE streams"
        )
    return None


def default_streaming(profile: AcceleratorProfile, worker_image: str) -> bool:
    return streaming_refusal(profile, worker_image) is None


def in_artifact_registry(image: str) -> bool:
    """An image in an Artifact Registry Docker repository (LOCATION-docker.pkg.dev/...)."""
    host, _, rest = image.partition("/")
    return bool(rest) and host.endswith("-docker.pkg.dev")


def repository_id(cluster_name: str) -> str:
    """One repository per stack: destroying a stack deletes only its own."""
    return f"{cluster_name}-dockerhub"


def pull_plan(
    profile: AcceleratorProfile,
    mode: Mode,
    asked: bool | None,
    *,
    worker_image: str,
    region: str,
    project: str,
    cluster_name: str,
) -> ImagePullPlan:
    """`asked` is verl-gke:imageStreaming (None: the profile's default). A refused `True` is
    reported by the settings (config/settings.py) before this is called."""
    streaming = default_streaming(profile, worker_image) if asked is None else asked
    standard = mode is Mode.STANDARD
    repo = repository_id(cluster_name) if streaming else None
    return ImagePullPlan(
        streaming=streaming,
        pool_streaming=streaming and standard,
        # Autopilot creates the node for the pending worker, which pulls at once: nothing to
        # pre-pull ahead of (planning/startup_links.py), and a DaemonSet's pods are billed there.
        prepull=standard and not streaming,
        repository_id=repo,
        registry=f"{region}-docker.pkg.dev/{project}/{repo}" if repo else None,
    )


def docker_hub_path(image: str) -> str | None:
    """The image's path on Docker Hub (`verlai/verl:tag`), or None for another registry."""
    if not image:
        return None
    first, _, rest = image.partition("/")
    if rest and first in DOCKER_HUB_HOSTS:
        path = rest
    elif rest and ("." in first or ":" in first or first == "localhost"):
        return None
    else:
        path = image
    return path if "/" in path else f"{OFFICIAL_NAMESPACE}/{path}"


def registry_image(image: str, plan: ImagePullPlan) -> str:
    """A Docker Hub image as the remote repository serves it; others unchanged."""
    path = docker_hub_path(image)
    if plan.registry is None or path is None:
        return image
    return f"{plan.registry}/{path}"


def through_registry(manifest: dict[str, Any], plan: ImagePullPlan) -> dict[str, Any]:
    """A copy of `manifest` with every container's and init container's Docker Hub image
    rewritten by registry_image (pod templates at any depth: Job, RayCluster groups)."""
    if plan.registry is None:
        return manifest
    result = copy.deepcopy(manifest)
    _rewrite(result, plan)
    return result


def _rewrite(node: Any, plan: ImagePullPlan) -> None:
    if isinstance(node, list):
        for item in node:
            _rewrite(item, plan)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                if isinstance(container, dict) and isinstance(container.get("image"), str):
                    container["image"] = registry_image(container["image"], plan)
        _rewrite(value, plan)


@dataclass(frozen=True)
class RegistryRepository:
    """An Artifact Registry repository, as its IAM binding names it."""

    location: str
    project: str
    repository: str


def artifact_registry_repository(image: str) -> RegistryRepository | None:
    """The repository of an image at LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE (the
    Artifact Registry Docker path form), or None for an image elsewhere. The stack's own remote
    repository is granted by components/image_registry.py; a user's image in another repository
    needs the nodes' reader role there too, since the nodes no longer run as the Compute Engine
    default service account (config/cluster_security.py)."""
    if not in_artifact_registry(image):
        return None
    host, _, rest = image.partition("/")
    parts = rest.split("/")
    if len(parts) < 3:
        return None
    return RegistryRepository(host.removesuffix("-docker.pkg.dev"), parts[0], parts[1])

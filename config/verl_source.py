"""What runs verl in the Ray pods, and whether the image can run the verl the stack names.

A verl checkout (verl-gke:verlSource=checkout, the default) runs on the image's vLLM and
transformers: a ref whose requirements the image does not meet fails once the GPUs are up
(verl's rollout imports vLLM in the workers). A change of the ref or the image must reach the
pods: the ref is in the pod template (manifests/fuse_mounts.py), so the RayCluster's spec changes
and `pulumi up` replaces the cluster and the job (components/ray_cluster.py replace_on_changes,
components/grpo_training.py replace_with); the label below also names it in the job's runtime env
(training/assembly.py). The RayCluster's upgradeStrategy Recreate (KubeRay >= 1.6.0) recreates
the pods of a spec changed in the cluster by other means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from config.run_inputs import NAMESPACE, VERL_REF_KEY


class StackSettings(Protocol):
    """The fields of config.settings.StackSettings read here (config/stack_rules.py passes the
    settings in; this module imports nothing of config/settings.py)."""

    stack: str
    verl_source: str
    verl_ref: str
    verl_image: str
    kuberay_chart_version: str

    @property
    def profile(self) -> _Profile: ...


class _Profile(Protocol):
    verl_ref: str


VERL_IMAGE_KEY = f"{NAMESPACE}:verlImage"
KUBERAY_CHART_KEY = f"{NAMESPACE}:kuberayChartVersion"

# The verl repository data prep checks out (manifests/data_prep.py passes it to the Job).
VERL_REPO = "https://github.com/volcengine/verl.git"
# The job's runtime env var naming what runs verl: a change is a new submission.
VERL_SOURCE_ENV = "VERL_GKE_VERL_SOURCE"


def verl_source_label(settings: StackSettings) -> str:
    """What runs verl: the checkout of a ref, or the image's own installed verl."""
    if settings.verl_source == "image":
        return f"image {settings.verl_image}"
    return f"{VERL_REPO} at {settings.verl_ref}"


@dataclass(frozen=True)
class VllmRange:
    """vLLM minor versions (0.<minor>) a verl release accepts; hi None: no upper bound."""

    lo: int
    hi: int | None
    source: str
    image: str  # an image whose vLLM is in range

    def accepts(self, minor: int) -> bool:
        return self.lo <= minor and (self.hi is None or minor <= self.hi)

    def text(self) -> str:
        return f">= 0.{self.lo}" + ("" if self.hi is None else f" and <= 0.{self.hi}")


# verl's vllm extra, Requires-Dist in each release's wheel METADATA (the verl virtualenvs CI
# builds): 0.6.1 vllm>=0.8.5,<=0.11.0; 0.9.0 vllm>=0.18.0 (and transformers>=5.5.3,!=5.6.0,<5.11,
# which no vLLM 0.11 image has: vLLM 0.11 pins transformers 4.x). Images: verl's docker/README
# (vllm011.latest is FROM vllm/vllm-openai:v0.11.0; vllm024.latest has vLLM 0.24, torch 2.11),
# /work/shared/reference/verl-ray-pulumi-facts.md A5. Refs not listed (a commit such as A4X's
# ddbcdb7, or a newer tag) are not checked.
VLLM_FOR_REF: dict[str, VllmRange] = {
    "v0.6.1": VllmRange(
        8, 11, "verl 0.6.1 wheel: vllm>=0.8.5,<=0.11.0", "verlai/verl:vllm011.latest"
    ),
    "v0.9.0": VllmRange(18, None, "verl 0.9.0 wheel: vllm>=0.18.0", "verlai/verl:vllm024.latest"),
}
# verl's image tags name their vLLM minor: vllm011 = vLLM 0.11, vllm024 = 0.24 (docker/README).
_VLLM_TAG = re.compile(r":vllm0(\d{2})\b")


def image_vllm_minor(image: str) -> int | None:
    """The vLLM minor a verlai/verl tag names, None for an image whose tag does not say."""
    match = _VLLM_TAG.search(image)
    return int(match.group(1)) if match else None


def image_fit_problem(settings: StackSettings) -> str | None:
    """A checkout's ref that the image's vLLM cannot run, refused with an image that can."""
    wanted = VLLM_FOR_REF.get(settings.verl_ref)
    minor = image_vllm_minor(settings.verl_image)
    if settings.verl_source != "checkout" or wanted is None or minor is None:
        return None
    if wanted.accepts(minor):
        return None
    key = VERL_IMAGE_KEY
    return (
        f"{VERL_REF_KEY} = {settings.verl_ref!r} with {key} = "
        f"{settings.verl_image!r}: that verl needs vLLM {wanted.text()} ({wanted.source}), the "
        f"image has vLLM 0.{minor} (its tag), so the rollout fails once the GPUs are up. Fix: "
        f"pulumi config set {key} {wanted.image} -s {settings.stack} (or set verlRef back to "
        f"{settings.profile.verl_ref})"
    )


# KubeRay added RayCluster spec.upgradeStrategy (Recreate: a changed spec deletes every pod, which
# KubeRay then creates from the new spec) in v1.6.0 (ray-operator/apis/ray/v1/raycluster_types.go:
# absent at v1.5.1, present at v1.6.0 and v1.7.0). The RayCluster carries the field, which an
# older operator's CRD does not define.
UPGRADE_STRATEGY_SINCE = (1, 6, 0)


def chart_rolls_pods(version: str) -> bool:
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return True  # a malformed version is refused by the chart-version rule
    return (int(parts[0]), int(parts[1]), int(parts[2])) >= UPGRADE_STRATEGY_SINCE


def chart_problem(settings: StackSettings) -> str | None:
    if chart_rolls_pods(settings.kuberay_chart_version):
        return None
    key = KUBERAY_CHART_KEY
    return (
        f"{key} = {settings.kuberay_chart_version!r}: the RayCluster sets upgradeStrategy "
        "Recreate (KubeRay recreates the Ray pods of a spec changed in the cluster), which "
        "exists from KubeRay 1.6.0; an older operator's CRD does not define it. "
        f"Fix: pulumi config set {key} 1.7.0 -s {settings.stack}"
    )


_RELEASE_TAG = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def release_at_least(ref: str, release: tuple[int, int, int]) -> bool:
    """Whether `ref` is a release tag vX.Y.Z at or after `release` (a commit: False)."""
    tag = _RELEASE_TAG.fullmatch(ref)
    return bool(tag) and tuple(int(n) for n in tag.groups()) >= release


def problems(settings: StackSettings) -> list[str]:
    found = [image_fit_problem(settings), chart_problem(settings)]
    return [p for p in found if p]

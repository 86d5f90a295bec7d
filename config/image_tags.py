"""Which images can change under a stack. A tag is a name the registry may point at another
image at any time; only a digest names one image's content (OCI distribution spec: a manifest is
fetched by tag or by digest, the digest being the hash of its content; with both, `name:tag@digest`,
the digest decides). So an image is pinned exactly when its reference carries `@sha256:`.

Moving tags are not refused (the profiles' defaults use them): the plan and `pulumi up` say so.
"""

from __future__ import annotations

from config.settings import StackSettings, config_key

# The settings naming an image the stack's pods run.
IMAGE_FIELDS = ("verl_image", "data_prep_image", "nccl_installer_image")
DIGEST_MARK = "@sha256:"


def can_move(reference: str) -> bool:
    """True when `reference` names its image by tag only, which the registry can move."""
    return DIGEST_MARK not in reference


def moving_images_notice(settings: StackSettings) -> str | None:
    """One warning naming every image of the stack that is pulled by tag, with the pinning fix."""
    moving = [
        (config_key(name), getattr(settings, name))
        for name in IMAGE_FIELDS
        if can_move(getattr(settings, name))
    ]
    if not moving:
        return None
    listed = "; ".join(f"{key} = {image}" for key, image in moving)
    key, image = moving[0]
    # The tag stays readable beside the digest (the arm64 check reads it); the digest decides.
    return (
        f"images pulled by tag, which the registry can move to another image at any time (nodes "
        f"created on different days may then run different images): {listed}. Pin by digest, "
        f"e.g. pulumi config set {key} {image}@sha256:<digest> -s {settings.stack} "
        f"(README, Pinning images)"
    )

"""Images pulled by tag can change under a stack; the plan and `pulumi up` say which (OCI
distribution spec: a tag is a movable name, a digest the hash of one manifest's content)."""

from __future__ import annotations

import pytest

from config.image_tags import can_move
from tests.program import plan

DIGEST = "sha256:" + "ab" * 32
PINNED = f"verlai/verl@{DIGEST}"


@pytest.mark.parametrize(
    ("reference", "moves"),
    [
        ("verlai/verl:vllm011.latest", True),
        # A version-looking tag is still a tag: the registry lets its owner push it again.
        ("us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1", True),
        (PINNED, False),
        # With both, the digest decides what is pulled.
        (f"verlai/verl:vllm011.latest@{DIGEST}", False),
        (f"localhost:5000/verl@{DIGEST}", False),
    ],
)
def test_only_a_digest_pins_an_image(reference: str, moves: bool) -> None:
    assert can_move(reference) is moves


def _moving_notices(**images: str) -> list[str]:
    result = plan("a4", "standard", **{f"verl-gke__{k}": v for k, v in images.items()})
    return [n for n in result.notices if "pulled by tag" in n]


def test_default_images_are_reported_as_moving_with_a_pin_that_is_accepted() -> None:
    (notice,) = _moving_notices()
    assert "verl-gke:verlImage = verlai/verl:vllm011.latest" in notice
    fix = "pulumi config set verl-gke:verlImage verlai/verl:vllm011.latest@sha256:<digest> -s a4"
    assert fix in notice
    # The suggested form, with a real digest, is accepted and no longer reported for that key.
    (left,) = _moving_notices(verlImage=f"verlai/verl:vllm011.latest@{DIGEST}")
    assert "verl-gke:verlImage" not in left


def test_no_warning_once_every_image_is_pinned() -> None:
    nccl = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib"
    assert not _moving_notices(
        verlImage=PINNED, dataPrepImage=PINNED, ncclInstallerImage=f"{nccl}@{DIGEST}"
    )

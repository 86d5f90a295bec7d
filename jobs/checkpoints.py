"""Find verl's checkpoints in a GCS folder without listing every shard.

verl writes (verl/trainer/ppo/ray_trainer.py _save_checkpoint)::

    <root>/global_step_<N>/actor/model_world_size_<W>_rank_<r>.pt ...   one folder per saved step
    <root>/latest_checkpointed_iteration.txt                             str(N), written last

A full FSDP checkpoint is W x 3 shard files plus the HF config, so a recursive listing of a long
run costs thousands of objects per refresh. One delimiter listing of <root>/ returns the step
folders as prefixes and the tracker file as an item (one request per 1,000 entries), plus one read
of the tracker: two requests for a whole run.

Caveat kept on purpose: a folder is reported as soon as it has any object, so the newest entry of
`checkpoints` may still be being written; `latest_checkpoint` only moves when verl rewrites the
tracker, i.e. after the step is complete (the path to resume from, as verl's own
find_latest_ckpt_path). `trainer.max_actor_ckpt_to_keep` deletes only `global_step_N/actor`, so
pruned steps stay listed while their `data.pt` remains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.cloud import storage

TRACKER_FILE = "latest_checkpointed_iteration.txt"
_STEP_FOLDER = re.compile(r"^global_step_(\d+)$")


@dataclass(frozen=True)
class CheckpointListing:
    root: str | None  # gs://bucket/prefix, no trailing slash; None: the job keeps no checkpoints
    checkpoints: tuple[str, ...]  # gs://.../global_step_N folders, sorted by N
    steps: tuple[int, ...]  # the N of each entry of `checkpoints`
    latest_step: int | None  # from the tracker file; None when absent, unreadable or dangling
    latest_checkpoint: str | None  # gs://.../global_step_<latest_step>

    @classmethod
    def empty(cls, root: str | None) -> CheckpointListing:
        return cls(root=root, checkpoints=(), steps=(), latest_step=None, latest_checkpoint=None)


def parse_gcs_url(url: str) -> tuple[str, str]:
    """'gs://bucket/a/b/' -> ('bucket', 'a/b'). Raises ValueError naming the bad value."""
    match = re.fullmatch(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/.*)?", url)
    if not match:
        raise ValueError(
            f"checkpoint_root must be a gs://<bucket>/<folder> URL, got {url!r}; for example "
            "'gs://my-bucket/checkpoints/grpo-qwen32b'"
        )
    return match.group(1), (match.group(2) or "").strip("/")


def normalize_root(url: str) -> str:
    bucket, prefix = parse_gcs_url(url)
    return f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"


def discover_checkpoints(
    root: str, client: storage.Client | None = None, page_size: int | None = None
) -> CheckpointListing:
    """List the step folders under root and read the tracker file.

    client: defaults to google-cloud-storage's default client (Application Default Credentials,
    or the emulator named by STORAGE_EMULATOR_HOST). page_size: entries per listing page (GCS
    caps it at 1,000; tests lower it to exercise paging). A missing bucket or folder gives an
    empty listing; other storage errors (permissions, network) propagate.
    """
    from google.api_core import exceptions
    from google.cloud import storage

    bucket_name, prefix = parse_gcs_url(root)
    root = normalize_root(root)
    folder = f"{prefix}/" if prefix else ""
    if client is None:
        # project=None: listing a bucket needs no project, and ADC may not name one.
        client = storage.Client(project=None)
    steps: set[int] = set()
    has_tracker = False
    try:
        pages = client.list_blobs(
            bucket_name, prefix=folder, delimiter="/", page_size=page_size
        ).pages
        for page in pages:
            for blob in page:
                has_tracker = has_tracker or blob.name == folder + TRACKER_FILE
            for sub in page.prefixes:
                match = _STEP_FOLDER.match(sub[len(folder) :].rstrip("/"))
                if match:
                    steps.add(int(match.group(1)))
    except exceptions.NotFound:
        return CheckpointListing.empty(root)
    ordered = tuple(sorted(steps))
    latest: int | None = None
    if has_tracker:
        try:
            text = client.bucket(bucket_name).blob(folder + TRACKER_FILE).download_as_text()
            latest = int(text.strip())
        except (exceptions.NotFound, ValueError):
            latest = None
    if latest is not None and latest not in steps:
        # verl resumes only from a tracker whose folder exists; report what verl would use.
        latest = None
    return CheckpointListing(
        root=root,
        checkpoints=tuple(f"{root}/global_step_{n}" for n in ordered),
        steps=ordered,
        latest_step=latest,
        latest_checkpoint=f"{root}/global_step_{latest}" if latest is not None else None,
    )

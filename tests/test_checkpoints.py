"""Checkpoint discovery (jobs/checkpoints.py) against a real GCS emulator (fake-gcs-server)."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from jobs.checkpoints import CheckpointListing, discover_checkpoints, parse_gcs_url
from tests.job_fixtures.fake_trainer import checkpoint_objects, write_checkpoint
from tests.support.gcs_emulator import GcsEmulator

BUCKET = "verl-ckpt"


@pytest.fixture(scope="module")
def bucket(gcs: GcsEmulator) -> storage.Bucket:
    return gcs.client().bucket(BUCKET)


class _CountingSession(requests.Session):
    """Records every HTTP request google-cloud-storage makes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        self.urls.append(f"{method!s} {url!s}")
        return super().request(method, url, *args, **kwargs)


def counting_client(gcs: GcsEmulator) -> tuple[storage.Client, _CountingSession]:
    session = _CountingSession()
    client = storage.Client(
        project="test-project",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs.url},
        _http=session,
    )
    return client, session


def test_lists_step_folders_in_numeric_order_with_latest_from_tracker(
    gcs: GcsEmulator, bucket: storage.Bucket
) -> None:
    for step in (2, 10, 1):
        write_checkpoint(bucket, "runs/numeric", step, world_size=2)
    # The tracker holds what verl wrote last (step 1 here), not the largest folder.
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/numeric", gcs.client())
    assert listing == CheckpointListing(
        root=f"gs://{BUCKET}/runs/numeric",
        checkpoints=(
            f"gs://{BUCKET}/runs/numeric/global_step_1",
            f"gs://{BUCKET}/runs/numeric/global_step_2",
            f"gs://{BUCKET}/runs/numeric/global_step_10",
        ),
        steps=(1, 2, 10),
        latest_step=1,
        latest_checkpoint=f"gs://{BUCKET}/runs/numeric/global_step_1",
    )


def test_root_spelling_does_not_matter(gcs: GcsEmulator, bucket: storage.Bucket) -> None:
    write_checkpoint(bucket, "runs/spelling", 5, world_size=1)
    plain = discover_checkpoints(f"gs://{BUCKET}/runs/spelling", gcs.client())
    slashed = discover_checkpoints(f"gs://{BUCKET}/runs/spelling/", gcs.client())
    assert plain == slashed
    assert plain.latest_checkpoint == f"gs://{BUCKET}/runs/spelling/global_step_5"


def test_bucket_root_without_folder(gcs: GcsEmulator) -> None:
    client = gcs.client()
    client.create_bucket("bare-root")
    write_checkpoint(client.bucket("bare-root"), "", 3, world_size=1)
    listing = discover_checkpoints("gs://bare-root", client)
    assert listing.checkpoints == ("gs://bare-root/global_step_3",)
    assert listing.latest_checkpoint == "gs://bare-root/global_step_3"


def test_step_being_written_is_listed_but_not_latest(
    gcs: GcsEmulator, bucket: storage.Bucket
) -> None:
    write_checkpoint(bucket, "runs/partial", 1, world_size=2)
    # Step 2 has its first shards but verl has not rewritten the tracker yet.
    for name in checkpoint_objects(2, world_size=2)[:3]:
        bucket.blob(f"runs/partial/{name}").upload_from_string(b"shard")
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/partial", gcs.client())
    assert listing.steps == (1, 2)
    assert listing.latest_step == 1


def test_tracker_pointing_at_a_missing_folder_gives_no_latest(
    gcs: GcsEmulator, bucket: storage.Bucket
) -> None:
    write_checkpoint(bucket, "runs/dangling", 1, world_size=1)
    bucket.blob("runs/dangling/latest_checkpointed_iteration.txt").upload_from_string("7")
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/dangling", gcs.client())
    assert listing.steps == (1,)
    assert (listing.latest_step, listing.latest_checkpoint) == (None, None)


def test_unrelated_entries_are_ignored(gcs: GcsEmulator, bucket: storage.Bucket) -> None:
    write_checkpoint(bucket, "runs/noise", 4, world_size=1)
    bucket.blob("runs/noise/global_step_x/readme.txt").upload_from_string(b"not a step")
    bucket.blob("runs/noise/tensorboard/events").upload_from_string(b"tb")
    bucket.blob("runs/noise-other/global_step_9/data.pt").upload_from_string(b"sibling folder")
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/noise", gcs.client())
    assert listing.steps == (4,)


def test_missing_folder_and_missing_bucket_are_empty(gcs: GcsEmulator) -> None:
    for root in (f"gs://{BUCKET}/runs/never-written", "gs://no-such-bucket/run"):
        assert discover_checkpoints(root, gcs.client()) == CheckpointListing.empty(root)


def test_uses_only_delimiter_listings_not_a_recursive_walk(
    gcs: GcsEmulator, bucket: storage.Bucket
) -> None:
    for step in range(1, 6):
        write_checkpoint(bucket, "runs/requests", step, world_size=4)
    client, session = counting_client(gcs)
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/requests", client)
    assert listing.steps == (1, 2, 3, 4, 5)
    listings = [url for url in session.urls if "/o?" in url]
    assert len(listings) == 1
    assert "delimiter=%2F" in listings[0] and "prefix=runs%2Frequests%2F" in listings[0]
    downloads = [url for url in session.urls if "alt=media" in url]
    assert len(downloads) == 1 and "latest_checkpointed_iteration.txt" in downloads[0]


def test_reads_every_listing_page(gcs: GcsEmulator, bucket: storage.Bucket) -> None:
    for step in range(1, 8):
        write_checkpoint(bucket, "runs/paged", step, world_size=1)
    for index in range(4):  # sorts before the tracker, which so lands on the third page
        bucket.blob(f"runs/paged/aux-{index}.json").upload_from_string(b"{}")
    client, session = counting_client(gcs)
    listing = discover_checkpoints(f"gs://{BUCKET}/runs/paged", client, page_size=2)
    assert listing.steps == tuple(range(1, 8))
    assert listing.latest_step == 7
    assert len([url for url in session.urls if "/o?" in url]) == 3


def test_default_client_follows_storage_emulator_host(
    gcs: GcsEmulator, bucket: storage.Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_checkpoint(bucket, "runs/env", 8, world_size=1)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    assert discover_checkpoints(f"gs://{BUCKET}/runs/env").latest_step == 8


@pytest.mark.parametrize(
    "url", ["s3://bucket/x", "gs://", "gs://A_Bucket/x", "/data/checkpoints", "gs://b/x"]
)
def test_bad_root_names_the_setting(url: str) -> None:
    with pytest.raises(ValueError, match=r"checkpoint_root must be a gs://<bucket>/<folder> URL"):
        parse_gcs_url(url)


def test_parse_gcs_url() -> None:
    assert parse_gcs_url("gs://my-bucket/a/b/") == ("my-bucket", "a/b")
    assert parse_gcs_url("gs://my-bucket") == ("my-bucket", "")

"""The rehearsal's verdict (jobs/rehearsal_verdict.py) through the real `python -m pulumi.dynamic`
host over gRPC, reading records from a real GCS emulator: a record with problems fails `pulumi up`
with each problem's setting, verl's message and the fix, as a message and not a traceback; an ok
record's answers become outputs; a missing record names the pod's log; a new rehearsal Job (its
uid) is read again."""

from __future__ import annotations

import json

import grpc
import pytest

from jobs.rehearsal_verdict import (
    OUTPUT_KEYS,
    RehearsalVerdictProvider,
    existing_record,
    summary,
)
from tests.support.dynamic_host import DynamicHost, engine_inputs, from_wire, wire
from tests.support.gcs_emulator import GcsEmulator

BUCKET = "rehearsal-verdict"
URN = (
    "urn:pulumi:a4::verl-gke::verl-gke:rehearsal:Rehearsal"
    "$pulumi-python:dynamic/jobs:RehearsalVerdict::rehearsal-verdict"
)
LOGS = "kubectl logs -n default -l job-name=rehearsal-job --tail=-1"

OK_RECORD = {
    "schema": 1,
    "ok": True,
    "versions": {"verl": "0.6.1", "vllm": "0.10.2", "transformers": "4.57.1", "torch": None},
    "data": {"train_rows": 7473, "train_rows_kept": 7473, "val_rows": 1319, "val_rows_kept": 1319},
    "length": {
        "steps_per_epoch": 58, "epochs": 1, "total_training_steps": 58,
        "source": "dataloader x epochs", "last_step": 58, "save_steps": [10, 20, 30, 40, 50, 58],
    },
    "reward": {
        "function": "/data/rewards/r.py:score",
        "samples": [{"row": 0, "ground_truth": "72", "score_correct": 1.0, "score_wrong": 0.0}],
    },
    "problems": [],
}  # fmt: skip
PROBLEM = {
    "setting": "verl-gke:job.extraOverrides",
    "value": "actor_rollout_ref.rollout.max_model_len=65536",
    "message": "ValueError: max_model_len 65536 is larger than max_position_embeddings 32768",
    "fix": "pulumi config rm --path verl-gke:job.extraOverrides[0]",
}


def put(gcs: GcsEmulator, path: str, record: object) -> str:
    text = record if isinstance(record, str) else json.dumps(record)
    gcs.client().bucket(BUCKET).blob(path).upload_from_string(text)
    return f"gs://{BUCKET}/{path}"


def props(url: str, uid: str = "uid-1") -> dict[str, object]:
    return {
        "record_url": url,
        "job_uid": uid,
        "logs_hint": LOGS,
        **{key: None for key in OUTPUT_KEYS},
    }


def create(host: DynamicHost, url: str) -> dict[str, object]:
    inputs = engine_inputs(props(url), RehearsalVerdictProvider())
    return from_wire(host.create(URN, host.check(URN, None, inputs).inputs).properties)


def failure(host: DynamicHost, url: str) -> str:
    with pytest.raises(grpc.RpcError) as failed:
        create(host, url)
    return failed.value.details()


def test_an_ok_record_gives_its_answers_as_outputs(host: DynamicHost, gcs: GcsEmulator) -> None:
    outs = create(host, put(gcs, "rehearsals/a4/exp/ok.json", OK_RECORD))
    assert outs["ok"] is True
    assert outs["steps"] == 58
    assert outs["save_steps"] == [10, 20, 30, 40, 50, 58]
    assert outs["rows"]["train_rows_kept"] == 7473
    assert outs["reward_samples"][0]["score_wrong"] == 0.0
    assert outs["versions"]["transformers"] == "4.57.1"
    assert outs["problems"] == []


def test_problems_fail_the_update_as_a_message(host: DynamicHost, gcs: GcsEmulator) -> None:
    record = {**OK_RECORD, "ok": False, "problems": [PROBLEM]}
    url = put(gcs, "rehearsals/a4/exp/bad.json", record)
    message = failure(host, url)
    assert not message.startswith("Traceback")
    assert "found problems; no GPU trained:" in message
    assert (
        "  - verl-gke:job.extraOverrides = actor_rollout_ref.rollout.max_model_len=65536: "
        "ValueError: max_model_len 65536 is larger than max_position_embeddings 32768. "
        "Fix: pulumi config rm --path verl-gke:job.extraOverrides[0]"
    ) in message.splitlines()
    assert f"record: {url}" in message


def test_a_missing_record_names_the_pods_log(host: DynamicHost, gcs: GcsEmulator) -> None:
    message = failure(host, f"gs://{BUCKET}/rehearsals/a4/exp/absent.json")
    assert "wrote no record at" in message and LOGS in message
    assert not message.startswith("Traceback")


def test_a_record_that_is_not_json_is_named(host: DynamicHost, gcs: GcsEmulator) -> None:
    message = failure(host, put(gcs, "rehearsals/a4/exp/broken.json", "{half"))
    assert "is not JSON" in message


def test_a_new_rehearsal_job_is_read_again(host: DynamicHost, gcs: GcsEmulator) -> None:
    url = put(gcs, "rehearsals/a4/exp/again.json", OK_RECORD)
    provider = RehearsalVerdictProvider()
    outs = create(host, url)
    same = host.diff(URN, url, wire(outs), engine_inputs(props(url), provider))
    assert same.changes == same.DIFF_NONE
    new_job = engine_inputs(props(url, uid="uid-2"), provider)
    changed = host.diff(URN, url, wire(outs), new_job)
    assert changed.changes == changed.DIFF_SOME
    assert list(changed.replaces) == []


def test_ok_without_problems_is_the_only_pass() -> None:
    assert summary(OK_RECORD)["ok"] is True
    assert summary({**OK_RECORD, "ok": False})["ok"] is False
    assert summary({**OK_RECORD, "problems": [PROBLEM]})["ok"] is False
    assert summary({"schema": 1})["steps"] is None


def test_pulumi_up_finds_an_earlier_record_of_this_command_or_none(
    gcs: GcsEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pulumi up`'s cost block takes verl's count from a record already there (__main__.py)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    url = put(gcs, "rehearsals/a4/exp/earlier.json", OK_RECORD)
    assert existing_record(url) == OK_RECORD
    assert existing_record(f"gs://{BUCKET}/rehearsals/a4/exp/none.json") is None
    assert existing_record(put(gcs, "rehearsals/a4/exp/list.json", "[1]")) is None
    assert existing_record("gs://verl-gke-no-such-bucket-x/r.json") is None

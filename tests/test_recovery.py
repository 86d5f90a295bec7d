"""A run that needs no person, through the real runner (payloads/export/run_grpo.py and
supervise.py) against real Ray 2.49 processes on 127.0.0.1: a head and two "GPU nodes"
(`ray start --num-gpus=1`), and a stand-in trainer that places its workers on them with
placement groups as verl 0.6.1 does (tests/support/recovery_scenarios.py).

Rules encoded, with their source:
- A worker node lost mid-step fails the driver's ray.get with ray.exceptions.ActorUnavailableError
  ("... is unavailable ... Socket closed") or ActorDiedError ("The actor died because its node has
  died", gcs_server), Ray 2.49: the run is restarted and resumes from the tracker
  latest_checkpointed_iteration.txt (verl's trainer.resume_mode=auto).
- Hydra (verl 0.6.1's config) refusing an override is final; so is the job's SIGTERM, which
  Ray's job stop sends to the entrypoint and its children (job_supervisor.py, Ray 2.47/2.49).
- Ray SIGKILLs the entrypoint's process group when the JobSupervisor actor dies
  (job_supervisor.py _exec_entrypoint, Ray 2.47/2.49); the trainer, in its own session, dies with
  its runner only through PR_SET_PDEATHSIG, and Ray then ends the actors its driver owned.
- A worker SIGKILLed on a real Ray 2.49 head is reported with the raylet's "killed by SIGKILL by
  OOM killer" detail: process_killed, retried once per step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import recovery
from jobs import recovery_log
from manifests import capacity
from manifests.ray_cluster import WORKER_GROUP
from payloads.export import provreq, supervise, trainer_lease
from tests.support import recovery_scenarios as scenarios
from tests.support.kube_api import TOKEN, CapacityApi
from tests.support.require import require

pytestmark = pytest.mark.integration

RUNNER = scenarios.RUNNER


@pytest.fixture(scope="module")
def cluster() -> Iterator[scenarios.Cluster]:
    require(
        (scenarios.RAY_VENV / "bin" / "ray").exists(),
        f"Ray 2.49 virtualenv at {scenarios.RAY_VENV} (VERL_GKE_RAY_VENVS)",
    )
    with scenarios.cluster() as made:
        yield made


def _causes(run_dir: Path) -> list[str]:
    record = supervise.read_record(run_dir) or {"attempts": []}
    return [attempt["cause"] for attempt in record["attempts"]]


def test_a_lost_gpu_node_is_replaced_and_training_resumes_from_the_checkpoint(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.worker_node_lost(cluster, tmp_path)
    assert figures["outcome"] == "resumed", figures
    assert figures["causes"][0] in (supervise.NODE_LOST, supervise.ACTOR_DIED)
    assert figures["causes"][-1] == supervise.SUCCEEDED
    resumed = figures["resumed_from_step"]
    assert resumed is not None and resumed >= 2
    log = (tmp_path / "runner.log").read_text()
    second = log.split("run_grpo: attempt 2", 1)[1]
    assert f"Load from checkpoint folder: {tmp_path / f'global_step_{resumed}'}" in second
    assert f"step:{resumed + 1} -" in second and f"step:{resumed} -" not in second
    assert (tmp_path / "training.done").is_file()


def test_a_hang_is_detected_within_its_bound_its_stacks_written_and_it_resumes(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.hang(cluster, tmp_path)
    assert figures["outcome"] == "resumed", figures
    assert figures["causes"] == [supervise.HANG, supervise.SUCCEEDED]
    # Steps of about 0.5 s: the bound is the floor. Detected after it, and not much later
    # (the watchdog polls every second; generous for a loaded machine).
    assert scenarios.HANG_FLOOR_S <= figures["detected_s"] <= scenarios.HANG_FLOOR_S + 60
    stacks = tmp_path / "stacks" / "attempt-001"
    names = sorted(path.name for path in stacks.iterdir())
    assert any(name.startswith("driver-") for name in names), names
    workers = [stacks / name for name in names if name.startswith("Worker-")]
    assert len(workers) == scenarios.WORLD_SIZE, names
    for dump in [*workers, *stacks.glob("driver-*.txt")]:
        # py-spy's dump: "Process <pid>: <command>", then each thread's frames.
        text = dump.read_text()
        assert text.startswith("Process ") and "Thread " in text, text
    record = supervise.read_record(tmp_path)
    assert record is not None and record["attempts"][0]["stacks"] == str(stacks)


def test_the_restart_budget_is_honoured(cluster: scenarios.Cluster, tmp_path: Path) -> None:
    figures = scenarios.hang(cluster, tmp_path, every_attempt=True)
    assert figures["outcome"] == "failed" and figures["person_needed"], figures
    assert figures["causes"] == [supervise.HANG, supervise.HANG]
    assert "all 1 restarts used" in (tmp_path / "runner.log").read_text()


def test_verl_refusing_its_config_is_not_retried(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    require(
        (scenarios.VERL_VENV / "bin" / "python").exists(),
        f"verl 0.6.1 virtualenv at {scenarios.VERL_VENV} (VERL_GKE_VERL_VENVS)",
    )
    figures = scenarios.config_error(cluster, tmp_path)
    assert figures["outcome"] == "not_retried" and figures["exit_code"] != 0, figures
    assert figures["causes"] == [supervise.CONFIG_ERROR]
    assert "Could not override 'trainer.no_such_key'" in (tmp_path / "runner.log").read_text()


def test_a_stopped_job_is_not_restarted(
    cluster: scenarios.Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Through the benchmark's own loop (bench/recovery.py), which prints one JSON line.
    recovery.run(["user_stop"], cluster, tmp_path, as_json=True)
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["scenario"] == "user_stop"
    assert figures["outcome"] == "not_retried", figures
    assert figures["causes"] == [supervise.USER_STOP]
    assert not (tmp_path / "user_stop" / "training.done").exists()


KILLED_WORKER = scenarios.REPO / "tests" / "job_fixtures" / "ray_worker_killed.py"


@pytest.mark.parametrize(
    ("failure", "cause"),
    [
        # PyTorch's CUDA OOM text (c10/cuda/CUDACachingAllocator.cpp).
        (
            "raise SystemExit('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2')",
            supervise.OUT_OF_MEMORY,
        ),
        # The trainer killed by SIGKILL, as the kernel's OOM killer does: no text at all.
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", supervise.PROCESS_KILLED),
    ],
)
def test_a_failure_that_may_be_the_jobs_own_is_retried_once_per_step(
    tmp_path: Path, failure: str, cause: str
) -> None:
    # Each attempt logs step 1 and then fails at step 2.
    script = "print('step:1 - training/global_step:1 - timing_s/step:0.1', flush=True)\n" + failure
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(tmp_path),
        "--identity", json.dumps({"world_size": 2}), "--max-restarts", "5",
        *scenarios.RUN_LENGTH,
        "--", sys.executable, "-c", script,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stderr
    assert _causes(tmp_path) == [cause, cause]
    assert f"{cause} at step 2 twice" in done.stdout


def test_a_ray_worker_killed_by_sigkill_is_named_from_rays_own_error(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    # The real Ray 2.49 error for an actor whose worker was SIGKILLed (the raylet's "Worker
    # unexpectedly exits ... killed by SIGKILL by OOM killer ..." detail), through the runner.
    python = str(scenarios.RAY_VENV / "bin" / "python")
    run = scenarios.start(cluster, tmp_path, trainer=[python, str(KILLED_WORKER)], max_restarts=3)
    code = run.finish()
    log = run.log_text()
    assert code != 0 and "killed by SIGKILL by OOM killer" in log, log
    assert _causes(tmp_path) == [supervise.PROCESS_KILLED, supervise.PROCESS_KILLED], log
    assert "process_killed at step 2 twice" in log


def test_on_flex_start_the_lost_node_is_asked_for_again_before_the_restart(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    # The stack's request was consumed (BookingExpired, processor.go at 0cc6feb); a request of
    # an earlier run's restart is Provisioned and expired too. The replacement node is started
    # only once the runner asked for it, as GKE's queued provisioning does.
    stack_request = "rec-gpu-capacity"
    spec = {
        "request": capacity.request_body("default", stack_request, stack_request, 2),
        "ray_cluster": "rec",
        "worker_group": WORKER_GROUP,
        "consume_annotation": capacity.CONSUME_ANNOTATION,
        "gpus_per_node": 1,
    }
    expired = {"conditions": [{"type": "BookingExpired", "status": "True"}]}
    earlier = provreq.CapacitySpec(**spec).body(f"{stack_request}-1-a002", 2)
    annotations = {capacity.CONSUME_ANNOTATION: earlier["metadata"]["name"]}
    ray_cluster = {
        "metadata": {"name": "rec"},
        "spec": {
            "workerGroupSpecs": [
                {"groupName": WORKER_GROUP, "template": {"metadata": {"annotations": annotations}}}
            ]
        },
    }
    requests = {
        stack_request: {**spec["request"], "status": expired},
        earlier["metadata"]["name"]: {**earlier, "status": expired},
    }
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with CapacityApi("default", ray_cluster, requests) as api:
        options = (
            "--capacity-request", json.dumps(spec),
            "--kube-api-server", api.endpoint, "--kube-token-file", str(token),
        )  # fmt: skip
        figures = scenarios.worker_node_lost(
            cluster,
            tmp_path / "run",
            runner_options=options,
            replace_after=lambda: any(call[0] == "POST" for call in api.calls),
        )
        assert figures["outcome"] == "resumed", figures
        (posted,) = [call[3] for call in api.calls if call[0] == "POST"]
        assert posted["spec"]["podSets"][0]["count"] == 1  # one node lost of two
        name = posted["metadata"]["name"]
        assert name.startswith(f"{stack_request}-") and name.endswith("-a002")
        template = ray_cluster["spec"]["workerGroupSpecs"][0]["template"]
        assert template["metadata"]["annotations"][capacity.CONSUME_ANNOTATION] == name
        # Provisioned (the stand-in says so on create): the earlier runner request is deleted,
        # the stack's own (Pulumi's) is kept.
        assert set(api.requests) == {stack_request, name}


def _assert_resumed_alone(figures: dict[str, object]) -> None:
    assert figures["outcome"] == "resumed", figures
    # The trainer died with its runner (the kernel's PR_SET_PDEATHSIG, at once; bounded
    # generously for a loaded machine, far below the run's 600 steps of 1 s) and trained on no
    # further: at most the save under way when the runner died.
    assert isinstance(figures["detected_s"], float) and figures["detected_s"] < 60, figures
    at_kill, at_death = figures["checkpoint_at_kill"], figures["checkpoint_at_death"]
    assert isinstance(at_kill, int) and isinstance(at_death, int), figures
    assert at_death <= at_kill + 1, figures
    assert figures["checkpoint_3s_later"] == at_death, figures
    resumed = figures["resumed_from_step"]
    assert isinstance(resumed, int) and resumed >= 2, figures


def test_the_trainer_dies_with_its_runner_and_the_next_runner_resumes(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.runner_killed(cluster, tmp_path)
    _assert_resumed_alone(figures)
    assert (tmp_path / "training.done").is_file()
    assert not (tmp_path / trainer_lease.LEASE_FILE).exists()  # released at the end


def test_killing_rays_job_supervisor_actor_ends_the_trainer_too(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.supervisor_killed(cluster, tmp_path)
    _assert_resumed_alone(figures)
    assert "FAILED" in str(figures["job_status"]), figures


def test_a_second_runner_on_the_folder_stops_the_first_before_it_trains(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.second_runner(cluster, tmp_path)
    assert figures["outcome"] == "resumed" and figures["exit_code"] == 0, figures
    resumed = figures["resumed_from_step"]
    assert isinstance(resumed, int) and resumed >= 2, figures
    assert figures["first_trainer_gone_before_second_started"], figures
    assert figures["first_runner_exit"] != 0, figures  # stopped, as a user stop
    first_log = (tmp_path / "runner.log").read_text()
    assert "(user_stop)" in first_log, first_log
    second_log = (tmp_path / "runner-2.log").read_text()
    assert "still running here: stopping it" in second_log, second_log
    assert (tmp_path / "training.done").is_file()


def test_a_lost_node_that_never_comes_back_ends_the_run_saying_why(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.node_lost_no_replacement(cluster, tmp_path, wait_s=5.0)
    assert figures["outcome"] == "failed" and figures["exit_code"] != 0, figures
    ended = figures["ended"]
    assert isinstance(ended, dict) and ended["cause"] == supervise.NO_CAPACITY, figures
    assert "held 1 of the 2 GPUs" in ended["detail"], ended
    waits = figures["waits"]
    assert isinstance(waits, dict), figures
    assert waits["node_death_bound"] == 3 * (1.0 + 3.0)  # HEAD_ENV's health-check bound
    assert 5.0 <= waits["capacity"] < 5.0 + 60, waits
    # What tools.run shows of the driver log's last record.
    record = recovery_log.latest_record((tmp_path / "runner.log").read_text())
    assert record is not None
    rows = dict(recovery_log.describe(record))
    assert rows["ended"].startswith("no_capacity: the cluster's alive nodes held 1 of the 2")
    assert "for the GPUs to come back" in rows["attempt 1"], rows


def test_queueing_for_gpus_before_the_first_step_is_not_a_hang(
    cluster: scenarios.Cluster, tmp_path: Path
) -> None:
    figures = scenarios.capacity_before_first_step(cluster, tmp_path)
    assert figures["outcome"] == "trained" and figures["causes"] == ["succeeded"], figures
    waits = figures["waits"]
    # Queued past the first-step bound (10 s), then trained: no hang.
    assert isinstance(waits, dict) and waits["capacity_before_first_step"] > 12, figures

"""The recovery scenarios, run through the real runner (payloads/export/run_grpo.py and its
supervisor) against a real Ray head and "GPU nodes" (tests/support/ray_nodes.py) of the pinned
Ray 2.49, with the stand-in trainer tests/job_fixtures/gpu_trainer.py. Shared by
tests/test_recovery.py (which asserts) and bench/recovery.py (which prints).

Every wait polls a condition with a generous bound; every process is stopped by PID.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from payloads.export import supervise, trainer_lease
from tests.support.ray_head import LOOPBACK_ENV, RayHead, _descendants, temporary_ray_head
from tests.support.ray_nodes import RayNode, start_gpu_node, wait_for_gpus

REPO = Path(__file__).resolve().parents[2]
# The clone's own folders unless the environment names others (tests/support/require.py
# LOCAL_FOLDERS: where `bash .ci/setup` installs them), so bench/recovery.py runs from any clone.
RAY_VENV = Path(os.environ.get("VERL_GKE_RAY_VENVS") or REPO / ".venv-ray") / "2.49.0"
VERL_VENV = Path(os.environ.get("VERL_GKE_VERL_VENVS") or REPO / ".venv-verl") / "0.6.1"
RUNNER = REPO / "payloads" / "export" / "run_grpo.py"
TRAINER = REPO / "tests" / "job_fixtures" / "gpu_trainer.py"
CONFIG_ERROR = REPO / "tests" / "job_fixtures" / "verl_config_error.py"
WORLD_SIZE = 2
HANG_FLOOR_S = 8.0
# The runner's --length (run_grpo.py requires it): one epoch, as the stand-in trainer runs.
RUN_LENGTH = ("--length", json.dumps({"total_epochs": 1}))
WAIT_S = 420.0
# Steps of a run that must be ended from outside (steps of 1 s: longer than any bound here).
LONG_RUN_STEPS = 600
# GCS declares a silent raylet dead after failure_threshold failed checks, one every period,
# each failing after at most timeout (Ray's defaults 5, 3 s, 10 s: ray_config_def.h, Ray
# 2.47/2.49); shortened here so a lost node is noticed sooner. The runner gets the same settings
# (in a pod it shares the head's environment): it waits that bound before counting GPUs.
HEAD_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "3000",
}


@dataclass
class Cluster:
    head: RayHead
    log_dir: Path
    nodes: list[RayNode] = field(default_factory=list)

    def whole(self) -> None:
        """Until WORLD_SIZE GPU nodes of ours are alive (starting replacements as needed)."""
        while len(self.nodes) < WORLD_SIZE:
            self.nodes.append(start_gpu_node(self.head, RAY_VENV / "bin" / "ray", self.log_dir))
        wait_for_gpus(self.head, WORLD_SIZE)

    def lose_node(self) -> None:
        self.nodes.pop().kill()


@contextmanager
def cluster() -> Iterator[Cluster]:
    # The Ray release's bin folder on PATH, as in an image: its agents find py-spy there.
    path = f"{RAY_VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    with temporary_ray_head(
        "rec", ray_bin=RAY_VENV / "bin" / "ray", extra_env={**HEAD_ENV, "PATH": path}
    ) as head:
        made = Cluster(head=head, log_dir=head.temp_dir / "nodes")
        try:
            made.whole()
            yield made
        finally:
            for node in made.nodes:
                node.stop()


@dataclass
class Run:
    run_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def record(self) -> dict[str, Any]:
        return supervise.read_record(self.run_dir) or {"attempts": []}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: str, condition: Callable[[], bool]) -> float:
        """Seconds until condition() holds; raises with the runner's log after WAIT_S."""
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > WAIT_S:
                self.terminate()
                raise TimeoutError(f"{what}: not within {WAIT_S} s; runner log:\n{self.log_text()}")
            time.sleep(0.2)
        return time.monotonic() - started

    def finish(self) -> int:
        self.wait_for("runner exit", lambda: self.process.poll() is not None)
        return self.process.returncode

    def terminate(self) -> None:
        """SIGTERM to the runner and its descendants, as Ray's job stop does
        (dashboard/modules/job/job_supervisor.py: the entrypoint and children, recursively)."""
        for pid in [self.process.pid, *_descendants(self.process.pid)]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def checkpoint(self) -> int:
        return supervise.latest_checkpoint(self.run_dir) or 0


def runner_command(
    made: Cluster,
    run_dir: Path,
    trainer: list[str] | None = None,
    max_restarts: int = 2,
    runner_options: tuple[str, ...] = (),
    **trainer_options: Any,
) -> list[str]:
    """The runner's command line, as the job's entrypoint runs it on the head, supervising
    `trainer` (by default the stand-in GPU trainer with `trainer_options` as its flags)."""
    python = str(RAY_VENV / "bin" / "python")
    if trainer is None:
        flags = [
            f"--{key.replace('_', '-')}" + ("" if value is True else f"={value}")
            for key, value in trainer_options.items()
        ]
        trainer = [python, str(TRAINER), f"--run-dir={run_dir}", *flags]
    return [
        python, str(RUNNER), "--run-dir", str(run_dir),
        "--identity", json.dumps({"world_size": WORLD_SIZE}),
        *RUN_LENGTH,
        "--max-restarts", str(max_restarts), "--first-step-bound-s", "240",
        "--hang-floor-s", str(HANG_FLOOR_S), "--gpus-needed", str(WORLD_SIZE),
        "--capacity-wait-s", str(WAIT_S), "--dashboard-url", made.head.dashboard_url,
        *runner_options, "--", *trainer,
    ]  # fmt: skip


def start(
    made: Cluster,
    run_dir: Path,
    trainer: list[str] | None = None,
    max_restarts: int = 2,
    runner_options: tuple[str, ...] = (),
    **trainer_options: Any,
) -> Run:
    """The runner as a process of ours (runner_command), its output in run_dir/runner.log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    command = runner_command(
        made, run_dir, trainer, max_restarts, runner_options, **trainer_options
    )
    env = {**os.environ, **LOOPBACK_ENV, **HEAD_ENV, "RAY_ADDRESS": made.head.gcs_address}
    log = run_dir / ("runner.log" if not (run_dir / "runner.log").exists() else "runner-2.log")
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return Run(run_dir=run_dir, process=process, log=log)


def result(scenario: str, run: Run, code: int, detected_s: float | None) -> dict[str, Any]:
    attempts = run.record()["attempts"]
    resumed = attempts[-1]["resumed_from_step"] if len(attempts) > 1 else None
    retried = len(attempts) > 1
    outcome = "resumed" if code == 0 and retried else "not_retried" if len(attempts) == 1 else None
    return {
        "scenario": scenario,
        "outcome": outcome or ("resumed" if code == 0 else "failed"),
        "exit_code": code,
        "detected_s": None if detected_s is None else round(detected_s, 1),
        "resumed_from_step": resumed,
        "last_checkpoint_step": run.checkpoint(),
        "attempts": len(attempts),
        "causes": [attempt["cause"] for attempt in attempts],
        "person_needed": code != 0 and scenario not in ("config_error", "user_stop"),
    }


def _step_after(log: str, marker: str) -> bool:
    """Whether a step line follows the runner's `marker` line in the log."""
    _, found, after = log.partition(marker)
    return bool(found) and "step:" in after


def worker_node_lost(
    made: Cluster,
    run_dir: Path,
    runner_options: tuple[str, ...] = (),
    replace_after: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """A GPU node SIGKILLed mid-run, a replacement started (once `replace_after` holds: on
    flex-start the node comes only for a request): resumed from the last checkpoint."""
    made.whole()
    run = start(made, run_dir, runner_options=runner_options, steps=10, step_seconds=1.0)
    run.wait_for("checkpoint 2", lambda: run.checkpoint() >= 2)
    made.lose_node()
    detected = run.wait_for(
        "the lost node's attempt to end",
        lambda: run.record()["attempts"][0].get("cause") is not None,
    )
    lost_at = time.monotonic() - detected
    if replace_after is not None:
        run.wait_for("the runner to ask for a node", replace_after)
    made.whole()  # the replacement node (the supervisor waits for it)
    run.wait_for("a step of attempt 2", lambda: _step_after(run.log_text(), "attempt 2 ("))
    training_again_s = round(time.monotonic() - lost_at, 1)
    figures = result("worker_node_lost", run, run.finish(), detected)
    return {**figures, "training_again_s": training_again_s}


def hang(made: Cluster, run_dir: Path, every_attempt: bool = False) -> dict[str, Any]:
    """The trainer stops printing steps at step 3 (once, or every attempt)."""
    made.whole()
    # Every attempt: no checkpoint before the hang (save_freq 10), so the second attempt logs
    # steps again before it hangs and the step-based bound (the floor) applies, not the longer
    # bound before an attempt's first step.
    options = {"hang_every_attempt": True, "save_freq": 10} if every_attempt else {}
    run = start(made, run_dir, max_restarts=1, steps=5, step_seconds=0.5, hang_at_step=3, **options)
    code = run.finish()
    first = run.record()["attempts"][0]
    name = "restart_budget" if every_attempt else "hang"
    return result(name, run, code, first.get("detected_s"))


def config_error(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """verl (Hydra composing verl 0.6.1's ppo_trainer) refuses an override: not retried."""
    trainer = [str(VERL_VENV / "bin" / "python"), str(CONFIG_ERROR), "trainer.no_such_key=1"]
    run = start(made, run_dir, trainer=trainer)
    return result("config_error", run, run.finish(), None)


def user_stop(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """The job is stopped (SIGTERM, as `ray job stop` / tools.run stop) after its first step."""
    made.whole()
    run = start(made, run_dir, steps=30, step_seconds=1.0)
    run.wait_for("checkpoint 1", lambda: run.checkpoint() >= 1)
    stopped = time.monotonic()
    run.terminate()
    code = run.finish()
    return result("user_stop", run, code, time.monotonic() - stopped)


def _gone(pid: int, start: str | None) -> bool:
    return start is None or trainer_lease.process_start(pid) != start


def alive_actors(made: Cluster, class_name: str) -> int:
    """Ray's ALIVE actors of that class (the state API, GET /api/v0/actors)."""
    query = urllib.parse.urlencode(
        {"limit": 10000, "filter_keys": "state", "filter_predicates": "=", "filter_values": "ALIVE"}
    )
    url = f"{made.head.dashboard_url}/api/v0/actors?{query}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        actors = json.loads(answer.read())["data"]["result"]["result"]
    return sum(1 for actor in actors if actor.get("class_name") == class_name)


def _wait(what: str, condition: Callable[[], bool], log: Callable[[], str]) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > WAIT_S:
            raise TimeoutError(f"{what}: not within {WAIT_S} s; log:\n{log()}")
        time.sleep(0.2)
    return time.monotonic() - started


def _trainer_of(run_dir: Path) -> tuple[int, str | None]:
    lease = trainer_lease.read(run_dir) or {}
    return int(lease.get("trainer_pid") or 0), lease.get("trainer_start")


def _resume_after_death(
    made: Cluster, run_dir: Path, killed_at: float, name: str, log: Callable[[], str]
) -> dict[str, Any]:
    """After the runner died at `killed_at`: until its trainer and the trainer's Ray workers are
    gone, then a new runner on the same folder trains on from the checkpoint."""
    at_kill = supervise.latest_checkpoint(run_dir) or 0
    pid, started = _trainer_of(run_dir)
    _wait("the trainer to die with its runner", lambda: _gone(pid, started), log)
    trainer_gone_s = time.monotonic() - killed_at
    checkpoint = supervise.latest_checkpoint(run_dir) or 0
    _wait("Ray to end the trainer's workers", lambda: alive_actors(made, "Worker") == 0, log)
    workers_gone_s = time.monotonic() - killed_at
    time.sleep(3.0)  # nothing trains on: no checkpoint after the trainer's death
    after = supervise.latest_checkpoint(run_dir) or 0
    run = start(made, run_dir, steps=8, step_seconds=0.5)
    code = run.finish()
    figures = result(name, run, code, trainer_gone_s)
    attempts = run.record()["attempts"]
    return {
        **figures,
        "outcome": "resumed" if code == 0 else "failed",
        "resumed_from_step": attempts[0]["resumed_from_step"] if attempts else None,
        "checkpoint_at_kill": at_kill,
        "checkpoint_at_death": checkpoint,
        "checkpoint_3s_later": after,
        "workers_gone_s": round(workers_gone_s, 1),
        "person_needed": code != 0,
    }


def runner_killed(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """The runner SIGKILLed by PID mid-run (as Ray's watcher kills the entrypoint's process group
    when the JobSupervisor actor dies): its trainer dies with it, Ray ends the trainer's workers,
    and the next runner on the folder resumes from the checkpoint (detected_s: SIGKILL to the
    trainer's death)."""
    made.whole()
    # More steps than the bounds below allow: a trainer that outlives its runner trains on.
    run = start(made, run_dir, steps=LONG_RUN_STEPS, step_seconds=1.0)
    run.wait_for("checkpoint 2", lambda: run.checkpoint() >= 2)
    killed_at = time.monotonic()
    os.kill(run.process.pid, signal.SIGKILL)
    run.process.wait()
    return _resume_after_death(made, run_dir, killed_at, "runner_killed", run.log_text)


def supervisor_killed(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """The runner as a Ray job's entrypoint; Ray's JobSupervisor actor SIGKILLed by PID: Ray
    kills the entrypoint's process group (job_supervisor.py _exec_entrypoint), the trainer dies
    with the runner, and the next runner resumes."""
    from ray.job_submission import JobSubmissionClient

    made.whole()
    run_dir.mkdir(parents=True, exist_ok=True)
    command = runner_command(made, run_dir, steps=LONG_RUN_STEPS, step_seconds=1.0)
    client = JobSubmissionClient(made.head.dashboard_url)
    job = client.submit_job(entrypoint=shlex.join(command))

    def log() -> str:
        return client.get_job_logs(job)

    _wait("checkpoint 2", lambda: (supervise.latest_checkpoint(run_dir) or 0) >= 2, log)
    query = urllib.parse.urlencode(
        {
            "filter_keys": "name", "filter_predicates": "=",
            "filter_values": f"_ray_internal_job_actor_{job}",
        }
    )  # fmt: skip
    url = f"{made.head.dashboard_url}/api/v0/actors?{query}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        (actor,) = json.loads(answer.read())["data"]["result"]["result"]
    killed_at = time.monotonic()
    os.kill(int(actor["pid"]), signal.SIGKILL)
    figures = _resume_after_death(made, run_dir, killed_at, "supervisor_killed", log)
    return {**figures, "job_status": str(client.get_job_status(job))}


def second_runner(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """A second runner started on a folder whose first runner still trains: it stops the first
    (runner and trainer) before its own trainer starts, then trains alone."""
    made.whole()
    first = start(made, run_dir, steps=LONG_RUN_STEPS, step_seconds=1.0)
    first.wait_for("checkpoint 2", lambda: first.checkpoint() >= 2)
    first_trainer = _trainer_of(run_dir)
    second = start(made, run_dir, steps=8, step_seconds=0.5)
    second.wait_for(
        "the second runner's trainer",
        lambda: (trainer_lease.read(run_dir) or {}).get("runner_pid") == second.process.pid
        and bool((trainer_lease.read(run_dir) or {}).get("trainer_pid")),
    )
    first_gone_before = _gone(*first_trainer)
    first_code = first.finish()
    code = second.finish()
    figures = result("second_runner", second, code, None)
    attempts = second.record()["attempts"]
    return {
        **figures,
        "outcome": "resumed" if code == 0 else "failed",
        "resumed_from_step": attempts[0]["resumed_from_step"] if attempts else None,
        "first_trainer_gone_before_second_started": first_gone_before,
        "first_runner_exit": first_code,
        "person_needed": code != 0,
    }


def node_lost_no_replacement(made: Cluster, run_dir: Path, wait_s: float = 15.0) -> dict[str, Any]:
    """A GPU node SIGKILLed mid-run and none comes back: the runner gives up after its capacity
    wait, and the record says so (`ended`) with each wait under its cause."""
    made.whole()
    options = ("--capacity-wait-s", str(wait_s))
    run = start(made, run_dir, runner_options=options, steps=LONG_RUN_STEPS, step_seconds=1.0)
    run.wait_for("checkpoint 2", lambda: run.checkpoint() >= 2)
    lost_at = time.monotonic()
    made.lose_node()
    try:
        code = run.finish()
    finally:
        made.whole()  # the replacement, for the scenarios after this one
    record = run.record()
    figures = result("node_lost_no_replacement", run, code, time.monotonic() - lost_at)
    return {
        **figures,
        "outcome": "failed" if code != 0 else "resumed",
        "gave_up_after_s": figures["detected_s"],
        "ended": record.get("ended"),
        "waits": record["attempts"][0].get("waits") if record["attempts"] else None,
    }


def capacity_before_first_step(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """The run starts while a GPU node is missing (verl's placement groups wait for it); the node
    comes only after the first-step bound (10 s) has passed: that time is capacity queueing,
    not a hang, and the record shows it."""
    made.whole()
    made.lose_node()
    # Once the GCS has declared the node dead: on 127.0.0.1 a driver could otherwise pick the
    # dead node's raylet as its own (a test-only artefact: one machine, one address).
    wait_for_gpus(made.head, WORLD_SIZE - 1)
    # The bound leaves the trainer's start on the returned node (placement, worker processes,
    # the first step) time enough on a loaded machine; the queueing lasts longer than it.
    bound_s = 10.0
    options = ("--first-step-bound-s", str(bound_s), "--gpu-poll-s", "1")
    run = start(made, run_dir, runner_options=options, steps=4, step_seconds=0.5)
    # The GCS declares the lost node dead only after its health-check bound; then the runner
    # counts the missing GPUs for twice the first-step bound.
    run.wait_for(
        "the runner to count a queued wait past the first-step bound",
        lambda: (run.record()["attempts"] or [{}])[0]
        .get("waits", {})
        .get("capacity_before_first_step", 0)
        > bound_s + 2,
    )
    made.whole()
    code = run.finish()
    figures = result("capacity_before_first_step", run, code, None)
    attempts = run.record()["attempts"]
    return {
        **figures,
        "outcome": "trained" if code == 0 and len(attempts) == 1 else figures["outcome"],
        "waits": attempts[0].get("waits") if attempts else None,
    }


def flex_start_relost(made: Cluster, run_dir: Path) -> dict[str, Any]:
    """Standard flex-start: a GPU node lost while the request the workers consume was Provisioned
    less than provreq.BOOKING_WINDOW_S ago (it still books capacity, so no request is made at
    first); the runner asks again every ASK_AGAIN_S and makes one once the window has passed.
    The stand-in API server (tests/support/kube_api.py) plays the Kubernetes API; the replacement
    node is started only after the runner's request, as queued provisioning does."""
    from datetime import UTC, datetime, timedelta

    from manifests import capacity
    from manifests.ray_cluster import WORKER_GROUP
    from payloads.export import provreq
    from tests.support.kube_api import TOKEN, CapacityApi

    name = "rec-gpu-capacity"
    spec = {
        "request": capacity.request_body("default", name, name, WORLD_SIZE),
        "ray_cluster": "rec", "worker_group": WORKER_GROUP,
        "consume_annotation": capacity.CONSUME_ANNOTATION, "gpus_per_node": 1,
    }  # fmt: skip
    # Provisioned so recently that the window is still open when the runner first asks (after
    # checkpoint 2 and Ray's 12 s node-death bound here).
    since = datetime.now(UTC) - timedelta(seconds=provreq.BOOKING_WINDOW_S - 45)
    provisioned = {"type": "Provisioned", "status": "True",
                   "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")}  # fmt: skip
    template = {"metadata": {"annotations": {capacity.CONSUME_ANNOTATION: name}}}
    ray_cluster = {
        "metadata": {"name": "rec"},
        "spec": {"workerGroupSpecs": [{"groupName": WORKER_GROUP, "template": template}]},
    }
    requests = {name: {**spec["request"], "status": {"conditions": [provisioned]}}}
    token = run_dir / "token"
    run_dir.mkdir(parents=True, exist_ok=True)
    token.write_text(TOKEN)
    with CapacityApi("default", ray_cluster, requests) as api:
        options = (
            "--capacity-request", json.dumps(spec),
            "--kube-api-server", api.endpoint, "--kube-token-file", str(token),
        )  # fmt: skip
        figures = worker_node_lost(
            made,
            run_dir,
            runner_options=options,
            replace_after=lambda: any(call[0] == "POST" for call in api.calls),
        )
        posted = [call[3]["metadata"]["name"] for call in api.calls if call[0] == "POST"]
    return {**figures, "scenario": "flex_start_relost", "requests_made": posted}


SCENARIOS: dict[str, Callable[[Cluster, Path], dict[str, Any]]] = {
    "worker_node_lost": worker_node_lost,
    "hang": hang,
    "config_error": config_error,
    "user_stop": user_stop,
    "restart_budget": lambda made, run_dir: hang(made, run_dir, every_attempt=True),
    "runner_killed": runner_killed,
    "supervisor_killed": supervisor_killed,
    "second_runner": second_runner,
    "node_lost_no_replacement": node_lost_no_replacement,
    "capacity_before_first_step": capacity_before_first_step,
    "flex_start_relost": flex_start_relost,
}

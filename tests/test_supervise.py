"""The supervisor's pure rules: its copy of verl's step-line pattern agrees with jobs/verl_log.py,
the exit causes it names from the real error texts of the pinned Ray releases, Hydra and PyTorch,
and the hang bound.

Rules encoded, with their source:
- Ray 2.47/2.49 gcs_server (ray/core/src/ray/gcs/gcs_server, GcsActorManager) writes "The actor
  died because its node has died. Node Id: ..." for an actor whose node is lost, and "The actor is
  dead because its worker process has died. Worker exit type: ..." for a dead worker;
  ray/exceptions.py ActorDiedError.BASE_ERROR_MSG is "The actor died unexpectedly before
  finishing this task."; the raylet's memory monitor "Task was killed due to the node running
  low on memory." (read from the installed releases below, not copied).
- Hydra 1.3 (verl 0.6.1's pin) refuses an unknown override with "Could not override '<key>'."
  (hydra/_internal/config_loader_impl.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from config import bucket_layout
from jobs import verl_log
from payloads.export import supervise
from tests.support.require import require, verl_installed

RAY_VENVS = Path(
    os.environ.get("VERL_GKE_RAY_VENVS", Path(__file__).resolve().parents[1] / ".venv-ray")
)
PINNED_RAY = ("2.47.0", "2.49.0")
GCS_SERVER = "core/src/ray/gcs/gcs_server"
RAYLET = "core/src/ray/raylet/raylet"
NCCL = "nccl_error"

STEP_LINES = (
    "step:3 - actor/pg_loss:-0.0123 - critic/score/mean:0.41 - timing_s/step:93.2",
    "(TaskRunner pid=1234) step:4 - timing_s/step:90.1",
    "\x1b[36m(TaskRunnerV1 pid=1, ip=10.0.0.2)\x1b[0m step:5 - training/global_step:5",
    "(TaskRunner pid=7) step:6 - timing_s/step:np.float64(9.5) [repeated 2x across cluster]",
    "Training Progress: 10%|#\rstep:7 - timing_s/step:1.0",
    "step:0 - val-core/openai/gsm8k/reward/mean@1:0.2",
    "(TaskRunner pid=1234) step:2 - val-core/x:0.3",
    "step:8",
    "nostep:9 - timing_s/step:1",
    "vLLM INFO step: 3 tokens",
    "",
)


@pytest.mark.parametrize("line", STEP_LINES)
def test_the_step_pattern_copy_agrees_with_jobs_verl_log(line: str) -> None:
    parsed = verl_log.parse_step_line(line)
    expected = parsed.step if parsed is not None and parsed.is_training_step else None
    assert supervise.training_step(line) == expected


def test_the_step_lines_above_cover_both_answers() -> None:
    found = [supervise.training_step(line) for line in STEP_LINES]
    assert {3, 4, 5, 6, 7} <= set(found) and None in found


@pytest.mark.parametrize("name", ["RECOVERY_FILE", "STACKS_DIR"])
def test_supervisor_names_agree_with_the_bucket_layout(name: str) -> None:
    assert getattr(supervise, name) == getattr(bucket_layout, name)


def _binary_text(path: Path, start: bytes) -> str:
    """The NUL-terminated string of the binary that starts with `start`."""
    data = path.read_bytes()
    at = data.find(start)
    assert at >= 0, f"{start!r} not in {path}"
    return data[at : data.index(b"\0", at)].decode()


def _ray_site(version: str) -> Path:
    found = sorted((RAY_VENVS / version / "lib").glob("python3*/site-packages/ray"))
    require(found, f"Ray {version} virtualenv under {RAY_VENVS} (VERL_GKE_RAY_VENVS)")
    return found[0]


@pytest.mark.parametrize("version", PINNED_RAY)
@pytest.mark.parametrize(
    ("binary", "start", "cause"),
    [
        (GCS_SERVER, b"The actor died because its node", supervise.NODE_LOST),
        (GCS_SERVER, b"The actor is dead because its worker", supervise.ACTOR_DIED),
        (RAYLET, b"Task was killed due to the node", supervise.OUT_OF_MEMORY),
    ],
)
def test_rays_own_texts_name_their_cause(
    version: str, binary: str, start: bytes, cause: str
) -> None:
    text = _binary_text(_ray_site(version) / binary, start)
    tail = ["Traceback (most recent call last):", f"ray.exceptions.RayTaskError: {text}abc123"]
    assert supervise.classify(tail) == cause
    # All three are retried (memory: once per step; the second time at one step is final).
    assert cause in supervise.RETRIED


@pytest.mark.parametrize("version", PINNED_RAY)
def test_rays_actor_died_message_is_retried(version: str) -> None:
    source = (_ray_site(version) / "exceptions.py").read_text()
    message = re.search(r'BASE_ERROR_MSG = "(The actor died[^"]*)"', source)
    assert message is not None
    assert supervise.classify(["ray.exceptions.ActorDiedError: " + message.group(1)]) == (
        supervise.ACTOR_DIED
    )
    assert supervise.ACTOR_DIED in supervise.RETRIED


@pytest.mark.parametrize("version", PINNED_RAY)
def test_a_worker_refusing_its_config_in_init_is_not_retried(version: str) -> None:
    """An actor whose __init__ raises dies with ActorDiedError "The actor died because of an error
    raised in its creation task, ..." (ray/exceptions.py at Ray 2.47/2.49); verl 0.6.1's
    ActorRolloutRefWorker.__init__ (workers/fsdp_workers.py) refuses a batch size that way. The
    driver's tail (as Ray 2.47 printed it here for a nested actor, verl's TaskRunner layout)
    names the AssertionError: final, never a dead actor to retry."""
    source = (_ray_site(version) / "exceptions.py").read_text()
    found = re.search(
        r'"(The actor died because of an error)"\s*"( raised in its creation task, )"', source
    )
    assert found is not None
    message = found.group(1) + found.group(2)
    workers = (verl_installed("0.6.1", "verl") / "workers" / "fsdp_workers.py").read_text()
    assert "assert self.config.actor.ppo_mini_batch_size > 0" in workers
    tail = [
        "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=7, ip=10.0.0.2)",
        f"ray.exceptions.ActorDiedError: {message}ray::WorkerDict.__init__() (pid=9, ip=10.0.0.3)",
        '  File "verl/workers/fsdp_workers.py", line 237, in __init__',
        "AssertionError: ppo_mini_batch_size 0 should be larger than 0 after normalization",
    ]
    assert supervise.classify(tail) == supervise.VERL_REFUSED
    assert supervise.VERL_REFUSED not in supervise.RETRIED
    # The same creation-task death without a Python error line is not a dead actor either.
    assert supervise.classify(tail[:2]) == supervise.UNKNOWN


def test_hydras_refusal_of_an_override_is_a_config_error_and_not_retried() -> None:
    hydra = verl_installed("0.6.1", "hydra")
    source = (hydra / "_internal" / "config_loader_impl.py").read_text()
    assert "Could not override '{override.key_or_group}'." in source
    tail = ["hydra.errors.ConfigCompositionException: Could not override 'trainer.x'."]
    assert supervise.classify(tail) == supervise.CONFIG_ERROR
    assert supervise.CONFIG_ERROR not in supervise.RETRIED


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64)", NCCL),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970", NCCL),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
        ("ValueError: train_batch_size (7) must be divisible by ...", "verl_refused_input"),
        ("AssertionError: ppo_mini_batch_size must be >= n_gpus", "verl_refused_input"),
        ("Segmentation fault (core dumped)", "unknown"),
    ],
)
def test_other_texts(line: str, cause: str) -> None:
    assert supervise.classify(["some output", line]) == cause


def test_memory_wins_over_the_dead_worker_it_caused() -> None:
    tail = [
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
    ]
    assert supervise.classify(tail) == supervise.OUT_OF_MEMORY


def test_hang_bound_is_a_multiple_of_the_slowest_step_with_a_floor() -> None:
    assert supervise.hang_bound([], floor_s=600, factor=3) == 600
    assert supervise.hang_bound([100, 250, 120], floor_s=600, factor=3) == 750
    assert supervise.hang_bound([10, 20], floor_s=600, factor=3) == 600


def test_a_step_that_saves_gets_the_save_allowance() -> None:
    # verl v0.6.1 fit() saves at every save_freq-th step and at the last, before that step's
    # line (verl/trainer/ppo/ray_trainer.py).
    policy = supervise.Policy(0, 60.0, 10.0, save_freq=5, save_allowance_s=100.0, total_steps=12)
    assert [policy.step_bound(step, 10.0) for step in (4, 5, 10, 11, 12)] == [
        10.0,
        110.0,
        110.0,
        10.0,
        110.0,
    ]
    # The count verl printed outranks the plan's (filter_overlong_prompts may drop rows).
    assert [policy.step_bound(step, 10.0, printed_total=11) for step in (11, 12)] == [110.0, 10.0]
    unknown_total = supervise.Policy(0, 60.0, 10.0, save_freq=5, save_allowance_s=100.0)
    assert unknown_total.step_bound(7, 10.0) == 110.0  # any step may be the last
    assert supervise.Policy(0, 60.0, 10.0).step_bound(5, 10.0) == 10.0  # saves never


# A trainer whose second step saves for 3 s before its line, as verl's does.
SAVING_TRAINER = """
import time
print("step:1 - training/global_step:1 - timing_s/step:0.1", flush=True)
time.sleep(3)
print("step:2 - training/global_step:2 - timing_s/step:3.0", flush=True)
"""


# verl prints its step count as its TaskRunner actor's line (ray_trainer.py, v0.6.1 and 0.9.0);
# here 2, fewer than the plan's 12 (rows dropped as overlong), so step 2 is the last and saves.
COUNTED_TRAINER = (
    'print("(TaskRunner pid=7) Total training steps: 2", flush=True)\n' + SAVING_TRAINER
)


@pytest.mark.parametrize(
    ("allowance_s", "planned_total", "trainer", "hung"),
    [
        (60.0, 2, SAVING_TRAINER, False),
        (0.0, 2, SAVING_TRAINER, True),
        (60.0, 12, COUNTED_TRAINER, False),
        (60.0, 12, SAVING_TRAINER, True),  # without the printed count step 2 is not a save
    ],
)
def test_a_slow_save_is_not_a_hang_within_its_allowance(
    tmp_path: Path, allowance_s: float, planned_total: int, trainer: str, hung: bool
) -> None:
    policy = supervise.Policy(
        max_restarts=0, first_step_bound_s=120.0, hang_floor_s=1.0, hang_factor=1.0,
        save_freq=5, save_allowance_s=allowance_s, total_steps=planned_total,
    )  # fmt: skip
    said: list[str] = []
    code = supervise.supervise(
        [sys.executable, "-c", trainer], tmp_path, policy, "http://127.0.0.1:9", said.append
    )
    record = supervise.read_record(tmp_path)
    assert record is not None
    causes = [attempt["cause"] for attempt in record["attempts"]]
    if hung:
        assert code != 0 and causes == ["hang"], said
    else:
        assert code == 0 and causes == ["succeeded"], said


@pytest.mark.integration
@pytest.mark.parametrize("version", ["2.47.0", "2.49.0"])
def test_the_gpu_count_waits_for_rays_node_death_bound(version: str) -> None:
    # Ray's GCS declares a node dead after health_check_failure_threshold failed checks, one
    # every health_check_period_ms, each failing after at most health_check_timeout_ms
    # (ray_config_def.h; defaults 5, 3000, 10000 in both releases). The runner reads them from
    # the RAY_ environment it shares with the head, as the GCS does.
    python = RAY_VENVS / version / "bin" / "python"
    require(python.exists(), f"Ray {version} virtualenv at {python}")
    code = "from payloads.export.supervise import Cluster; print(Cluster('x').death_grace_s())"
    repo = Path(__file__).resolve().parents[1]

    def grace(**settings: str) -> float:
        env = {**os.environ, "PYTHONPATH": str(repo), **settings}
        done = subprocess.run(
            [str(python), "-c", code], cwd=repo, env=env, capture_output=True, text=True,
            timeout=300, check=True,
        )  # fmt: skip
        return float(done.stdout.strip().splitlines()[-1])

    assert grace() == 5 * (3.0 + 10.0)
    shortened = {
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "RAY_health_check_timeout_ms": "3000",
    }
    assert grace(**shortened) == 3 * (1.0 + 3.0)

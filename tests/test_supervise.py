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
from tests.support.require import require, verl_installed, verl_python

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


@pytest.mark.parametrize("version", PINNED_RAY)
def test_a_node_death_outranks_a_memory_line_earlier_in_the_tail(version: str) -> None:
    # vLLM or torch may print an out-of-memory line it recovered from; the node that died
    # afterwards ended the attempt (retried to the budget, not once per step).
    death = _binary_text(_ray_site(version) / GCS_SERVER, b"The actor died because its node")
    tail = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
        "step:4 - training/global_step:4 - timing_s/step:9.0",
        f"ray.exceptions.ActorDiedError: {death}0f3a",
    ]
    assert supervise.classify(tail) == supervise.NODE_LOST


# Ray's own exception classes, built and printed by the pinned releases (ray/exceptions.py):
# what a driver prints as a traceback's last line. ObjectFreedError is the program's own misuse.
RAY_OBJECT_ERRORS = """
import ray.exceptions as e
ref = "c8ef45ccd0112571ffffffffffffffffffffffff0100000001000000"
for name in ("ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError",
             "ObjectReconstructionFailedMaxAttemptsExceededError", "ObjectFetchTimedOutError",
             "ObjectFreedError"):
    text = str(getattr(e, name)(ref, b"", "")).replace(chr(10), " ")
    print(f"{name}\tray.exceptions.{name}: {text}")
print(f"RaySystemError\tray.exceptions.RaySystemError: {e.RaySystemError('lost GCS')}")
"""


def _ray_prints(version: str, code: str) -> dict[str, str]:
    python = RAY_VENVS / version / "bin" / "python"
    require(python.exists(), f"Ray {version} virtualenv at {python}")
    done = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    return dict(line.split("\t", 1) for line in done.stdout.splitlines() if "\t" in line)


@pytest.mark.parametrize("version", PINNED_RAY)
def test_objects_lost_with_a_node_and_rays_system_errors_are_retried(version: str) -> None:
    printed = _ray_prints(version, RAY_OBJECT_ERRORS)
    for name in (
        "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError",
        "ObjectReconstructionFailedMaxAttemptsExceededError", "ObjectFetchTimedOutError",
    ):  # fmt: skip
        # The text alone, and the text with its class name: both name the cause.
        message = printed[name].split(": ", 1)[1]
        assert supervise.classify(["Traceback (most recent call last):", message]) == (
            supervise.OBJECTS_LOST
        ), printed[name]
        assert supervise.classify([printed[name]]) == supervise.OBJECTS_LOST
    assert supervise.classify([printed["ObjectFreedError"].split(": ", 1)[1]]) == (
        supervise.UNKNOWN
    )
    assert supervise.classify([printed["RaySystemError"]]) == supervise.RAY_FATAL
    assert {supervise.OBJECTS_LOST, supervise.RAY_FATAL} <= supervise.RETRIED


@pytest.mark.parametrize("version", PINNED_RAY)
def test_rays_core_worker_fatal_errors_are_retried(version: str) -> None:
    # A RAY_CHECK that failed, as Ray's logging prints it: "[date] (pid) file.cc:line: " then the
    # check's text (Ray 2.49 prefixes it with its "unexpected system state" sentence).
    check = _binary_text(_ray_site(version) / "_raylet.so", b" Check failed: !core_worker_process")
    shutdown = _binary_text(_ray_site(version) / "_raylet.so", b"The core worker has already")
    # Two strings of the binary, printed one after the other, then the status.
    no_raylet = "".join(
        _binary_text(_ray_site(version) / "_raylet.so", start)
        for start in (b"Failed to get the system config from raylet", b"it is dead. Worker")
    )
    for line in (
        f"[2026-12-07 21:00:00,000 C 77 77] core_worker_process.cc:233: {check}",
        shutdown,
        f"[2026-12-07 22:14:27,744 E 10273 10364] core_worker_process.cc:863: {no_raylet}",
    ):
        assert supervise.classify(["*** StackTrace Information ***", line]) == supervise.RAY_FATAL


@pytest.mark.parametrize("version", PINNED_RAY)
def test_a_worker_killed_by_the_kernel_or_crashed_is_retried_once_per_step(version: str) -> None:
    # The raylet's words for a worker whose connection ended without an exit (node_manager):
    # what ActorDiedError carries when the kernel's OOM killer SIGKILLed the worker or it crashed.
    causes = _binary_text(_ray_site(version) / RAYLET, b". There are some potential root causes.")
    line = (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
        f"Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
        f"file{causes}"
    )
    assert supervise.classify([line]) == supervise.PROCESS_KILLED
    # Ray's crash handler in its processes: "*** %s received at time=%ld%s ***" (_raylet.so).
    handler = _binary_text(_ray_site(version) / "_raylet.so", b"*** %s received at time")
    segv = handler.replace("%s", "SIGSEGV", 1).replace("%ld", "1765141200").replace("%s", "")
    assert supervise.classify(["(WorkerDict pid=9) " + segv]) == supervise.PROCESS_KILLED
    assert supervise.PROCESS_KILLED in supervise.ONCE_PER_STEP


def test_a_python_segfault_and_a_kernel_kill_are_process_kills(tmp_path: Path) -> None:
    # CPython's own crash report (faulthandler, as Ray enables it in its workers) and exit status.
    crash = "import faulthandler, ctypes; faulthandler.enable(); ctypes.string_at(0)"
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True)
    assert done.returncode == -11 and "Fatal Python error: Segmentation fault" in done.stderr
    assert supervise.classify(done.stderr.splitlines()) == supervise.PROCESS_KILLED
    # Killed by SIGKILL (the kernel's OOM killer) with a harmless Python error line earlier: the
    # signal ended it, not verl.
    tail = ["KeyError: 'optional_metric' (ignored)", "step:3 - timing_s/step:1.0"]
    assert supervise.classify(tail, exit_code=-9) == supervise.PROCESS_KILLED
    assert supervise.classify(tail, exit_code=-15) == supervise.UNKNOWN  # someone's SIGTERM


# cudaGetErrorString of libcudart.so.12 (nvidia-cuda-runtime-cu12 12.8.90, the CUDA of verl 0.6's
# cu128 base image), read with ctypes on a machine without a GPU: cudaErrorMemoryAllocation (2)
# "out of memory", cudaErrorLaunchFailure (719) "unspecified launch failure",
# cudaErrorIllegalAddress (700) "an illegal memory access was encountered",
# cudaErrorECCUncorrectable (214) "uncorrectable ECC error encountered",
# cudaErrorNvlinkUncorrectable (220) "uncorrectable NVLink error detected during the execution".
# PyTorch prints them as "CUDA error: <text>" (c10/cuda/CUDAException.cpp
# c10_cuda_check_implementation); NCCL's CUDACHECK as "Cuda failure '<text>'".
CUDA_RUNTIME = {
    "cudaErrorMemoryAllocation": "out of memory",
    "cudaErrorLaunchFailure": "unspecified launch failure",
    "cudaErrorIllegalAddress": "an illegal memory access was encountered",
    "cudaErrorECCUncorrectable": "uncorrectable ECC error encountered",
    "cudaErrorNvlinkUncorrectable": "uncorrectable NVLink error detected during the execution",
}


@pytest.mark.parametrize("name", sorted(CUDA_RUNTIME))
def test_the_cuda_runtimes_own_errors(name: str) -> None:
    text = CUDA_RUNTIME[name]
    expected = (
        supervise.OUT_OF_MEMORY if name == "cudaErrorMemoryAllocation" else (supervise.CUDA_FAULT)
    )
    torch_line = f"RuntimeError: CUDA error: {text}"
    nccl_line = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:2010, unhandled "
        f"cuda error; Last error: Cuda failure '{text}'"
    )
    for line in (torch_line, nccl_line):  # the CUDA cause outranks the NCCL error it caused
        assert supervise.classify(["Traceback (most recent call last):", line]) == expected
    assert expected in supervise.ONCE_PER_STEP


def test_a_gpu_that_fell_off_the_bus_is_a_cuda_fault() -> None:
    # The NVIDIA driver's kernel log line for Xid 79 (NVIDIA's Xid catalog), where a tool prints it.
    line = "NVRM: Xid (PCI:0000:04:00): 79, pid=1911, GPU has fallen off the bus."
    assert supervise.classify([line]) == supervise.CUDA_FAULT


# An OSError as Python prints it, raised with the errno's own text (glibc strerror).
FS_ERROR = """
import errno, os, sys
code = getattr(errno, sys.argv[1])
raise OSError(code, os.strerror(code), sys.argv[2])
"""


@pytest.mark.parametrize("name", ["EIO", "ENOTCONN", "ESTALE"])
def test_file_system_errors_on_the_checkpoint_mount_are_retried_once_per_step(
    tmp_path: Path, name: str
) -> None:
    mount = supervise.mount_point(tmp_path)
    on_mount = tmp_path / "global_step_40" / "actor" / "model_world_size_16_rank_3.pt"
    elsewhere = Path("/proc/self/no_such_file") if mount != Path("/proc") else Path("/dev/x")

    def printed(path: Path) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", FS_ERROR, name, str(path)], capture_output=True, text=True
        )
        return done.stderr.splitlines()

    if mount != Path("/"):
        assert supervise.classify(printed(on_mount), 1, mount) == supervise.CHECKPOINT_IO
    assert supervise.classify(printed(on_mount), 1, tmp_path) == supervise.CHECKPOINT_IO
    assert supervise.classify(printed(elsewhere), 1, tmp_path) == supervise.UNKNOWN
    # An error without a file name (a write() on an open file) counts too.
    assert supervise.classify([printed(on_mount)[-1].split(": '")[0]], 1, tmp_path) == (
        supervise.CHECKPOINT_IO
    )
    assert supervise.CHECKPOINT_IO in supervise.ONCE_PER_STEP


VERL_REFUSALS = """
import sys
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
reward = {"custom_reward_function": {"path": "/no/such/reward.py", "name": "f"}}
try:  # verl 0.6.1 reads config.custom_reward_function, 0.9.0 config.reward.custom_reward_function
    get_custom_reward_fn(OmegaConf.create({**reward, "reward": reward}))
except FileNotFoundError:
    import traceback; traceback.print_exc()
print("=====", file=sys.stderr, flush=True)
torch.load("/checkpoints/run/global_step_4/actor/model_world_size_2_rank_0.pt")
"""


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_only_verls_own_missing_file_is_verl_refusing_its_input(release: str) -> None:
    """verl's get_custom_reward_fn raises FileNotFoundError for a reward file that does not exist
    (verl/trainer/ppo/reward.py at 0.6.1; verl/utils/import_utils.py load_module at 0.9.0): verl
    refused its input. The same error from
    torch.load of a checkpoint shard (torch/serialization.py) is the environment's: not verl's
    refusal (and not retried either: unknown)."""
    python = verl_python(release)
    done = subprocess.run(
        [str(python), "-c", VERL_REFUSALS], capture_output=True, text=True, timeout=600
    )
    verl_part, _, torch_part = done.stderr.partition("=====")
    assert "FileNotFoundError" in verl_part and "/no/such/reward.py" in verl_part, done.stderr
    assert supervise.classify(verl_part.splitlines(), 1) == supervise.VERL_REFUSED
    assert "FileNotFoundError" in torch_part and "torch/serialization.py" in torch_part
    assert supervise.classify(torch_part.splitlines(), 1) == supervise.UNKNOWN
    # Any line of that kind elsewhere in the tail changes nothing.
    tail = ["KeyError: 'x'", "TypeError: y", "FileNotFoundError: z", "last line"]
    assert supervise.classify(tail, 1) == supervise.UNKNOWN


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

"""Run verl's trainer until it finishes, restarting it after a lost node, a dead Ray actor, an
NCCL error or a hang; never after a failure a restart cannot fix.

The runner (run_grpo.py) calls supervise() on the Ray head. Each attempt is verl's trainer as a
child process whose output is passed through line by line (the job's driver log keeps verl's
lines) and read on the way:

* the step lines (verl's console logger, ``step:N - ... - timing_s/step:...``) drive the hang
  watchdog: no new training step within ``hang_bound()`` of the last one (a multiple of the
  slowest step seen, never below a floor), or within a separate bound before the first step,
  is a hang. A hung trainer's stacks are written to the run folder (Ray dashboard's
  /worker/traceback, py-spy on each node; py-spy on the driver), then it is stopped and
  restarted like a lost node.
* the exit is classified from the last lines of output (classify()): infrastructure causes are
  retried, everything else fails the job with its cause, as without the supervisor.
* before a restart the cluster must hold the GPUs of the whole worker group again
  (``wait_for_gpus``), so a replacement node that is still being created is waited for. On
  Standard flex-start the missing nodes are asked for again first (provreq.py: a request is
  provisioned once).
* every attempt is recorded in ``<run folder>/recovery.json`` (when, cause, resumed from which
  step, steps lost), which tools.run and the provider show.

verl resumes from ``latest_checkpointed_iteration.txt`` by itself (trainer.resume_mode=auto, its
default), so a restart is the same command again.

Stdlib only; Ray is imported lazily where the runner calls Ray's state API on the head.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

try:
    from . import provreq, trainer_lease  # imported as payloads.export.supervise (program, tests)
except ImportError:
    import provreq  # run as a script on the head: this folder is sys.path[0]
    import trainer_lease

# The record's summary is also printed to the driver log on this prefix, one JSON object per line
# (jobs/recovery_log.py reads the last one for tools.run and the provider).
LOG_PREFIX = "verl-gke-recovery: "
RECOVERY_FILE = "recovery.json"  # config/bucket_layout.py names it too (a test checks)
STACKS_DIR = "stacks"
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's tracker (fsdp checkpoint manager)
TAIL_LINES = 400
# The most entries Ray's state API serves (util/state/common.py RAY_MAX_LIMIT_FROM_API_SERVER);
# its default, 100, is fewer than a large run's actors, or nodes once dead ones are counted.
STATE_LIST_LIMIT = 10_000
# Standard flex-start: while the request the workers consume still books capacity, whether to
# ask for new nodes is decided again this often (two Kubernetes API reads each time).
ASK_AGAIN_S = float(os.environ.get("VERL_GKE_ASK_AGAIN_S", "30"))

# --- verl's step line: a copy of jobs/verl_log.py's pattern (payloads cannot import jobs/;
# tests/test_supervise.py checks that both parse the same lines alike).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_LINE = re.compile(r"^\s*(?:\([^()]*\bpid=\d+[^()]*\)\s+)?step:(\d+)(?: - (.*))?$")
_REPEATED_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_TRAINING_KEYS = ("timing_s/step", "training/global_step")
# verl prints its step count before training (verl/trainer/ppo/ray_trainer.py
# _create_dataloader: "Total training steps: N", v0.6.1 and 0.9.0), after the overlong prompts
# are filtered out: it decides the last step, which saves (Policy.step_bound).
_TOTAL_STEPS = re.compile(r"Total training steps: (\d+)")


def training_step(line: str) -> int | None:
    """The step number of a verl training-step line (one with timing_s/step or
    training/global_step); None for any other line, validation-only step lines included."""
    if "step:" not in line:
        return None
    for segment in _ANSI.sub("", line).split("\r"):
        match = _STEP_LINE.match(_REPEATED_SUFFIX.sub("", segment.rstrip("\n")))
        if match is None:
            continue
        body = match.group(2) or ""
        keys = {part.rpartition(":")[0].strip() for part in body.split(" - ") if ":" in part}
        return int(match.group(1)) if keys.intersection(_TRAINING_KEYS) else None
    return None


# --- Causes of an attempt's end.
SUCCEEDED = "succeeded"
NODE_LOST = "node_lost"
OBJECTS_LOST = "objects_lost"
ACTOR_DIED = "ray_actor_died"
RAY_FATAL = "ray_core_fatal"
NCCL_ERROR = "nccl_error"
HANG = "hang"
OUT_OF_MEMORY = "out_of_memory"
CUDA_FAULT = "cuda_fault"
PROCESS_KILLED = "process_killed"
CHECKPOINT_IO = "checkpoint_io_error"
CONFIG_ERROR = "config_error"
NO_CAPACITY = "no_capacity"
VERL_REFUSED = "verl_refused_input"
USER_STOP = "user_stop"
UNKNOWN = "unknown"
RETRIED = frozenset(
    {
        NODE_LOST, OBJECTS_LOST, ACTOR_DIED, RAY_FATAL, NCCL_ERROR, HANG,
        OUT_OF_MEMORY, CUDA_FAULT, PROCESS_KILLED, CHECKPOINT_IO,
    }
)  # fmt: skip
# Causes that may be the hardware's or the job's own: retried once per step, the second end with
# the same cause at the same step is final (a fault of the machine rarely repeats at one step; a
# fault of the model, the data or the settings does).
ONCE_PER_STEP = frozenset({OUT_OF_MEMORY, CUDA_FAULT, PROCESS_KILLED, CHECKPOINT_IO})
# A trainer killed by one of these signals (subprocess's -S) with no text that names a cause:
# the kernel's OOM killer (SIGKILL) or a crash (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE).
# SIGTERM and SIGINT are someone stopping it: not a crash.
_CRASH_SIGNALS = frozenset(
    {signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
)

# Checked in this order on the last TAIL_LINES lines; the first cause with a match wins.
# Configuration first: Hydra/OmegaConf refuse an override before any Ray actor exists. A lost node
# before everything it causes (objects lost, dead actors, failed collectives) and before any
# memory line the tail may also hold. Memory and CUDA faults before the actor texts: Ray reports a
# worker killed for them as a dead worker too.
_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # hydra/_internal/config_loader_impl.py "Could not override '<key>'." and Hydra's
    # ConfigCompositionException; omegaconf/dictconfig.py "Key '<key>' is not in struct";
    # omegaconf.errors (verl 0.6.1 and ddbcdb7 pin hydra-core 1.3, omegaconf 2.3).
    (
        CONFIG_ERROR,
        re.compile(
            r"Could not override '|ConfigCompositionException|is not in struct"
            r"|omegaconf\.errors\.\w+|MissingMandatoryValue|Error merging override"
        ),
    ),
    # Ray 2.47/2.49 gcs_server (GcsActorManager): "The actor died because its node has died.
    # Node Id: ..."; ray/exceptions.py NodeDiedError; "The task's local raylet died."
    (
        NODE_LOST,
        re.compile(r"because its node has died|NodeDiedError|local raylet died"),
    ),
    # Ray 2.47/2.49 ray/exceptions.py ObjectLostError "All copies of <id> have been lost due to
    # node failure", OwnerDiedError "The object's owner has exited", ObjectReconstructionFailed*
    # "The object cannot be reconstructed", ObjectFetchTimedOutError. Not ObjectFreedError or
    # ReferenceCountingAssertionError (the program's own misuse; "This should not happen").
    (
        OBJECTS_LOST,
        re.compile(
            r"have been lost due to node failure|The object's owner has exited"
            r"|The object cannot be reconstructed|Fetch for object \w+ timed out"
            r"|ray\.exceptions\.(?:ObjectLostError|OwnerDiedError|ObjectFetchTimedOutError"
            r"|ObjectReconstructionFailed\w*Error)"
        ),
    ),
    # PyTorch c10/cuda/CUDACachingAllocator.cpp "CUDA out of memory. Tried to allocate",
    # torch.OutOfMemoryError; the CUDA runtime's own (cudaErrorMemoryAllocation, whose
    # cudaGetErrorString is "out of memory": libcudart 12.8) as c10/cuda/CUDAException.cpp
    # prints it, "CUDA error: out of memory", and as NCCL's CUDACHECK does, "Cuda failure 'out of
    # memory'"; Ray 2.47/2.49 raylet "Task was killed due to the node running low on memory."
    # (ray.exceptions.OutOfMemoryError).
    (
        OUT_OF_MEMORY,
        re.compile(
            r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError"
            r"|CUDA error: out of memory|Cuda failure '?out of memory"
            r"|killed due to the node running low on memory|ray\.exceptions\.OutOfMemoryError"
        ),
    ),
    # The CUDA runtime's faults of the device (cudaGetErrorString, libcudart 12.8):
    # cudaErrorLaunchFailure "unspecified launch failure", cudaErrorIllegalAddress "an illegal
    # memory access was encountered", cudaErrorECCUncorrectable "uncorrectable ECC error
    # encountered", cudaErrorNvlinkUncorrectable "uncorrectable NVLink error detected during the
    # execution", cudaErrorIllegalInstruction "an illegal instruction was encountered"; the
    # NVIDIA driver's kernel log "NVRM: Xid (...)" and Xid 79 "GPU has fallen off the bus"
    # (NVIDIA's Xid catalog), where a tool prints them.
    (
        CUDA_FAULT,
        re.compile(
            r"unspecified launch failure|an illegal memory access was encountered"
            r"|uncorrectable ECC error encountered|uncorrectable NVLink error"
            r"|an illegal instruction was encountered|fallen off the bus|NVRM: Xid\b"
        ),
    ),
    # A worker killed by the kernel or crashed: Ray 2.47/2.49 raylet (node_manager) "Worker
    # unexpectedly exits with a connection error code ... There are some potential root causes.
    # (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop
    # --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other
    # unexpected errors."; the crash handler Ray installs in its processes (_raylet.so, raylet:
    # "*** SIGSEGV received at time=..."); CPython's faulthandler "Fatal Python error:
    # Segmentation fault".
    (
        PROCESS_KILLED,
        re.compile(
            r"killed by SIGKILL by OOM killer|\*\*\* SIG(?:SEGV|BUS|ILL|FPE) received at time"
            r"|Fatal Python error: (?:Segmentation fault|Bus error)"
        ),
    ),
    # PyTorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp "Watchdog caught collective
    # operation timeout", NCCLUtils "NCCL error in:", torch.distributed.DistBackendError.
    (
        NCCL_ERROR,
        re.compile(
            r"NCCL error|Watchdog caught collective operation timeout|DistBackendError"
            r"|ncclInternalError|ncclSystemError|ncclRemoteError|ncclUnhandledCudaError"
        ),
    ),
    # Ray's C++ core worker ended itself: a RAY_CHECK that failed (" Check failed: ", Ray
    # 2.47/2.49 _raylet.so and raylet; Ray 2.49 prefixes "An unexpected system state has
    # occurred. You have likely discovered a bug in Ray."), a worker used after its core worker
    # shut down ("The core worker has already been shutdown.", _raylet.so), a core worker whose
    # raylet is gone ("Failed to get the system config from raylet because it is dead. Worker
    # will terminate.", _raylet.so core_worker_process.cc; a driver that picked a lost node's
    # raylet printed it in tests/test_recovery.py), and ray.exceptions.RaySystemError ("System
    # error: ...", ray/exceptions.py).
    (
        RAY_FATAL,
        re.compile(
            r"\bCheck failed: |The core worker has already been shutdown"
            r"|from raylet because it is dead\. Worker will terminate"
            r"|ray\.exceptions\.RaySystemError|^RaySystemError: System error"
        ),
    ),
    # Ray 2.47/2.49 ray/exceptions.py ActorDiedError.BASE_ERROR_MSG "The actor died
    # unexpectedly before finishing this task."; gcs_server "The actor is dead because its
    # worker process has died." / "... its owner has died."; WorkerCrashedError "The worker died
    # unexpectedly while executing this task."; ActorUnavailableError "is unavailable".
    # Not an actor whose __init__ raised: ActorDiedError then reads "The actor died because of an
    # error raised in its creation task, ..." (ray/exceptions.py, Ray 2.47/2.49), which is how
    # verl 0.6.1's worker refuses its config (fsdp_workers.py ActorRolloutRefWorker.__init__
    # asserts on ppo_mini_batch_size): the traceback's last line names the error (below).
    (
        ACTOR_DIED,
        re.compile(
            r"The actor died unexpectedly before finishing this task"
            r"|The actor is dead because its (?:worker process|owner) has died"
            r"|The worker died unexpectedly while executing this task"
            r"|ray\.exceptions\.(?:ActorDiedError|RayActorError|ActorUnavailableError)"
            r"(?!: The actor died because of an error raised in its creation task)"
        ),
    ),
)

# An errno of the file system, as Python prints an OSError: "[Errno 5] Input/output error"
# (EIO: what a FUSE file system answers for a failed call; gcsfuse serves FUSE through
# jacobsa/fuse, which answers any error that is not an errno with EIO), "[Errno 107] Transport
# endpoint is not connected" (ENOTCONN: the kernel's answer once the FUSE daemon is gone),
# "[Errno 116] Stale file handle" (ESTALE). The texts are glibc's strerror. The path, when the
# line names one, must be on the checkpoint folder's mount.
_FS_ERROR = re.compile(
    r"\[Errno (?:5|107|116)\] (?:Input/output error|Transport endpoint is not connected"
    r"|Stale file handle)(?:: '([^']*)')?"
)
# The last line of a Python traceback: "[module.]Name: message" or "[module.]Name".
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception))(?::\s|$)")
_FRAME_LINE = re.compile(r'^File "([^"]+)", line \d+')
# verl checks its input in Python and raises (verl 0.6.1 verl/workers/config/actor.py,
# verl/utils/config.py, trainer/ppo/ray_trainer.py: ValueError; many asserts): the traceback's
# last exception is one of these.
_VERL_CHECKS = frozenset({"ValueError", "AssertionError", "NotImplementedError"})
# Errors that a missing key, file or wrong type of the input raises, and the environment too
# (a checkpoint mount that lost a file, a Ray object of the wrong kind): verl refused its input
# only when verl's own code raised it (the traceback's last frame is under a verl/ folder).
_INPUT_OR_ENVIRONMENT = frozenset({"KeyError", "TypeError", "FileNotFoundError"})


def mount_point(path: Path) -> Path:
    """The mount the folder lives on (the checkpoint bucket's GCS FUSE mount in a pod)."""
    current = path.resolve()
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def _checkpoint_io(lines: list[str], checkpoint_mount: Path | None) -> bool:
    for line in lines:
        found = _FS_ERROR.search(line)
        if found is None:
            continue
        named = found.group(1)
        if named is None or checkpoint_mount is None:
            return True
        if Path(named) == checkpoint_mount or checkpoint_mount in Path(named).parents:
            return True
    return False


def _verl_refused(lines: list[str]) -> bool:
    """Whether the tail's last Python exception is verl refusing its input."""
    for index in range(len(lines) - 1, -1, -1):
        found = _EXCEPTION_LINE.match(lines[index])
        if found is None:
            continue
        name = found.group(1)
        if name in _VERL_CHECKS:
            return True
        if name not in _INPUT_OR_ENVIRONMENT:
            return False
        frames = (_FRAME_LINE.match(line) for line in reversed(lines[:index]))
        raised_in = next((frame.group(1) for frame in frames if frame is not None), "")
        return "/verl/" in raised_in
    return False


def classify(
    tail: Iterable[str], exit_code: int | None = None, checkpoint_mount: Path | None = None
) -> str:
    """The cause named by a failed attempt's last lines of output and its exit status (-S:
    killed by signal S); UNKNOWN when none is. `checkpoint_mount`: the mount of the run folder,
    where a file-system error counts as the checkpoint storage's."""
    lines = [_ANSI.sub("", line).strip() for line in tail]
    for cause, pattern in _MARKERS:
        if any(pattern.search(line) for line in lines):
            return cause
    if _checkpoint_io(lines, checkpoint_mount):
        return CHECKPOINT_IO
    if exit_code is not None and exit_code < 0:
        # Killed by a signal: no Python exception ended it, whatever the tail holds.
        return PROCESS_KILLED if -exit_code in _CRASH_SIGNALS else UNKNOWN
    if _verl_refused(lines):
        return VERL_REFUSED
    return UNKNOWN


def hang_bound(step_seconds: Iterable[float], floor_s: float, factor: float) -> float:
    """How long without a new training step is a hang once steps have been seen:
    factor x the slowest step of this attempt (checkpoint and validation steps included), at
    least floor_s."""
    slowest = max(step_seconds, default=0.0)
    return max(floor_s, factor * slowest)


@dataclass(frozen=True)
class Policy:
    max_restarts: int
    first_step_bound_s: float  # no training step this long after the start: a hang
    hang_floor_s: float  # the least hang bound once steps have been seen
    hang_factor: float = 3.0
    gpus_needed: float = 0.0  # GPUs the worker group holds (world size)
    capacity_wait_s: float = 3600.0  # at most this long for them (before a restart or a step)
    gpu_poll_s: float = 30.0  # before the first step: how often the GPUs are counted
    stop_grace_s: float = 30.0  # SIGTERM, then SIGKILL after this long
    poll_s: float = 1.0
    # verl v0.6.1 fit() saves a checkpoint (and validates) before it prints the step's line
    # (verl/trainer/ppo/ray_trainer.py): a step that saves gets save_allowance_s more. It saves at
    # every save_freq-th step and at the last (total_steps; 0 = not known: every step).
    save_freq: int = 0
    save_allowance_s: float = 0.0
    total_steps: int = 0

    def step_bound(self, step: int, ordinary_bound_s: float, printed_total: int = 0) -> float:
        """The hang bound for the wait until training step `step`'s line; `printed_total`, the
        step count verl printed (0: not seen), outranks the planned total_steps."""
        total = printed_total or self.total_steps
        saves = self.save_freq > 0 and (step % self.save_freq == 0 or total in (0, step))
        return ordinary_bound_s + (self.save_allowance_s if saves else 0.0)


@dataclass
class Attempt:
    number: int
    started_at: str
    resumed_from_step: int | None
    ended_at: str | None = None
    cause: str | None = None
    exit_code: int | None = None
    last_step: int | None = None
    steps_lost: int = 0
    detected_s: float | None = None  # from the last step (or start) to the decision
    stacks: str | None = None
    # Seconds waited, by cause: "node_death_bound" (Ray's health-check bound before the GPUs are
    # counted), "capacity" (GPUs missing after it, before this attempt's restart),
    # "capacity_before_first_step" (GPUs missing while the attempt waited for its first step;
    # not counted against the first-step bound).
    waits: dict[str, float] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list, repr=False)


_SUMMARY_KEYS = (
    "number", "started_at", "ended_at", "cause", "resumed_from_step", "steps_lost", "waits",
)  # fmt: skip


class Cluster:
    """What the supervisor asks of Ray. This one reads Ray's state through the head's dashboard
    (ray.util.state, imported lazily) and dumps stacks through it."""

    def __init__(self, dashboard_url: str) -> None:
        self.dashboard_url = dashboard_url.rstrip("/")

    def death_grace_s(self) -> float:
        """How long Ray's GCS may still call a lost node ALIVE: it is declared dead after
        health_check_failure_threshold failed checks, one every health_check_period_ms, each
        failing at the latest after health_check_timeout_ms (Ray 2.47/2.49 ray_config_def.h:
        5, 3000 ms, 10000 ms: 65 s). Ray's state API has no heartbeat to check instead
        (ray.util.state NodeState: state, start/end time only). This process reads the same
        RAY_ settings as the head's GCS (it runs in the head pod)."""
        try:
            from ray._raylet import Config

            period = Config.health_check_period_ms() + Config.health_check_timeout_ms()
            return Config.health_check_failure_threshold() * period / 1000.0
        except Exception:  # Ray's private config moved: its defaults
            return 65.0

    def alive_gpus(self) -> float:
        """GPUs of the ALIVE nodes. Every node is listed and the dead ones dropped here: with a
        state filter, Ray 2.60's dashboard counts the nodes its GCS filtered out as truncated
        (dashboard/state_aggregator.py list_nodes: total = returned + GCS num_filtered), and the
        client refuses the answer ("Failed to retrieve all N nodes ... data truncation") as soon
        as one node has died, which is when this is asked. Ray 2.47/2.49 count them right.
        Dead nodes stay listed: hence the largest limit."""
        from ray.util.state import list_nodes

        nodes = list_nodes(address=self.dashboard_url, limit=STATE_LIST_LIMIT)
        return sum(
            float(node.resources_total.get("GPU", 0)) for node in nodes if node.state == "ALIVE"
        )

    def dump_stacks(self, folder: Path, driver_pid: int) -> list[Path]:
        """Stacks of every alive actor (dashboard /worker/traceback: py-spy on its node) and of
        the trainer's driver (py-spy here). A dump that fails writes its error instead."""
        folder.mkdir(parents=True, exist_ok=True)
        written = [_py_spy(driver_pid, folder / f"driver-{driver_pid}.txt")]
        try:
            targets = self._actor_targets()
        except Exception as exc:  # a stack dump never blocks the restart
            note = folder / "actors-unlisted.txt"
            note.write_text(f"could not list Ray's actors: {exc}\n")
            return [*written, note]
        for name, ip, pid in targets:
            query = urllib.parse.urlencode({"ip": ip, "pid": pid, "native": "0"})
            path = folder / f"{name}-{ip}-{pid}.txt"
            try:
                url = f"{self.dashboard_url}/worker/traceback?{query}"
                with urllib.request.urlopen(url, timeout=60) as response:
                    path.write_bytes(response.read())
            except urllib.error.HTTPError as exc:  # the dashboard's own words (py-spy's error)
                body = exc.read().decode(errors="replace")
                path.write_text(f"no stack from {url}: {exc}\n{body}\n")
            except Exception as exc:
                path.write_text(f"no stack from {url}: {exc}\n")
            written.append(path)
        return written

    def _actor_targets(self) -> list[tuple[str, str, int]]:
        from ray.util.state import list_actors, list_nodes

        nodes = list_nodes(address=self.dashboard_url, limit=STATE_LIST_LIMIT)
        ips = {node.node_id: node.node_ip for node in nodes}
        actors = list_actors(
            address=self.dashboard_url, filters=[("state", "=", "ALIVE")], limit=STATE_LIST_LIMIT
        )
        return [
            (re.sub(r"[^\w.-]", "_", actor.class_name or "actor"), ips[actor.node_id], actor.pid)
            for actor in actors
            if actor.pid and actor.node_id in ips
        ]


def _py_spy(pid: int, path: Path) -> Path:
    binary = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        done = subprocess.run(
            [binary, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=120
        )
        path.write_text(done.stdout + done.stderr)
    except (OSError, subprocess.TimeoutExpired) as exc:
        path.write_text(f"py-spy dump --pid {pid} failed: {exc}\n")
    return path


def _intervals(steps: list[tuple[int, float]]) -> list[float]:
    return [later[1] - earlier[1] for earlier, later in pairwise(steps)]


def _finite(value: float) -> float | None:
    return value if value != float("inf") else None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def latest_checkpoint(run_dir: Path) -> int | None:
    try:
        text = (run_dir / LATEST_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


class _Trainer:
    """One attempt: verl's trainer in its own process group, its output passed through to ours
    and read for step lines and the failure's last lines. It dies with this process
    (trainer_lease.die_with_parent: the kernel SIGKILLs it when the runner dies)."""

    def __init__(self, command: list[str]) -> None:
        self.started = time.monotonic()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.steps: list[tuple[int, float]] = []  # (step, time.monotonic() it was printed)
        self.total_steps = 0  # verl's printed step count (0: not seen yet)
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=trainer_lease.die_with_parent(),  # one prctl call, libc loaded before
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            step = training_step(line)
            total = _TOTAL_STEPS.search(line) if step is None else None
            with self._lock:
                self.tail.append(line.rstrip("\n"))
                if step is not None:
                    self.steps.append((step, time.monotonic()))
                if total is not None:
                    self.total_steps = int(total.group(1))

    def progress(self) -> tuple[list[tuple[int, float]], list[str]]:
        with self._lock:
            return list(self.steps), list(self.tail)

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the trainer's process group, SIGKILL after grace_s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue

    def finish(self) -> int:
        code = self.process.wait()
        self._reader.join(timeout=30)
        return code


class Supervisor:
    """Runs the attempts of one training command; see the module's docstring."""

    def __init__(
        self,
        command: list[str],
        run_dir: Path,
        policy: Policy,
        cluster: Cluster,
        say: Callable[[str], None],
        before_attempt: Callable[[], None] = lambda: None,
        *,
        capacity: provreq.CapacityRenewer | None = None,
        on_trainer: Callable[[int], None] = lambda pid: None,
    ) -> None:
        self.command = command
        self.on_trainer = on_trainer
        self.before_attempt = before_attempt
        self.run_dir = run_dir
        self.policy = policy
        self.cluster = cluster
        self.say = say
        self.capacity = capacity
        self.attempts: list[Attempt] = []
        self.stopping = threading.Event()
        self._current: _Trainer | None = None
        self.checkpoint_mount = mount_point(run_dir)
        # Why the run ended without a further attempt when that is not the last attempt's cause
        # (the GPUs never came back): {"cause": NO_CAPACITY, "detail": ...}.
        self.ended: dict[str, Any] | None = None
        self._ask_again_at = 0.0  # Standard flex-start: when to ask for missing nodes again

    def request_stop(self) -> None:
        """The job is being stopped (Ray sends the entrypoint SIGTERM: ray job stop,
        python -m tools.run stop): stop the trainer and start no other attempt."""
        self.stopping.set()
        if self._current is not None:
            self._current.stop(self.policy.stop_grace_s)

    def run(self) -> int:
        """0 when training finished; otherwise the last attempt's exit status (1 if none), -S for
        a trainer killed by signal S."""
        if self.capacity is not None and self.policy.gpus_needed > 0:
            # A later run after scale-to-zero: its pods would consume a spent request.
            try:
                self._ask_for_nodes(self.policy.gpus_needed, self.cluster.alive_gpus(), "a001")
            except Exception as exc:  # the dashboard not answering: the restarts ask again
                self.say(f"could not count the cluster's GPUs before the start ({exc})")
        while True:
            self.before_attempt()
            attempt = Attempt(
                number=len(self.attempts) + 1,
                started_at=_now(),
                resumed_from_step=latest_checkpoint(self.run_dir),
            )
            self.attempts.append(attempt)
            self._save()
            self.say(self._start_line(attempt))
            # As subprocess reports it (-S: killed by signal S); run_grpo.signal_exit names it.
            code = self._attempt(attempt)
            self._save()
            if attempt.cause == SUCCEEDED:
                return 0
            refusal = self._refusal(attempt)
            if refusal is not None:
                self.say(f"attempt {attempt.number} ended ({attempt.cause}): {refusal}")
                return code if code != 0 else 1
            self.say(f"attempt {attempt.number} ended ({attempt.cause}): restarting")
            if not self._wait_for_gpus(attempt):
                return code if code != 0 else 1

    def _start_line(self, attempt: Attempt) -> str:
        resumed = attempt.resumed_from_step
        where = f"resuming from step {resumed}" if resumed is not None else "from the start"
        return (
            f"attempt {attempt.number} ({self.restarts_used()} of "
            f"{self.policy.max_restarts} restarts used), {where}"
        )

    def restarts_used(self) -> int:
        return max(0, len(self.attempts) - 1)

    def _attempt(self, attempt: Attempt) -> int:
        trainer = _Trainer(self.command)
        self._current = trainer
        self.on_trainer(trainer.process.pid)
        if self.stopping.is_set():
            trainer.stop(self.policy.stop_grace_s)
        hang_after = self._watch(trainer, attempt)
        if attempt.cause == NO_CAPACITY:
            trainer.stop(self.policy.stop_grace_s)
        elif hang_after is not None:
            folder = self.run_dir / STACKS_DIR / f"attempt-{attempt.number:03d}"
            self.say(f"no training step for {hang_after:.0f} s: hung; stacks -> {folder}")
            self.cluster.dump_stacks(folder, trainer.process.pid)
            attempt.stacks = str(folder)
            trainer.stop(self.policy.stop_grace_s)
        code = trainer.finish()
        self._current = None
        steps, tail = trainer.progress()
        attempt.exit_code = code
        attempt.ended_at = _now()
        attempt.step_seconds = [round(s, 1) for s in _intervals(steps)]
        attempt.last_step = steps[-1][0] if steps else attempt.resumed_from_step
        checkpoint = latest_checkpoint(self.run_dir)
        attempt.steps_lost = max(0, (attempt.last_step or 0) - (checkpoint or 0))
        since = steps[-1][1] if steps else trainer.started
        attempt.detected_s = round(hang_after or (time.monotonic() - since), 1)
        if self.stopping.is_set():
            attempt.cause = USER_STOP
        elif attempt.cause == NO_CAPACITY:
            pass
        elif hang_after is not None:
            attempt.cause = HANG
        elif code == 0:
            attempt.cause = SUCCEEDED
        else:
            attempt.cause = classify(tail, code, self.checkpoint_mount)
        return code

    def _watch(self, trainer: _Trainer, attempt: Attempt) -> float | None:
        """Until the trainer exits (None) or hangs (seconds since its last step). Before the
        first step, time while the cluster lacks the worker group's GPUs is capacity queueing
        (verl's placement groups wait for them without bound), not start-up: it is left out of
        the first-step bound and recorded; longer than capacity_wait_s ends the attempt as
        NO_CAPACITY."""
        queued = 0.0
        missing_since: float | None = None
        next_count = saved = trainer.started
        # The record shows a queueing wait while it lasts (one summary line a minute at most).
        save_every_s = min(60.0, 5 * self.policy.gpu_poll_s)
        while True:
            try:
                trainer.process.wait(timeout=self.policy.poll_s)
                return None
            except subprocess.TimeoutExpired:
                pass
            if self.stopping.is_set():
                return None
            steps, _ = trainer.progress()
            now = time.monotonic()
            if steps:
                bound = self.policy.step_bound(
                    steps[-1][0] + 1,
                    hang_bound(
                        _intervals(steps), self.policy.hang_floor_s, self.policy.hang_factor
                    ),
                    trainer.total_steps,
                )
                since = steps[-1][1]
            else:
                if self.policy.gpus_needed > 0 and now >= next_count:
                    next_count = now + self.policy.gpu_poll_s
                    missing_since, queued = self._count_queueing(missing_since, queued, now)
                    waited = queued + (now - missing_since if missing_since is not None else 0.0)
                    if waited > 0:
                        attempt.waits["capacity_before_first_step"] = round(waited, 1)
                    if missing_since is not None and now - missing_since > (
                        self.policy.capacity_wait_s
                    ):
                        self._give_up(attempt, now - missing_since)
                        return None
                    if missing_since is not None and now - saved >= save_every_s:
                        saved = now
                        self._save()
                waiting = queued + (now - missing_since if missing_since is not None else 0.0)
                bound, since = self.policy.first_step_bound_s, trainer.started + waiting
            silent = now - since
            if silent > bound:
                return silent

    def _count_queueing(
        self, missing_since: float | None, queued: float, now: float
    ) -> tuple[float | None, float]:
        """(since when GPUs have been missing, or None; seconds queued before that)."""
        try:
            have = self.cluster.alive_gpus()
        except Exception:  # the dashboard not answering: the time counts as start-up
            return missing_since, queued
        if have >= self.policy.gpus_needed:
            if missing_since is not None:
                queued += now - missing_since
            return None, queued
        return (now if missing_since is None else missing_since), queued

    def _give_up(self, attempt: Attempt, waited_s: float, have: float | None = None) -> None:
        """The run ends: the GPUs did not come within the capacity wait (before a restart, the
        ended attempt keeps its own cause; before a first step, the attempt ends NO_CAPACITY)."""
        if attempt.cause is None:
            attempt.cause = NO_CAPACITY
        need = f"the {self.policy.gpus_needed:g} GPUs the worker group needs"
        held = f"held {have:g} of {need}" if have is not None else f"did not hold {need}"
        detail = (
            f"the cluster's alive nodes {held} for {waited_s:.0f} s (capacity wait "
            f"{self.policy.capacity_wait_s:.0f} s): giving up; check the GPU node pool (kubectl "
            "get nodes, the RayCluster's worker pods)"
        )
        self.ended = {"cause": NO_CAPACITY, "after_attempt": attempt.number, "detail": detail}
        self.say(detail)
        self._save()

    def _refusal(self, attempt: Attempt) -> str | None:
        """Why this end is not retried; None when a restart follows."""
        if attempt.cause == NO_CAPACITY:
            return "not retried: no GPUs for the worker group (above)"
        if attempt.cause not in RETRIED:
            return "not retried: a restart cannot fix it"
        if attempt.cause in ONCE_PER_STEP:
            failed_at = (attempt.last_step or 0) + 1
            earlier = [
                (a.last_step or 0) + 1 for a in self.attempts[:-1] if a.cause == attempt.cause
            ]
            if failed_at in earlier:
                return f"not retried: {attempt.cause} at step {failed_at} twice"
        if self.restarts_used() >= self.policy.max_restarts:
            return f"not retried: all {self.policy.max_restarts} restarts used"
        return None

    def _wait_for_gpus(self, attempt: Attempt) -> bool:
        """Until the cluster's alive nodes hold the worker group's GPUs again; each wait is
        recorded under its cause (Attempt.waits)."""
        need = self.policy.gpus_needed
        asked = self.capacity is None
        # A node lost before the attempt ended is counted as ALIVE until the GCS declares it
        # dead: count only after that.
        grace = self.cluster.death_grace_s() if need > 0 else 0.0
        if grace > 0:
            self.say(f"counting the GPUs in {grace:.0f} s (Ray's node health checks)")
            attempt.waits["node_death_bound"] = round(grace, 1)
            self._save()
        self.stopping.wait(grace)
        started = saved = time.monotonic()
        while not self.stopping.is_set():
            try:
                have = self.cluster.alive_gpus() if need > 0 else need
            except Exception as exc:  # the head's dashboard restarting: ask again
                self.say(f"could not read the cluster's GPUs ({exc}); asking again")
                have = -1.0
            if not asked and have >= 0:
                asked = self._ask_for_nodes(need, have, f"a{attempt.number + 1:03d}")
            elif self.capacity is not None:
                self._settle()
            waited = time.monotonic() - started
            if have >= need:
                attempt.waits["capacity"] = round(waited, 1)
                self._save()
                return True
            if waited > self.policy.capacity_wait_s:
                attempt.waits["capacity"] = round(waited, 1)
                self._give_up(attempt, waited, max(have, 0.0))
                return False
            if time.monotonic() - saved >= 60:  # the record shows the wait while it lasts
                saved = time.monotonic()
                attempt.waits["capacity"] = round(waited, 1)
                self._save()
            time.sleep(max(self.policy.poll_s, 2.0))
        return False

    def _ask_for_nodes(self, need: float, have: float, suffix: str) -> bool:
        """Standard flex-start: a new ProvisioningRequest for the nodes missing, unless the one
        the workers consume still books capacity; True once a request was made (or nothing was
        missing). While the consumed one books capacity (its nodes may still come, for at most
        provreq.BOOKING_WINDOW_S after it was Provisioned) the question is asked again every
        ASK_AGAIN_S, so a node lost within that window still gets a request once it has passed.
        A failed call is said and tried again at the next poll."""
        assert self.capacity is not None
        if time.monotonic() < self._ask_again_at:
            return False
        try:
            missing = provreq.nodes_missing(self.capacity.spec, need, have)
            if missing and self.capacity.renew(missing, f"{int(time.time())}-{suffix}") is None:
                self._ask_again_at = time.monotonic() + ASK_AGAIN_S
                return False
            return True
        except provreq.KubeError as exc:
            self.say(
                f"could not ask for GPU nodes again ({exc}); asking again. Check the Role "
                f"{self.capacity.spec.ray_cluster}-capacity-runner and the RayCluster"
            )
            return False

    def _settle(self) -> None:
        assert self.capacity is not None
        try:
            self.capacity.settle()
        except provreq.KubeError as exc:
            self.say(f"could not check the ProvisioningRequests ({exc}); checking again")

    def _save(self) -> None:
        record = {
            "max_restarts": self.policy.max_restarts,
            "restarts_used": self.restarts_used(),
            # None: no watchdog (JSON has no Infinity)
            "first_step_bound_s": _finite(self.policy.first_step_bound_s),
            "hang_floor_s": _finite(self.policy.hang_floor_s),
            "hang_factor": self.policy.hang_factor,
            "stacks_dir": str(self.run_dir / STACKS_DIR),
            "capacity_wait_s": self.policy.capacity_wait_s,
            "ended": self.ended,
            "attempts": [asdict(attempt) for attempt in self.attempts],
        }
        summary = {key: value for key, value in record.items() if key != "attempts"}
        summary["attempts"] = [
            {key: getattr(attempt, key) for key in _SUMMARY_KEYS} for attempt in self.attempts
        ]
        print(LOG_PREFIX + json.dumps(summary, separators=(",", ":")), flush=True)
        path = self.run_dir / RECOVERY_FILE
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(partial, path)


def read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((run_dir / RECOVERY_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def add_arguments(parser: Any) -> None:
    """The runner's recovery options (training/ renders them from config/settings.py)."""
    group = parser.add_argument_group("recovery (payloads/export/supervise.py)")
    group.add_argument("--max-restarts", type=int, default=0)
    # 0: no hang watchdog.
    group.add_argument("--first-step-bound-s", type=float, default=0.0)
    group.add_argument("--hang-floor-s", type=float, default=0.0)
    group.add_argument("--hang-factor", type=float, default=3.0)
    group.add_argument("--gpus-needed", type=float, default=0.0)
    group.add_argument("--capacity-wait-s", type=float, default=3600.0)
    group.add_argument("--gpu-poll-s", type=float, default=30.0)
    group.add_argument("--save-freq", type=int, default=0)
    group.add_argument("--save-allowance-s", type=float, default=0.0)
    group.add_argument("--total-steps", type=int, default=0)
    # The head's own dashboard: the head pod serves it on 0.0.0.0:8265 (manifests/ray_cluster.py
    # DASHBOARD_PORT, rayStartParams dashboard-host), and the runner runs in that pod.
    group.add_argument("--dashboard-url", default="http://127.0.0.1:8265")
    # Standard flex-start: manifests/capacity.runner_capacity as JSON (provreq.py).
    group.add_argument("--capacity-request", type=provreq.CapacitySpec.from_json)
    # Tests only: a stand-in API server and token file instead of the pod's service account.
    group.add_argument("--kube-api-server")
    group.add_argument("--kube-token-file", type=Path)


def capacity_from(args: Any, say: Callable[[str], None]) -> provreq.CapacityRenewer | None:
    spec = args.capacity_request
    if spec is None:
        return None
    if args.kube_api_server:
        client = provreq.KubeClient(args.kube_api_server, args.kube_token_file, None)
    else:
        try:
            client = provreq.KubeClient.in_cluster()
        except (KeyError, OSError) as exc:  # not in a pod, or no service account token
            say(f"no Kubernetes API here ({exc!r}): GPU nodes will not be asked for again")
            return None
    return provreq.CapacityRenewer(spec, client, say)


def ask_for_export_node(
    capacity: provreq.CapacityRenewer | None, dashboard_url: str, say: Callable[[str], None]
) -> None:
    """The export's merge runs on a GPU worker node (export_model.py): after scale-to-zero on
    Standard flex-start, one node is asked for again first. A failure is said, not fatal: the
    export then reports the node it did not get."""
    if capacity is None:
        return
    try:
        have = Cluster(dashboard_url).alive_gpus()
        if have < capacity.spec.gpus_per_node:
            capacity.renew(1, f"{int(time.time())}-export")
    except Exception as exc:
        say(f"could not ask for a GPU node for the export ({exc})")


def policy_from(args: Any) -> Policy:
    never = float("inf")
    return Policy(
        max_restarts=args.max_restarts,
        first_step_bound_s=args.first_step_bound_s or never,
        hang_floor_s=args.hang_floor_s or never,
        hang_factor=args.hang_factor,
        gpus_needed=args.gpus_needed,
        capacity_wait_s=args.capacity_wait_s,
        gpu_poll_s=args.gpu_poll_s,
        save_freq=args.save_freq,
        save_allowance_s=args.save_allowance_s,
        total_steps=args.total_steps,
    )


def supervise(
    command: list[str],
    run_dir: Path,
    policy: Policy,
    dashboard_url: str,
    say: Callable[[str], None],
    before_attempt: Callable[[], None] = lambda: None,
    *,
    capacity: provreq.CapacityRenewer | None = None,
    on_trainer: Callable[[int], None] = lambda pid: None,
) -> int:
    """Run the attempts, calling before_attempt() before each and on_trainer(pid) once each
    trainer started; SIGTERM (how Ray stops a job's entrypoint and its children,
    dashboard/modules/job/job_supervisor.py at Ray 2.47/2.49) ends them without a restart."""
    supervisor = Supervisor(
        command, run_dir, policy, Cluster(dashboard_url), say, before_attempt,
        capacity=capacity, on_trainer=on_trainer,
    )  # fmt: skip
    if threading.current_thread() is not threading.main_thread():
        return supervisor.run()  # only the main thread may set a signal handler
    previous = signal.signal(signal.SIGTERM, lambda *_: supervisor.request_stop())
    try:
        return supervisor.run()
    finally:
        signal.signal(signal.SIGTERM, previous)

"""One trainer per run folder, whatever happens to the runner.

* The trainer dies with its runner: supervise.py starts it with PR_SET_PDEATHSIG = SIGKILL
  (prctl(2), Linux), so the kernel kills it when the runner's thread that started it ends. The
  runner dies that way when Ray's JobSupervisor actor dies (Ray 2.47/2.49
  dashboard/modules/job/job_supervisor.py `_exec_entrypoint`: a shell loop `kill -9 -<pgid>`s the
  entrypoint's process group once the actor's pid is gone), or when someone kills it. The
  trainer's Ray actors go with it: verl's TaskRunner and worker groups are not detached (verl
  0.6.1 and 0.9.0 single_controller/ray/base.py, `detached=False`), and Ray ends the actors a
  driver owns when the driver exits.
* A lease in the run folder (`trainer.lease`, JSON) names the runner and its trainer: host, pid
  and each process's start time (/proc/<pid>/stat field 22, so a reused pid is not taken for
  it), renewed every RENEW_S. A runner that starts on a folder whose lease names a runner or
  trainer still alive on this host stops them first (SIGTERM to the runner, which stops its
  trainer and records a user stop; then SIGTERM and SIGKILL to the trainer's process group). A
  lease renewed on another host within STALE_S is waited for until it is stale; one still renewed
  after twice that refuses the start (LeaseHeldError). Not guarded: two runners that start within
  the same instant on an empty folder.

Stdlib only (the Ray job's working_dir).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LEASE_FILE = "trainer.lease"
RENEW_S = float(os.environ.get("VERL_GKE_LEASE_RENEW_S", "30"))
# A lease not renewed for this long belongs to a runner that is gone (3 missed renewals).
STALE_S = float(os.environ.get("VERL_GKE_LEASE_STALE_S", "90"))
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class LeaseHeldError(Exception):
    """Another host's runner renews the folder's lease: a second trainer must not start."""


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None when
    no such process (or a zombie) exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def _alive(pid: object, start: object) -> bool:
    return isinstance(pid, int) and pid > 0 and start is not None and process_start(pid) == start


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this process's starting thread ends;
    None where prctl is not available. libc is loaded here, in the parent, so the child only
    makes the call."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the runner died before the call: go with it
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


def read(run_dir: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((run_dir / LEASE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


class Lease:
    """This runner's lease on a run folder; see the module's docstring."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.host = socket.gethostname()
        self.runner_pid = os.getpid()
        self.runner_start = process_start(self.runner_pid)
        self.trainer_pid: int | None = None
        self.trainer_start: str | None = None
        self._lock = threading.Lock()

    def body(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "runner_pid": self.runner_pid,
            "runner_start": self.runner_start,
            "trainer_pid": self.trainer_pid,
            "trainer_start": self.trainer_start,
            "renewed_at": time.time(),
        }

    def write(self) -> None:
        with self._lock:
            path = self.run_dir / LEASE_FILE
            partial = path.with_suffix(".lease.partial")
            partial.write_text(json.dumps(self.body(), indent=1) + "\n")
            os.replace(partial, path)

    def set_trainer(self, pid: int) -> None:
        """Called when an attempt's trainer has started."""
        self.trainer_pid, self.trainer_start = pid, process_start(pid)
        self.write()

    def ours(self, lease: dict[str, Any] | None) -> bool:
        return lease is not None and (lease.get("host"), lease.get("runner_pid")) == (
            self.host,
            self.runner_pid,
        )

    def release(self) -> None:
        if self.ours(read(self.run_dir)):
            with contextlib.suppress(FileNotFoundError):
                (self.run_dir / LEASE_FILE).unlink()


def take_over(
    old: dict[str, Any],
    run_dir: Path,
    host: str,
    say: Callable[[str], None],
    grace_s: float,
    stale_s: float,
) -> None:
    """Make sure the runner and trainer the old lease names are gone before a new trainer starts."""
    if old.get("host") == host:
        runner = (old.get("runner_pid"), old.get("runner_start"))
        trainer = (old.get("trainer_pid"), old.get("trainer_start"))
        if _alive(*runner):
            say(
                f"the run folder's lease names runner pid {runner[0]}, still running here: "
                "stopping it (SIGTERM) before this attempt trains"
            )
            _stop(runner[0], grace_s + 15.0, group=False)
        if _alive(*trainer):
            say(f"stopping the earlier trainer (pid {trainer[0]}) still training in this folder")
            _stop(trainer[0], grace_s, group=True)
        return
    deadline = time.monotonic() + 2 * stale_s
    while time.time() - float(old.get("renewed_at") or 0) < stale_s:
        if time.monotonic() > deadline:
            raise LeaseHeldError(
                f"the run folder's lease ({LEASE_FILE}) is renewed by the runner pid "
                f"{old.get('runner_pid')} on host {old.get('host')}, which trains in it: a "
                "second trainer would write the same checkpoints. Stop that job first (python -m "
                "tools.run stop, or ray job stop), or give this run another folder"
            )
        say(
            f"the run folder's lease was renewed by host {old.get('host')} "
            f"{time.time() - float(old.get('renewed_at') or 0):.0f} s ago; waiting until it is "
            f"stale ({stale_s:.0f} s)"
        )
        time.sleep(min(10.0, stale_s / 4))
        # Unreadable or removed: the lease read last goes stale by itself, never sooner.
        old = read(run_dir) or old


def _stop(pid: int, grace_s: float, *, group: bool) -> None:
    start = process_start(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig) if group else os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if process_start(pid) != start:
                return
            time.sleep(0.2)


@contextlib.contextmanager
def held(
    run_dir: Path, say: Callable[[str], None], grace_s: float = 30.0, stale_s: float = STALE_S
) -> Iterator[Lease]:
    """The folder's lease for the block: earlier holders stopped (or waited out), renewed every
    RENEW_S, removed at the end. Raises LeaseHeldError when another host keeps renewing it."""
    lease = Lease(run_dir)
    old = read(run_dir)
    if old is not None and not lease.ours(old):
        take_over(old, run_dir, lease.host, say, grace_s, stale_s)
    lease.write()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(RENEW_S):
            with contextlib.suppress(OSError):  # the mount answers again at the next renewal
                lease.write()

    renewer = threading.Thread(target=renew, name="lease-renewer", daemon=True)
    renewer.start()
    try:
        yield lease
    finally:
        stop.set()
        renewer.join()
        lease.release()

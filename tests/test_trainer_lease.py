"""One trainer per run folder (payloads/export/trainer_lease.py), the parts no Ray head is needed
for: a lease that another host keeps renewing refuses the runner (exit LEASE_HELD, before any
trainer starts); one that went stale is taken over; a trainer dies with the process that started
it (PR_SET_PDEATHSIG). The runner's death against a real Ray head: tests/test_recovery.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from config import bucket_layout
from payloads.export import run_grpo, trainer_lease

RUNNER = Path(run_grpo.__file__)


def _other_hosts_lease(run_dir: Path, renewed_at: float) -> None:
    body = {"host": "another-head-pod", "runner_pid": 7, "runner_start": "1", "trainer_pid": 8,
            "trainer_start": "2", "renewed_at": renewed_at}  # fmt: skip
    # Replaced whole, as Lease.write does: a reader never sees half a lease.
    partial = run_dir / "lease.partial"
    partial.write_text(json.dumps(body))
    os.replace(partial, run_dir / trainer_lease.LEASE_FILE)


def test_a_lease_another_host_keeps_renewing_refuses_the_runner(tmp_path: Path) -> None:
    stop = threading.Event()

    def renew() -> None:
        while not stop.is_set():
            _other_hosts_lease(tmp_path, time.time())
            stop.wait(0.3)

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    marker = tmp_path / "trainer-started"
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(tmp_path),
        "--identity", json.dumps({"world_size": 2}), "--length", json.dumps({"total_epochs": 1}),
        "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
    ]  # fmt: skip
    env = {**os.environ, "VERL_GKE_LEASE_STALE_S": "4", "VERL_GKE_LEASE_RENEW_S": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    finally:
        stop.set()
        renewer.join()
    assert done.returncode == run_grpo.LEASE_HELD, done.stdout + done.stderr
    assert "renewed by the runner pid 7 on host another-head-pod" in done.stdout
    assert "Stop that job first" in done.stdout
    assert not marker.exists()  # no trainer started


def test_a_stale_lease_of_another_host_is_taken_over(tmp_path: Path) -> None:
    _other_hosts_lease(tmp_path, time.time())  # renewed now, never again
    said: list[str] = []
    started = time.monotonic()
    with trainer_lease.held(tmp_path, said.append, stale_s=3.0) as lease:
        assert lease.ours(trainer_lease.read(tmp_path))
        lease.set_trainer(os.getpid())
        held = trainer_lease.read(tmp_path)
    assert 1.0 <= time.monotonic() - started < 30, said
    assert any("waiting until it is stale" in line for line in said), said
    assert held is not None and held["trainer_pid"] == os.getpid()
    assert held["trainer_start"] == trainer_lease.process_start(os.getpid())
    assert trainer_lease.read(tmp_path) is None  # released


# A parent that starts a sleeping child with the runner's preexec_fn, prints its pid and is then
# SIGKILLed (as Ray's watcher kills the entrypoint's group).
PARENT = """
import subprocess, sys
from payloads.export import trainer_lease
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True, preexec_fn=trainer_lease.die_with_parent())
print(child.pid, flush=True)
import os, signal; os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_trainer_dies_with_the_process_that_started_it() -> None:
    repo = RUNNER.parents[2]
    done = subprocess.run(
        [sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 30
    while trainer_lease.process_start(child) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = trainer_lease.process_start(child) is not None
    if alive:  # never leave it behind
        os.kill(child, 9)
    assert not alive


def test_the_lease_file_name_agrees_with_the_bucket_layout() -> None:
    assert trainer_lease.LEASE_FILE == bucket_layout.LEASE_FILE

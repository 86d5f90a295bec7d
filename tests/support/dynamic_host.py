"""The real Pulumi dynamic-provider host (`python -m pulumi.dynamic`), driven over gRPC like the
engine drives it.

Usage::

    with start_dynamic_host() as host:
        news = engine_inputs({"entrypoint": "...", ...}, RayJobProvider())
        checked = host.check(URN, olds={}, news=news)          # a CheckResponse
        created = host.create(URN, checked.inputs)             # a CreateResponse

What the engine does and this module reproduces (pulumi 3.272, sdk/go/common/resource/plugin/
provider_plugin.go and pulumi/dynamic/__main__.py):
- The host is started in the project folder and prints its gRPC port as the first stdout line.
  The engine calls Configure first; the host answers acceptSecrets=False, so the engine strips
  Pulumi's secret wrappers (the `__provider` input is a secret) before every later call.
- In a preview, values not known yet travel as the sentinel string `rpc.UNKNOWN`; the host turns
  them into `pulumi.output.Unknown` objects (keep_unknowns=True) before Check and Diff.
- Diff gets the old *outputs* in `olds`, the old inputs in `old_inputs`, the new inputs in `news`.
- Read gets the prior outputs in `properties` (refresh); Delete gets the outputs.

The host process is stopped by PID (SIGTERM, then SIGKILL); what it prints (the provider's
progress lines, which the CLI shows as diagnostics) is kept in `output`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
PROVIDER_KEY = "__provider"  # pulumi.dynamic's reserved input holding the pickled provider
# Deadline of one gRPC call; provider operations have their own, shorter deadlines in tests.
CALL_TIMEOUT_S = 120.0
# A job that logs verl's first-step line after a start-up delay (tests/job_fixtures).
STARTUP_JOB = REPO / "tests" / "job_fixtures" / "startup_job.py"


def grpo_job_urn(stack: str) -> str:
    """The URN the engine gives the GRPO RayJob of `stack` (components/grpo_training.py)."""
    return (
        f"urn:pulumi:{stack}::verl-gke::verl-gke:training:GrpoTraining"
        "$pulumi-python:dynamic/jobs:RayJob::grpo-job"
    )


@dataclass
class DynamicHost:
    """A running `python -m pulumi.dynamic` and a stub speaking ResourceProvider to it."""

    pid: int
    port: int
    stub: provider_pb2_grpc.ResourceProviderStub
    output: list[str]  # lines the host (the provider) printed after the port line
    _process: subprocess.Popen[str] = field(repr=False)
    _channel: grpc.Channel = field(repr=False)
    _drain: threading.Thread = field(repr=False)

    def output_once(self, text: str, timeout_s: float = 60.0) -> list[str]:
        """The lines printed so far, once one containing `text` has arrived (after timeout_s:
        whatever is there). A thread reads the host's stdout, so a line the provider printed
        during a call can arrive just after the call's response; on a loaded machine that thread
        may not run for seconds. Returns as soon as the line is there: the timeout only bounds
        how long a missing line (a failing test) takes."""
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.output) and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.output)

    # -- the engine's calls -------------------------------------------------------------------

    def check(
        self, urn: str, olds: struct_pb2.Struct | None, news: struct_pb2.Struct
    ) -> provider_pb2.CheckResponse:
        request = provider_pb2.CheckRequest(
            urn=urn, olds=olds or struct_pb2.Struct(), news=news, **_name_type(urn)
        )
        return self.stub.Check(request, timeout=CALL_TIMEOUT_S)

    def diff(
        self,
        urn: str,
        id_: str,
        old_outputs: struct_pb2.Struct,
        news: struct_pb2.Struct,
        old_inputs: struct_pb2.Struct | None = None,
    ) -> provider_pb2.DiffResponse:
        request = provider_pb2.DiffRequest(
            id=id_,
            urn=urn,
            olds=old_outputs,
            news=news,
            old_inputs=old_inputs or struct_pb2.Struct(),
            **_name_type(urn),
        )
        return self.stub.Diff(request, timeout=CALL_TIMEOUT_S)

    def create(self, urn: str, inputs: struct_pb2.Struct) -> provider_pb2.CreateResponse:
        request = provider_pb2.CreateRequest(urn=urn, properties=inputs, **_name_type(urn))
        return self.stub.Create(request, timeout=CALL_TIMEOUT_S)

    def read(
        self,
        urn: str,
        id_: str,
        outputs: struct_pb2.Struct,
        inputs: struct_pb2.Struct | None = None,
    ) -> provider_pb2.ReadResponse:
        request = provider_pb2.ReadRequest(
            id=id_, urn=urn, properties=outputs, inputs=inputs or struct_pb2.Struct(),
            **_name_type(urn),
        )  # fmt: skip
        return self.stub.Read(request, timeout=CALL_TIMEOUT_S)

    def update(
        self, urn: str, id_: str, old_outputs: struct_pb2.Struct, news: struct_pb2.Struct
    ) -> provider_pb2.UpdateResponse:
        request = provider_pb2.UpdateRequest(
            id=id_, urn=urn, olds=old_outputs, news=news, **_name_type(urn)
        )
        return self.stub.Update(request, timeout=CALL_TIMEOUT_S)

    def delete(self, urn: str, id_: str, outputs: struct_pb2.Struct) -> None:
        request = provider_pb2.DeleteRequest(id=id_, urn=urn, properties=outputs, **_name_type(urn))
        self.stub.Delete(request, timeout=CALL_TIMEOUT_S)

    # -- lifecycle ----------------------------------------------------------------------------

    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        self._channel.close()
        if self._process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self._process.wait()
        self._drain.join(timeout=5)

    def __enter__(self) -> DynamicHost:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_dynamic_host(
    cwd: Path = REPO, env: Mapping[str, str] | None = None, ready_timeout_s: float = 60.0
) -> DynamicHost:
    """Start the host in `cwd` (the project folder: the pickled provider is imported from there),
    configure it as the engine does, and return it."""
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.dynamic"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout=ready_timeout_s)
    line = first[0].strip() if first else ""
    if not line.isdigit():
        process.kill()
        rest = process.stdout.read() if process.poll() is not None else ""
        process.wait()
        raise RuntimeError(
            f"`python -m pulumi.dynamic` did not print its port within {ready_timeout_s:.0f}s "
            f"(first line {line!r}); output:\n{rest[-4000:]}"
        )
    output: list[str] = []
    drain = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)  # type: ignore[arg-type]
    drain.start()
    port = int(line)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = provider_pb2_grpc.ResourceProviderStub(channel)
    host = DynamicHost(
        pid=process.pid, port=port, stub=stub, output=output,
        _process=process, _channel=channel, _drain=drain,
    )  # fmt: skip
    try:
        configured = stub.Configure(
            provider_pb2.ConfigureRequest(
                args=struct_pb2.Struct(), acceptSecrets=True, acceptResources=True
            ),
            timeout=ready_timeout_s,
        )
    except Exception:
        host.stop()
        raise
    # The reason the engine strips secrets before calling this host (see the module docstring).
    assert configured.acceptSecrets is False
    return host


# -- properties on the wire -------------------------------------------------------------------


def wire(props: Mapping[str, Any]) -> struct_pb2.Struct:
    """props as the engine marshals them for a provider: unknowns (rpc.UNKNOWN or
    pulumi.output.Unknown) as the sentinel string, numbers as doubles, no secret wrappers."""
    # A private loop, as the host itself does: asyncio.run would leave the main thread without a
    # current loop, which the Pulumi SDK (mocks, the offline engine) expects to find.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(strip_secrets(dict(props)), {}))
    finally:
        loop.close()


def engine_inputs(props: Mapping[str, Any], provider: Any) -> struct_pb2.Struct:
    """A dynamic resource's inputs as the engine sends them to the host: the program's inputs plus
    `__provider`, the provider pickled exactly as pulumi.dynamic.Resource does (dill by
    reference, base64; a secret in the state, sent plain because the host accepts no secrets)."""
    if PROVIDER_KEY in props:
        raise ValueError(f"props already hold {PROVIDER_KEY}")
    return wire({**props, PROVIDER_KEY: serialize_provider(provider)})


def from_wire(struct: struct_pb2.Struct, keep_unknowns: bool = True) -> dict[str, Any]:
    """A Struct back to Python values (unknowns as pulumi.output.Unknown), as the host reads it."""
    return dict(rpc.deserialize_properties(struct, keep_unknowns=keep_unknowns))


def strip_secrets(value: Any) -> Any:
    """What MarshalProperties(KeepSecrets=false) does: keep the value, drop the secret wrapper."""
    if rpc.is_rpc_secret(value):
        return strip_secrets(rpc.unwrap_rpc_secret(value))
    if isinstance(value, Mapping):
        return {k: strip_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strip_secrets(v) for v in value]
    return value


def _name_type(urn: str) -> dict[str, str]:
    # urn:pulumi:<stack>::<project>::<qualified type>::<name>
    parts = urn.split("::")
    return {"name": parts[-1], "type": parts[-2].rsplit("$", 1)[-1]}

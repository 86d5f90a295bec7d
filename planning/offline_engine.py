"""Run the real __main__.py under an in-process mocked Pulumi engine and record what it registers.

Shared by the offline plan (tools/plan.py) and the program tests: no Pulumi CLI, no credentials,
no network. The recording monitor keeps, for every registration, its type, logical name, inputs,
parent, dependencies and provider, so tests can assert values and the dependency graph.

Two ways to answer for the cloud: by default the outputs the program reads (the GKE endpoint and
CA) have example values, as in a preview of a stack whose cluster exists. With
`unknown_outputs=True` they are unknown, and so is every new resource's id, as in the preview of a
first `pulumi up` or of an update that replaces the cluster; the dynamic resources (the Ray jobs)
then carry those unknowns in their inputs, exactly what the engine hands their provider's Check.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import runpy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import mocks, rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from config import input_rules
from config.settings import (
    ENCRYPTED_VALUE,
    NAMESPACE,
    OFFLINE_PLAN_ENV,
    SettingsError,
    load_settings,
)
from planning import pulumi_config
from planning.pulumi_config import ConfigSet, TypeFix

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = "verl-gke"
# Config keys a real deploy sets with --secret (the README's commands). The plan treats a key as
# secret only when its caller says so (run_stack's secret_keys, the plan's --set-secret), so a
# token given in plain text gets the same plain-text warning as in `pulumi up`.
SECRET_KEYS = frozenset({f"{NAMESPACE}:hfToken"})

# Values the mocked cloud returns for outputs the program reads (RFC 5737 documentation address).
FAKE_ENDPOINT = "203.0.113.10"
# A GKE version at the highest per-mode floor, Autopilot DRANET's 1.35.2-gke.1842000
# (components/gke_cluster.py checks the cluster against verl-gke:kubernetesVersion).
FAKE_MASTER_VERSION = "1.35.2-gke.1842000"
# base64 of a PEM-framed stand-in (not a real certificate), in the form GKE gives
# master_auth.cluster_ca_certificate, so the job provider's Check accepts the recorded inputs.
FAKE_CA = base64.b64encode(
    b"-----BEGIN CERTIFICATE-----\nb2ZmbGluZS1wbGFuLWNsdXN0ZXItY2E=\n-----END CERTIFICATE-----\n"
).decode()
FAKE_PROJECT_NUMBER = "123456789012"
# Comma-separated bucket names the mocked project already holds (a bucket kept by an earlier
# `pulumi destroy`); unset, the project has none.
EXISTING_BUCKETS_ENV = "VERL_GKE_OFFLINE_EXISTING_BUCKETS"


@dataclass(frozen=True)
class RecordedResource:
    urn: str
    type: str
    name: str
    custom: bool
    inputs: Mapping[str, Any]
    secret_inputs: frozenset[str]
    parent: str
    dependencies: frozenset[str]
    property_dependencies: Mapping[str, frozenset[str]]
    provider: str
    custom_timeouts: Mapping[str, str]
    delete_before_replace: bool
    ignore_changes: frozenset[str]
    replace_with: frozenset[str]
    retain_on_delete: bool
    # The `replace_on_changes` resource option: input paths whose change replaces the resource.
    replace_on_changes: frozenset[str] = frozenset()
    # The inputs exactly as the program sent them to the engine (unknowns as the wire sentinel,
    # secrets wrapped): what a contract test hands the real provider host.
    wire_inputs: struct_pb2.Struct = field(default_factory=struct_pb2.Struct, repr=False)
    # The `import_` resource option: the cloud id the engine adopts instead of creating.
    import_id: str = ""

    @property
    def provider_urn(self) -> str:
        """The provider reference without its `::<id>` suffix."""
        return self.provider.rsplit("::", 1)[0] if self.provider else ""


@dataclass
class PlanResult:
    stack: str
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    secret_outputs: frozenset[str]
    # What the program logged: warnings (placeholders, tight memory) and information.
    notices: list[str]
    messages: list[str]

    def of_type(self, type_: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> RecordedResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            names = [r.name for r in self.of_type(type_)]
            raise LookupError(f"expected one {type_} named {name!r}, found {names}")
        return found[0]

    def by_urn(self, urn: str) -> RecordedResource:
        return next(r for r in self.resources if r.urn == urn)

    def edges(self, resource: RecordedResource) -> set[str]:
        """Everything a resource waits for: explicit/implicit dependencies, parent, provider."""
        edges = set(resource.dependencies)
        edges.update(*resource.property_dependencies.values())
        if resource.provider_urn:
            edges.add(resource.provider_urn)
        return edges

    def depends_on(self, resource: RecordedResource, target: RecordedResource) -> bool:
        """Is there a path from `resource` to `target` (through children of components too)?"""
        children: dict[str, list[str]] = {}
        for r in self.resources:
            children.setdefault(r.parent, []).append(r.urn)
        seen: set[str] = set()
        stack = [resource.urn]
        while stack:
            urn = stack.pop()
            if urn in seen:
                continue
            seen.add(urn)
            if urn == target.urn:
                return True
            known = [r for r in self.resources if r.urn == urn]
            if known:
                stack.extend(self.edges(known[0]))
            # Waiting for a component means waiting for all of its children.
            stack.extend(children.get(urn, []) if urn != resource.urn else [])
        return False


def _unwrap(value: Any) -> tuple[Any, bool]:
    """Strip Pulumi's secret wrappers; report whether anything inside was secret."""
    if rpc.is_rpc_secret(value):
        inner, _ = _unwrap(rpc.unwrap_rpc_secret(value))
        return inner, True
    if isinstance(value, dict):
        secret = False
        plain = {}
        for key, item in value.items():
            plain[key], item_secret = _unwrap(item)
            secret = secret or item_secret
        return plain, secret
    if isinstance(value, list):
        pairs = [_unwrap(item) for item in value]
        return [p for p, _ in pairs], any(s for _, s in pairs)
    if isinstance(value, float) and value.is_integer():
        # The wire format (protobuf Struct) carries every number as a double.
        return int(value), False
    return value, False


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, engine_mocks: mocks.Mocks) -> None:
        super().__init__(engine_mocks)
        self.recorded: list[RecordedResource] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        raw = rpc.deserialize_properties(request.object, keep_unknowns=True)
        inputs: dict[str, Any] = {}
        secret_inputs = set()
        for key, value in raw.items():
            inputs[key], secret = _unwrap(value)
            if secret:
                secret_inputs.add(key)
        timeouts = request.customTimeouts
        self.recorded.append(
            RecordedResource(
                urn=response.urn,
                type=request.type,
                name=request.name,
                custom=request.custom,
                inputs=inputs,
                secret_inputs=frozenset(secret_inputs),
                parent=request.parent,
                dependencies=frozenset(request.dependencies),
                property_dependencies={
                    key: frozenset(deps.urns) for key, deps in request.propertyDependencies.items()
                },
                provider=request.provider,
                custom_timeouts={
                    op: getattr(timeouts, op)
                    for op in ("create", "update", "delete")
                    if getattr(timeouts, op)
                },
                delete_before_replace=request.deleteBeforeReplace,
                ignore_changes=frozenset(request.ignoreChanges),
                replace_with=frozenset(request.replace_with),
                retain_on_delete=request.retainOnDelete,
                replace_on_changes=frozenset(request.replaceOnChanges),
                wire_inputs=_copy_struct(request.object),
                import_id=request.importId,
            )
        )
        return response


def _copy_struct(struct: struct_pb2.Struct) -> struct_pb2.Struct:
    copy = struct_pb2.Struct()
    copy.CopyFrom(struct)
    return copy


class OfflineMocks(mocks.Mocks):
    """Answers registrations the way the cloud would for the few outputs the program reads.

    unknown_outputs: answer as a preview of resources still to be created does (the first
    `pulumi up`, or a replaced cluster): the cluster's endpoint and CA and every id unknown.
    """

    def __init__(self, unknown_outputs: bool = False) -> None:
        super().__init__()
        self.unknown_outputs = unknown_outputs

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "gcp:container/cluster:Cluster":
            endpoint, ca = (
                (rpc.UNKNOWN, rpc.UNKNOWN) if self.unknown_outputs else (FAKE_ENDPOINT, FAKE_CA)
            )
            state.setdefault("endpoint", endpoint)
            state.setdefault("masterAuth", {"clusterCaCertificate": ca})
            state.setdefault(
                "masterVersion", rpc.UNKNOWN if self.unknown_outputs else FAKE_MASTER_VERSION
            )
        if args.typ == "gcp:serviceaccount/account:Account" and not self.unknown_outputs:
            # IAM's email of a user-managed account: ACCOUNT_ID@PROJECT.iam.gserviceaccount.com.
            email = f"{state.get('accountId')}@{state.get('project')}.iam.gserviceaccount.com"
            state.setdefault("email", email)
        if args.typ.startswith("pulumi-python:dynamic"):
            # A dynamic provider computes its outputs (job status, checkpoints) at apply time;
            # a preview knows none of them.
            state = {k: rpc.UNKNOWN if v is None else v for k, v in state.items()}
        state.setdefault("name", args.name)
        # An empty id is how the engine answers a preview for a resource it has yet to create.
        return ("" if self.unknown_outputs else f"{args.name}-id"), state

    def call(self, args: mocks.MockCallArgs) -> dict[str, Any]:
        if args.token == "gcp:organizations/getProject:getProject":
            # The storage IAM binding names the project by number.
            project = args.args.get("projectId", "example-project")
            return {"projectId": project, "number": FAKE_PROJECT_NUMBER, "name": project}
        if args.token == "gcp:storage/getBuckets:getBuckets":
            prefix = args.args.get("prefix", "")
            names = [n for n in os.environ.get(EXISTING_BUCKETS_ENV, "").split(",") if n]
            buckets = [
                {"name": name, "location": "US-CENTRAL1", "labels": {}, "selfLink": name}
                for name in names
                if name.startswith(prefix)
            ]
            return {"buckets": buckets, "id": prefix, "prefix": prefix, "project": "mocked"}
        return {}


def stack_config(
    stack: str, project_dir: Path = REPO_ROOT, sets: Sequence[ConfigSet] = ()
) -> dict[str, str]:
    """Config as `pulumi up` would see it: project-level values, then the stack file, with `sets`
    written into the stack file first as `pulumi config set` writes them (the offline plan's
    --set), so both are checked by Pulumi's type rules the same way."""
    stack_file = project_dir / f"Pulumi.{stack}.yaml"
    if not stack_file.exists():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in _stack_files(project_dir))
        raise FileNotFoundError(f"no stack file {stack_file.name}; stacks here: {stacks}")
    declarations = _declarations(project_dir)
    config = _project_values(declarations)
    stack_values = dict((pulumi_config.load_yaml(stack_file.read_text()) or {}).get("config") or {})
    for change in sets:
        try:
            pulumi_config.apply(stack_values, change)
        except pulumi_config.ConfigSetError as error:
            raise StackConfigError(f"pulumi config set --path {error}") from None
    secret_keys = {change.root for change in sets if change.secret}

    def as_config(values: Mapping[str, Any]) -> dict[str, str]:
        return {
            **config,
            **{k: _config_text(v) for k, v in values.items() if v is not None},
        }

    problems = pulumi_config.type_problems(
        stack,
        declarations,
        stack_values,
        secret_keys,
        type_fix(stack, lambda key, value: as_config({**stack_values, key: value})),
    )
    if problems:
        raise StackConfigError("\n".join(problems))
    return as_config(stack_values)


class StackConfigError(ValueError):
    """What Pulumi itself refuses before the program runs (a value of the wrong declared type)."""


def type_fix(stack: str, config_with: Callable[[str, Any], dict[str, str]]) -> TypeFix:
    """The command that stores what a refused value meant in its declared type (`yes` -> true,
    `2h` -> 120 for a minutes key, `$41.50` -> 41.5, a list item by item), taken only when the
    program's own rules accept it too; config_with(key, value) is the stack's config with it."""

    def accepted(key: str, value: Any) -> bool:
        try:
            load_settings(stack, config_with(key, value), offline=True)
        except SettingsError as error:
            return not any(
                line.startswith((f"  - {key} ", f"  - {key}:")) for line in str(error).splitlines()
            )
        except ValueError:
            return True  # another setting's problem: the program names it on its own
        return True

    def fix(key: str, declaration: Mapping[str, Any], value: Any) -> str | None:
        if declaration.get("secret"):
            name = re.sub(r"(?<!^)(?=[A-Z])", "-", key.split(":", 1)[1]).lower()
            return f"pulumi config set --secret {key} '<your-{name}>' -s {stack}"
        text = value if isinstance(value, str) else pulumi_config.scalar_text(value)
        if declaration.get("type") == "array" and isinstance(value, str):
            items = _list_items(text)
            if items and accepted(key, items):
                return ", then ".join(
                    f"pulumi config set --path '{key}[{index}]' {item} -s {stack}"
                    for index, item in enumerate(items)
                )
        if isinstance(value, dict | list):
            return f"pulumi config rm {key} -s {stack}"
        for candidate in input_rules.declared_type_candidates(
            str(declaration.get("type")), text, minutes=key.endswith("Minutes")
        ):
            if accepted(key, candidate):
                return f"pulumi config set {key} {candidate} -s {stack}"
        if "default" in declaration:
            return f"pulumi config rm {key} -s {stack} (the default applies)"
        return None

    return fix


def _list_items(text: str) -> list[str]:
    """The items a user meant by a list typed as one string: JSON text (`["a","b"]`, what
    `pulumi config set` without `--path` stores as a string) or comma/space-separated."""
    if text.strip().startswith("["):
        with contextlib.suppress(json.JSONDecodeError):
            parsed = json.loads(text)
            if isinstance(parsed, list):
                return [str(item).strip() for item in parsed if str(item).strip()]
    return [item for item in re.split(r"[,\s]+", text) if item]


def project_config(project_dir: Path = REPO_ROOT) -> dict[str, str]:
    """The `value` or `default` Pulumi.yaml gives each config key, which Pulumi applies to every
    stack lacking the key (pulumi/pulumi sdk/go/common/workspace/config.go mergeConfig). A key
    declared with neither is required: Pulumi refuses a stack without it, as the program does."""
    return _project_values(_declarations(project_dir))


def _declarations(project_dir: Path) -> dict[str, Any]:
    """Pulumi.yaml's `config:` block."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
    return project.get("config") or {}


def _project_values(declarations: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in declarations.items():
        if isinstance(value, dict):
            value = value.get("value", value.get("default"))
        if value is not None:
            found[key] = _config_text(value)
    return found


def _stack_files(project_dir: Path) -> Iterator[Path]:
    return (p for p in project_dir.glob("Pulumi.*.yaml"))


def _config_text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"secure"}:
        # `pulumi config set --secret` stores `secure: <ciphertext>`; only the engine decrypts it.
        return ENCRYPTED_VALUE
    # The engine hands structured config to programs as JSON text.
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def run_stack(
    stack: str,
    overrides: Mapping[str, str] | None = None,
    *,
    unset: Iterable[str] = (),
    strict: bool = False,
    unknown_outputs: bool = False,
    project_dir: Path = REPO_ROOT,
    secret_keys: Iterable[str] = (),
    sets: Sequence[ConfigSet] = (),
) -> PlanResult:
    """Evaluate __main__.py for `stack` under mocks (always as a preview: dry_run=True).

    strict=False is the offline plan: committed placeholders are planned with example values.
    strict=True behaves like a real `pulumi up`: placeholders and a missing hfToken are errors.
    `unset` removes keys, like `pulumi config rm`. unknown_outputs=True: the preview of a first
    `pulumi up` (or of a replaced cluster), see OfflineMocks. secret_keys: the keys given as
    secrets (`pulumi config set --secret`); every other value is plain text, as in a stack file.
    sets: `pulumi config set` commands written into the stack file first (the plan's --set).
    """
    _forget_previous_run()
    config = {**stack_config(stack, project_dir, sets), **(overrides or {})}
    for key in unset:
        config.pop(key, None)
    # `pulumi config rm` of a key Pulumi.yaml gives a default leaves the default.
    config = {**project_config(project_dir), **config}
    # A value encrypted in the stack file was set with --secret.
    secret = set(secret_keys) | {change.root for change in sets if change.secret}
    secret |= {key for key, value in config.items() if value == ENCRYPTED_VALUE}
    set_all_config(config, [key for key in config if key in secret])
    engine_mocks = OfflineMocks(unknown_outputs)
    monitor = RecordingMonitor(engine_mocks)
    logs = _LogCollector()
    logger = logging.getLogger(f"verl-gke.offline.{stack}")
    logger.setLevel(logging.INFO)
    logger.handlers = [logs]
    logger.propagate = False
    runtime_settings.set_root_resource(None)
    mocks.set_mocks(
        engine_mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor, logger=logger
    )
    root = runtime_settings.get_root_resource()

    previous = os.environ.get(OFFLINE_PLAN_ENV)
    os.environ[OFFLINE_PLAN_ENV] = "0" if strict else "1"
    try:
        program = str(project_dir / "__main__.py")
        _sync_await(run_pulumi_func(lambda: runpy.run_path(program, run_name="__main__")))
        exports = dict(getattr(root, "outputs", {}))
        outputs, secret_outputs = _resolve_outputs(exports)
    finally:
        if previous is None:
            os.environ.pop(OFFLINE_PLAN_ENV, None)
        else:
            os.environ[OFFLINE_PLAN_ENV] = previous
    return PlanResult(
        stack, list(monitor.recorded), outputs, secret_outputs, logs.warnings, logs.infos
    )


def _forget_previous_run() -> None:
    """Drop what an earlier run in this process left in the SDK's process-wide state.

    The mocked runtime keeps its set of pending outputs and RPCs across runs (as
    pulumi.runtime.mocks.test clears them before each test); a program run that failed leaves
    registrations waiting on the failed input and outputs holding its exception, which would
    fail the next run in the same process.
    """
    loop = _ensure_event_loop()
    leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in leftover:
        task.cancel()
    if leftover:
        loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
    with runtime_settings.SETTINGS.lock:
        runtime_settings.SETTINGS.outputs.clear()
    runtime_settings.SETTINGS.rpc_manager.clear()


# Stands for an output only known after `pulumi up` (as a real preview shows it).
UNKNOWN_OUTPUT = "(known after apply)"


def _resolve_outputs(exports: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    values: dict[str, Any] = {}
    secrets = set()
    for key, value in exports.items():
        output = pulumi.Output.from_input(value)
        known = _sync_await(output.is_known())
        values[key] = _sync_await(output.future()) if known else UNKNOWN_OUTPUT
        if _sync_await(output.is_secret()):
            secrets.add(key)
    return values, frozenset(secrets)


class _LogCollector(logging.Handler):
    """Collects what the program logs with pulumi.log.info/warn (the memory breakdown,
    placeholder notices and the like)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.warnings: list[str] = []
        self.infos: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        target = self.warnings if record.levelno >= logging.WARNING else self.infos
        target.append(record.getMessage())

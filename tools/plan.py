"""Offline plan: what `pulumi up` would create for a stack, without a cloud account.

    python -m tools.plan a4x [--set verl-gke:gpuNodes=8 ...] [--strict] [--out DIR] [--rehearse]

Evaluates the real __main__.py under an in-process mocked engine (planning/offline_engine.py),
prints the resources as a tree with the properties a reviewer checks, and with --out writes every
Kubernetes object (and Helm values) as YAML. Bad configuration exits with status 2 and the
validation message. --strict treats placeholders and a missing hfToken as errors, like a real
deployment does. --rehearse first runs the GRPO job through verl's own code in a local verl
virtualenv (planning/rehearsal.py): verl's refusal exits 2 with its message and fix, and the whole
run is priced at verl's step count where the rehearsal could count it.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pulumi
import yaml

from config.settings import StackSettings, load_settings
from planning.cost_facts import what_you_pay_for
from planning.offline_engine import (
    REPO_ROOT,
    PlanResult,
    RecordedResource,
    StackConfigError,
    run_stack,
    stack_config,
)
from planning.pulumi_config import ConfigSet, is_path_key, parse_path
from planning.rehearsal import (
    offline_rehearsal,
    refusal_message,
    rehearsal_lines,
    run_length_record,
)
from pricing.whole_run import spec_steps
from tools.plan_redaction import marker, redacted, secret_markers
from training.assembly import training_job
from training.grpo_spec import RUN_CONTINUITY, GrpoSpec

# The folder holding Pulumi.yaml, Pulumi.<stack>.yaml and __main__.py.
PROJECT_DIR = REPO_ROOT

# Dotted input paths worth showing per resource type; everything else is in --out / the tests.
KEY_PROPERTIES: dict[str, tuple[str, ...]] = {
    "gcp:compute/network:Network": ("name", "mtu", "networkProfile"),
    "gcp:compute/subnetwork:Subnetwork": ("name", "region", "ipCidrRange"),
    "gcp:compute/firewall:Firewall": ("name", "sourceRanges"),
    "gcp:compute/router:Router": ("name", "region"),
    "gcp:compute/routerNat:RouterNat": ("name",),
    "gcp:compute/resourcePolicy:ResourcePolicy": ("name", "workloadPolicy"),
    "gcp:container/cluster:Cluster": (
        "name",
        "location",
        "enableAutopilot",
        "releaseChannel.channel",
        "datapathProvider",
        "enableMultiNetworking",
        "deletionProtection",
        "monitoringConfig.enableComponents",
    ),
    "gcp:container/nodePool:NodePool": (
        "name",
        "nodeLocations",
        "nodeCount",
        "nodeConfig.machineType",
        "nodeConfig.guestAccelerators",
        "nodeConfig.reservationAffinity.values",
        "nodeConfig.diskType",
        "networkConfig.acceleratorNetworkProfile",
        "networkConfig.additionalNodeNetworkConfigs",
        "placementPolicy.type",
        "placementPolicy.policyName",
    ),
    "gcp:storage/bucket:Bucket": ("name", "location", "forceDestroy"),
    "kubernetes:helm.sh/v3:Release": ("chart", "version", "namespace"),
    "pulumi-python:dynamic/jobs:RayJob": ("submission_id_prefix", "wait_for", "checkpoint_root"),
}


def lookup(inputs: Any, path: str) -> Any:
    value = inputs
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def describe(resource: RecordedResource) -> str:
    if resource.type.startswith("kubernetes:") and "metadata" in resource.inputs:
        meta = resource.inputs.get("metadata") or {}
        where = f" ns={meta['namespace']}" if meta.get("namespace") else ""
        return f"name={meta.get('name', resource.name)}{where}"
    parts = []
    for path in KEY_PROPERTIES.get(resource.type, ()):
        value = lookup(resource.inputs, path)
        if value in (None, [], {}):
            continue
        if path == "networkConfig.additionalNodeNetworkConfigs":
            value = f"{len(value)} additional networks"
        elif path == "monitoringConfig.enableComponents":
            value = ",".join(value)
        elif path == "nodeConfig.guestAccelerators":
            value = ",".join(f"{a.get('type')}x{a.get('count')}" for a in value)
        elif isinstance(value, dict):
            # Inputs come back through the engine's protobuf Struct, whose key order is not kept.
            value = dict(sorted(value.items()))
        parts.append(f"{path.rsplit('.', 1)[-1]}={value}")
    return " ".join(parts)


def render_tree(result: PlanResult) -> str:
    children: dict[str, list[RecordedResource]] = {}
    for resource in result.resources:
        children.setdefault(resource.parent, []).append(resource)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for resource in sorted(children.get(parent, []), key=lambda r: (r.custom, r.name)):
            detail = describe(resource)
            timeouts = resource.custom_timeouts.get("create")
            extra = f" (create timeout {timeouts})" if timeouts else ""
            lines.append(f"{'  ' * depth}+ {resource.type}  {resource.name}  {detail}{extra}")
            walk(resource.urn, depth + 1)

    roots = {r.parent for r in result.resources} - {r.urn for r in result.resources}
    for root in sorted(roots):
        walk(root, 0)
    return "\n".join(lines)


def kubernetes_objects(result: PlanResult) -> list[tuple[RecordedResource, dict[str, Any]]]:
    """Every Kubernetes object the program registers, as the manifest the API server gets."""
    objects = []
    for resource in result.resources:
        if resource.type.startswith("kubernetes:") and "apiVersion" in resource.inputs:
            # A copy: the caller may edit it (tests break manifests on purpose).
            objects.append((resource, copy.deepcopy(resource.inputs)))
    return objects


def write_manifests(
    result: PlanResult, out_dir: Path, markers: dict[str, str] | None = None
) -> list[Path]:
    """Every secret value (tools/plan_redaction.py) is written as its redaction marker."""
    markers = secret_markers({}, result) if markers is None else markers
    target = out_dir / result.stack
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for resource, body in kubernetes_objects(result):
        path = target / f"{body['kind'].lower()}-{resource.name}.yaml"
        # Sorted keys (as `kubectl get -o yaml` prints them): the engine's protobuf Struct does not
        # keep key order, so an unsorted render differs from run to run.
        path.write_text(yaml.safe_dump(redacted(body, markers), sort_keys=True))
        written.append(path)
    for release in result.of_type("kubernetes:helm.sh/v3:Release"):
        path = target / f"helm-{release.name}-values.yaml"
        values = redacted(release.inputs.get("values") or {}, markers)
        path.write_text(yaml.safe_dump(values, sort_keys=True))
        written.append(path)
    return written


def planned_settings(
    stack: str, given: Sequence[ConfigSet] | Mapping[str, str], strict: bool
) -> StackSettings:
    """The settings the planned run used (the same config run_stack read): the stack file after
    the plan's --set, or with config values laid over it (run_stack's `overrides`)."""
    if isinstance(given, Mapping):
        config = {**stack_config(stack, PROJECT_DIR), **given}
    else:
        config = stack_config(stack, PROJECT_DIR, given)
    return load_settings(stack, config, offline=not strict).settings


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.plan", description=__doc__.split("\n")[0]
    )
    parser.add_argument("stack", help="stack name, e.g. a4x, a4 or a3u (reads Pulumi.<stack>.yaml)")
    parser.add_argument(
        "--set",
        action=_OrderedSet,
        dest="sets",
        default=[],
        metavar="KEY=VALUE",
        help="set a config value as `pulumi config set KEY VALUE` writes it into the stack "
        "file, e.g. --set verl-gke:gpuNodes=8; a KEY with .FIELD or [INDEX] as with --path "
        "(repeatable, applied in order)",
    )
    parser.add_argument(
        "--set-secret",
        action=_OrderedSet,
        dest="sets",
        metavar="KEY=VALUE",
        help="a config value given as a secret, like `pulumi config set --secret` (repeatable)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="reject placeholders like `pulumi up`"
    )
    parser.add_argument(
        "--out", type=Path, help="write Kubernetes objects as YAML under DIR/<stack>"
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run the GRPO job through verl's own code first (a local verl virtualenv, the "
        "committed example rows; docs/rehearsal.md); verl's refusal exits 2",
    )
    return parser


class _OrderedSet(argparse.Action):
    """--set and --set-secret into one list, in the order typed (a later one wins, as a later
    `pulumi config set` does)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((option_string, values))
        setattr(namespace, self.dest, items)


def config_sets(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[ConfigSet]:
    """Each --set / --set-secret as the `pulumi config set` it stands for: a key with .FIELD or
    [INDEX] is a `--path` set. A malformed item exits through parser.error without echoing a
    secret's value."""
    sets = []
    for flag, item in args.sets:
        key, sep, value = item.partition("=")
        secret = flag == "--set-secret"
        if not sep or ":" not in key:
            shown = "<redacted>" if secret else repr(item)
            parser.error(f"{flag} {shown}: expected NAMESPACE:KEY=VALUE, e.g. verl-gke:gpuNodes=8")
        change = ConfigSet(key, value, path=is_path_key(key), secret=secret)
        try:
            parse_path(key)
        except ValueError as error:
            parser.error(f"{flag} {key}=...: {error}")
        sets.append(change)
    return sets


# A fix the program prints as a Pulumi command (config/settings.py and the rules it runs).
_SET_COMMAND = re.compile(
    r"pulumi config set (?P<secret>--secret )?(?:--path )?"
    r"(?P<key>'[\w-]+:[\w.\[\]-]+'|[\w-]+:[\w.\[\]-]+) "
    r"(?P<value>'[^']*'|[^\s,;)]+)(?: -s [\w.-]+)?"
)
_RM_COMMAND = re.compile(
    r"pulumi config rm (?:--path )?(?P<key>'[\w-]+:[\w.\[\]-]+'|[\w-]+:[\w.\[\]-]+)"
    r"(?: -s [\w.-]+)?"
)


def offline_fixes(message: str, stack: str, typed: set[str]) -> str:
    """`message` with each fix in the plan's own form: `--set KEY=VALUE` (`--set-secret` for a
    secret) for a `pulumi config set`, and for a `pulumi config rm` leaving out the --set the
    user typed, or else removing the key from the stack file."""

    def set_form(match: re.Match[str]) -> str:
        flag = "--set-secret" if match["secret"] else "--set"
        key, value = match["key"].strip("'"), match["value"]
        if "[" in key:
            # One shell word: the brackets stay literal (zsh refuses an unmatched glob).
            return f"{flag} '{key}={value.strip(chr(39))}'"
        return f"{flag} {key}={value}"

    def rm_form(match: re.Match[str]) -> str:
        key = match["key"].strip("'")
        if "[" in key and key in typed:
            # An item typed as `--set 'KEY[i]=...'`: that item, in the words typed.
            return f"leave out --set '{key}=...'"
        items = sorted(k for k in typed if k.startswith(f"{key}["))
        if key not in typed and items:
            # The list typed item by item: each of those items.
            return " and ".join(f"leave out --set '{item}=...'" for item in items)
        if key in typed or key.split(".", 1)[0] in typed:
            return f"leave out --set {key}=..."
        return f"remove {key} from Pulumi.{stack}.yaml"

    return _RM_COMMAND.sub(rm_form, _SET_COMMAND.sub(set_form, message))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    sets = config_sets(parser, args)
    # A list typed item by item ('KEY[i]=...') is not the list typed whole (offline_fixes).
    typed = {c.key for c in sets} | {c.root for c in sets if not c.key.startswith(f"{c.root}[")}
    # Nothing printed or written below holds a secret (tools/plan_redaction.py).
    given = {change.text: marker(change.key) for change in sets if change.secret and change.text}
    markers = {**secret_markers({change.key: change.text for change in sets}), **given}
    try:
        markers = {**secret_markers(stack_config(args.stack, PROJECT_DIR, sets)), **given}
        result = run_stack(args.stack, strict=args.strict, project_dir=PROJECT_DIR, sets=sets)
    except (pulumi.RunError, FileNotFoundError, StackConfigError) as error:
        # RunError: settings or job preflight problems, each with its fix; StackConfigError: a
        # value Pulumi itself refuses before the program runs.
        message = offline_fixes(str(error), args.stack, typed)
        print(f"error: {redacted(message, markers)}", file=sys.stderr)
        return 2
    markers = {**secret_markers({}, result), **markers}
    rehearsal = None
    if args.rehearse:
        settings = planned_settings(args.stack, sets, args.strict)
        rehearsal = offline_rehearsal(settings, training_job(settings).spec)
        refused = refusal_message(rehearsal)
        if refused is not None:
            # verl's own refusal of the job, as a validation error: its message and fix. What
            # concerns this machine, not the job, is no refusal (planning/rehearsal.refusals).
            message = offline_fixes(refused, args.stack, typed)
            print(f"error: {redacted(message, markers)}", file=sys.stderr)
            return 2
    for line in plan_report(result, sets, args.strict, rehearsal):
        print(redacted(line, markers))
    if args.out:
        written = write_manifests(result, args.out, markers)
        print(redacted(f"Wrote {len(written)} files under {args.out / args.stack}", markers))
    return 0


NOT_REHEARSED = (
    "Rehearsal (offline): not run (--rehearse runs the job through verl's own code here, "
    "docs/rehearsal.md); verl's checks run in the training image before training"
)


def plan_report(
    result: PlanResult,
    sets: Sequence[ConfigSet] | Mapping[str, str],
    strict: bool,
    rehearsal: dict[str, Any] | str | None = None,
) -> Iterator[str]:
    """What the plan prints, line by line and before redaction: the resource tree, the program's
    messages, the offline rehearsal (planning/rehearsal.py; None: not run), what you pay for (the
    whole run at verl's step count where the rehearsal counted the run's rows), the outputs."""
    count = len(result.resources)
    settings = planned_settings(result.stack, sets, strict)
    yield f"Plan for stack {result.stack!r}: {count} resources (offline, mocked engine)"
    yield job_summary(training_job(settings).spec)
    for notice in result.notices:
        yield f"  note: {notice}"
    yield render_tree(result)
    yield from result.messages
    root = result.outputs.get("checkpointRoot")
    if isinstance(root, str):
        yield f"Run: checkpoints in {root}; {RUN_CONTINUITY}"
    recovery = settings.recovery_plan
    stacks = f"{root}/{recovery.stacks_subdir}/" if isinstance(root, str) else "the run folder"
    yield (
        f"Recovery: a lost node or a hang restarts training from its last checkpoint, at most "
        f"{recovery.max_restarts} times (verl-gke:maxRestarts); hang: "
        f"{recovery.hang_bound_text()}; stacks of a hung run in {stacks}"
    )
    yield from teardown_notes(settings)
    yield from rehearsal_lines(rehearsal) if rehearsal is not None else [NOT_REHEARSED]
    record = run_length_record(rehearsal) if rehearsal is not None else None
    yield from what_you_pay_for(result, settings, record=record)
    yield "Outputs:"
    for key in sorted(result.outputs):
        shown = "[secret]" if key in result.secret_outputs else result.outputs[key]
        yield f"  {key}: {shown}"
    yield from next_steps(result.stack, result.notices, bool(settings.authorized_networks))


def job_summary(spec: GrpoSpec) -> str:
    """The GRPO job's hyperparameters in one line (verl-gke:job keys, training/grpo_spec.py)."""
    steps = spec_steps(spec)
    return (
        f"Job: {spec.train_batch_size} prompts per step x {spec.rollout_n} rollouts, prompt "
        f"{spec.max_prompt_length} + response {spec.max_response_length} tokens, lr {spec.lr:g}, "
        f"mini-batch {spec.ppo_mini_batch_size}, {spec.total_epochs} epoch(s) = "
        f"{steps if steps is not None else 'the dataset decides the'} steps "
        f"(verl-gke:job.trainBatchSize, rolloutN, maxPromptLength, maxResponseLength, lr, "
        f"ppoMiniBatchSize, totalEpochs)"
    )


# What the plan says about a key it planned with an example value (config/settings.py notices).
_PLANNED_WITH = re.compile(
    r"^(?P<key>[\w-]+:\w+) is (?:still the placeholder .*|not set); planning with "
)


def next_steps(stack: str, notices: Sequence[str], authorized: bool = True) -> Iterator[str]:
    """What to run next: set the placeholders the plan filled in, optionally the networks that
    may reach the control plane (unset: `authorized` False), then `pulumi up`, then follow the
    run (README, Quick start)."""
    yield "Next:"
    for notice in notices:
        match = _PLANNED_WITH.match(notice)
        if match is None:
            continue
        # Without a value `pulumi config set` asks for it (--secret: without echoing it),
        # pulumi/pulumi pkg/cmd/pulumi/config/config_set.go.
        key = match["key"]
        flag = "--secret " if key.endswith(":hfToken") else ""
        yield f"  pulumi config set {flag}{key} -s {stack}   # asks for the value"
    if not authorized:
        # Pulumi.yaml declares the key array<string>: one --path item per range.
        key = "verl-gke:authorizedNetworks"
        yield (
            f"  pulumi config set --path '{key}[0]' <your-ip>/32 -s {stack}   # optional: "
            f"only this address reaches the control plane"
        )
    yield f"  pulumi up -s {stack}                      # returns at verl's first training step"
    yield f"  python -m tools.run {stack} --follow      # follow the run until it ends"


def teardown_notes(settings: StackSettings) -> Iterator[str]:
    """What `pulumi destroy` leaves behind for this stack (README, "Tear-down and re-deploys")."""
    if settings.networking.rdma_vpcs:
        return
    yield (
        f"note: GKE creates this stack's RDMA networks (gke-anp-<cluster hash>-*, accelerator "
        f"network profile 'auto'); `pulumi destroy` does not delete them. Before destroying, "
        f"record the hash: gcloud container clusters describe {settings.cluster_name} "
        f"--location={settings.region} --project={settings.project} --format='value(id)' "
        f"| cut -c1-8; then follow README, Tear-down and re-deploys"
    )


if __name__ == "__main__":
    sys.exit(main())

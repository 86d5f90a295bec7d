"""Offline plan speed per stack, against a bare SDK baseline.

    .venv/bin/python bench/plan_speed.py [--runs 5] [--stacks a4x,a4,a3u]

For each stack: the median wall time of `python -m tools.plan <stack>` in a fresh process, and the
median wall time of a baseline process that only imports the Pulumi SDK classes the plan uses and
registers the same resources (same type tokens, same inputs) under the same mocks, with none of
this project's code. The ratio is the project's own overhead. Targets: <= 3 s per
stack, ratio <= 1.5 on the 2-core CI machine. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STACKS = ("a4x", "a4", "a3u")


def sdk_class(type_token: str) -> type | None:
    """The SDK class for a type token, e.g. gcp:compute/network:Network -> compute.Network."""
    package, module, name = type_token.split(":")
    if package == "gcp":
        return getattr(importlib.import_module(f"pulumi_gcp.{module.split('/')[0]}"), name)
    if package == "kubernetes":
        group_version = module.replace(".", "_").replace("/", ".")
        try:
            mod = importlib.import_module(f"pulumi_kubernetes.{group_version}")
            return getattr(mod, name)
        except (ImportError, AttributeError):
            # Custom resources (RayCluster, ComputeDomain, ...) use the generic class.
            from pulumi_kubernetes.apiextensions import CustomResource

            return CustomResource
    if type_token == "pulumi:providers:kubernetes":
        import pulumi_kubernetes

        return pulumi_kubernetes.Provider
    return None


def baseline(resources_file: str) -> None:
    """Child process: import the SDK classes and register the recorded resources generically."""
    import pulumi
    from pulumi.runtime import mocks
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    recorded = json.loads(Path(resources_file).read_text())
    for item in recorded:
        sdk_class(item["type"])

    class Mocks(mocks.Mocks):
        def new_resource(self, args):  # type: ignore[no-untyped-def]
            return f"{args.name}-id", dict(args.inputs)

        def call(self, args):  # type: ignore[no-untyped-def]
            return {}

    mocks.set_mocks(Mocks(), project="verl-gke", stack="bench", preview=True)

    def program() -> None:
        for item in recorded:
            if item["custom"]:
                pulumi.CustomResource(item["type"], item["name"], dict(item["inputs"]))
            else:
                pulumi.ComponentResource(item["type"], item["name"])

    _sync_await(run_pulumi_func(program))


def timed(command: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stacks", default=",".join(STACKS), help="comma-separated")
    parser.add_argument("--baseline", help=argparse.SUPPRESS)
    args = parser.parse_args()
    stacks = [s for s in args.stacks.split(",") if s]
    unknown = sorted(set(stacks) - set(STACKS))
    if unknown:
        parser.error(f"--stacks {','.join(unknown)}: not a stack; choose from {','.join(STACKS)}")
    if args.baseline:
        baseline(args.baseline)
        return

    sys.path.insert(0, str(REPO))
    from planning.offline_engine import run_stack

    print(f"offline plan speed, median of {args.runs} fresh processes per figure")
    print(f"{'stack':6} {'resources':>9} {'plan s':>8} {'SDK baseline s':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks:
            result = run_stack(stack)
            recorded = [
                {"type": r.type, "name": r.name, "custom": r.custom, "inputs": r.inputs}
                for r in result.resources
                if not r.type.startswith("pulumi-python:dynamic")
            ]
            resources_file = Path(tmp) / f"{stack}.json"
            resources_file.write_text(json.dumps(recorded, default=str))
            plan_s = timed([sys.executable, "-m", "tools.plan", stack], args.runs)
            base_s = timed([sys.executable, __file__, "--baseline", str(resources_file)], args.runs)
            print(
                f"{stack:6} {len(result.resources):9d} {plan_s:8.2f} {base_s:15.2f} "
                f"{plan_s / base_s:6.2f}"
            )


if __name__ == "__main__":
    main()

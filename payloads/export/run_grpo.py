"""The GRPO job's entrypoint on the Ray head: training, then the model export, each its own step.

    python3 run_grpo.py --run-dir /checkpoints/<experiment>/w16-1a2b3c4d \
        --identity '{"world_size": 16, ...}' [--export-target /data/models/<experiment>] \
        -- python3 -m verl.trainer.main_ppo key=value ...

1. The run folder holds the resume identity it was started with (verl-gke-run.json): another
   identity (world size, model, actor sharding) refuses to start, because verl would resume a
   checkpoint it cannot load (model_world_size_<W>_rank_<r>.pt). A folder with checkpoints and
   no recorded identity is accepted only when its latest shards are of this world size.
2. Training runs unless `training.done` names this identity and this training command: then a
   resubmission after a failed export runs only the export (at verl v0.6.1 a run resumed at its
   last step would train one more step). The previous attempt's metrics.jsonl (verl's file
   logger opens it with "w") is moved to metrics/attempt-<n>.jsonl first.
   Training runs under supervise.py: a lost node, a dead Ray actor, an NCCL error or a hang
   restarts it (at most --max-restarts times, resuming from verl's latest checkpoint); the
   attempts are recorded in recovery.json.
3. When training exits 0, `training.done` is written (step, identity, command hash), then the
   export runs (export_model.py, next to this file). The exit status is the failed step's.

Stdlib only: this folder is all the head gets (the Ray job's working_dir).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

try:
    from . import supervise  # imported as payloads.export.run_grpo (the program, tests)
except ImportError:
    import supervise  # run as a script on the head: this folder is sys.path[0]

# The names config/bucket_layout.py gives them (tests/test_run_grpo.py checks they agree).
RUN_IDENTITY_FILE = "verl-gke-run.json"
TRAINING_DONE_FILE = "training.done"
METRICS_FILE = "metrics.jsonl"
METRICS_ATTEMPTS_DIR = "metrics"
# verl writes it after each checkpoint (fsdp checkpoint manager): the latest complete step.
LATEST_FILE = "latest_checkpointed_iteration.txt"
EXPORT_SCRIPT = Path(__file__).with_name("export_model.py")
# Exit status when the run folder belongs to a run of another identity.
IDENTITY_MISMATCH = 3


def _say(text: str) -> None:
    print(f"run_grpo: {text}", flush=True)


def command_sha256(command: list[str]) -> str:
    return hashlib.sha256(json.dumps(command).encode()).hexdigest()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def identity_problem(run_dir: Path, identity: dict[str, Any]) -> str | None:
    """None when the folder is new (the identity is written) or holds this identity."""
    recorded_path = run_dir / RUN_IDENTITY_FILE
    recorded = _read_json(recorded_path)
    if recorded is None:
        unrecorded = unrecorded_checkpoint_problem(run_dir, identity)
        if unrecorded is not None:
            return unrecorded
        recorded_path.write_text(json.dumps(identity, sort_keys=True, indent=1) + "\n")
        return None
    if recorded == identity:
        return None
    changed = sorted(k for k in {*recorded, *identity} if recorded.get(k) != identity.get(k))
    diffs = ", ".join(f"{k}: {recorded.get(k)!r} -> {identity.get(k)!r}" for k in changed)
    return (
        f"{run_dir} holds checkpoints of another run ({diffs}); verl cannot resume a checkpoint "
        "across these (its shards are model_world_size_<W>_rank_<r>.pt of that model). Fix: "
        "leave verl-gke:job.defaultLocalDir unset (each identity gets its own folder), or point "
        "it at a new folder"
    )


def unrecorded_checkpoint_problem(run_dir: Path, identity: dict[str, Any]) -> str | None:
    """A folder with checkpoints but no recorded identity (one set as defaultLocalDir, or one
    from before identities were recorded): its latest step's actor shards must be of this world
    size, the only part of the identity its file names tell."""
    step = latest_step(run_dir)
    world_size = identity.get("world_size")
    if step is None or not isinstance(world_size, int):
        return None
    actor = run_dir / f"global_step_{step}" / "actor"
    shards = sorted(p.name for p in actor.glob("model_world_size_*_rank_0.pt"))
    if not shards or f"model_world_size_{world_size}_rank_0.pt" in shards:
        return None
    return (
        f"{run_dir} holds checkpoints of another world size ({actor}: {', '.join(shards)}; "
        f"this job has world_size {world_size}); verl would resume global_step_{step} and fail "
        "to load it. Fix: leave verl-gke:job.defaultLocalDir unset (each identity gets its own "
        "folder), or point it at a new folder"
    )


def finished_training(run_dir: Path, identity: dict[str, Any], sha: str) -> dict[str, Any] | None:
    done = _read_json(run_dir / TRAINING_DONE_FILE)
    if done and done.get("identity") == identity and done.get("command_sha256") == sha:
        return done
    return None


def keep_previous_metrics(run_dir: Path) -> Path | None:
    """Move the last attempt's metrics.jsonl to metrics/attempt-<n>.jsonl (n = 1, 2, ...)."""
    current = run_dir / METRICS_FILE
    if not current.is_file():
        return None
    attempts = run_dir / METRICS_ATTEMPTS_DIR
    attempts.mkdir(exist_ok=True)
    number = len(list(attempts.glob("attempt-*.jsonl"))) + 1
    while (attempts / f"attempt-{number:03d}.jsonl").exists():
        number += 1
    kept = attempts / f"attempt-{number:03d}.jsonl"
    current.rename(kept)
    return kept


def latest_step(run_dir: Path) -> int | None:
    try:
        text = (run_dir / LATEST_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def train(
    run_dir: Path,
    identity: dict[str, Any],
    command: list[str],
    policy: supervise.Policy | None = None,
    dashboard_url: str = "http://127.0.0.1:8265",
    capacity: supervise.provreq.CapacityRenewer | None = None,
) -> int:
    """Run training unless it already finished for this identity and command; 0 on success."""
    sha = command_sha256(command)
    done = finished_training(run_dir, identity, sha)
    if done is not None:
        _say(
            f"training already finished (step {done.get('step')}, {done.get('finished_at')}; "
            f"{run_dir / TRAINING_DONE_FILE}): not training again"
        )
        return 0
    kept = keep_previous_metrics(run_dir)
    if kept is not None:
        _say(f"the previous attempt's {METRICS_FILE} is kept as {kept}")
    _say(f"training: {' '.join(command[:3])} ... ({len(command)} arguments)")
    policy = policy or supervise.Policy(0, float("inf"), float("inf"))
    returncode = supervise.supervise(command, run_dir, policy, dashboard_url, _say, capacity)
    if returncode != 0:
        _say(f"training exited {returncode}")
        return returncode
    record = {
        "step": latest_step(run_dir),
        "identity": identity,
        "command_sha256": sha,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (run_dir / TRAINING_DONE_FILE).write_text(json.dumps(record, indent=1) + "\n")
    _say(f"training finished at step {record['step']}: {run_dir / TRAINING_DONE_FILE}")
    return 0


def export(run_dir: Path, target: Path, options: list[str]) -> int:
    argv = [
        sys.executable, str(EXPORT_SCRIPT),
        "--checkpoint-dir", str(run_dir), "--target-dir", str(target), *options,
    ]  # fmt: skip
    _say(f"export: {run_dir} -> {target}")
    return subprocess.run(argv, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--identity", type=json.loads, required=True)
    parser.add_argument("--export-target", type=Path)
    # Tests only: options passed on to export_model.py (a stand-in merger).
    parser.add_argument("--export-option", action="append", default=[])
    supervise.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("the training command goes after --")
    args.run_dir.mkdir(parents=True, exist_ok=True)
    problem = identity_problem(args.run_dir, args.identity)
    if problem is not None:
        print(f"run_grpo: refused: {problem}", file=sys.stderr, flush=True)
        return IDENTITY_MISMATCH
    policy = supervise.policy_from(args)
    capacity = supervise.capacity_from(args, _say)
    returncode = train(args.run_dir, args.identity, command, policy, args.dashboard_url, capacity)
    if returncode != 0 or args.export_target is None:
        return returncode
    supervise.ask_for_export_node(capacity, args.dashboard_url, _say)
    return export(args.run_dir, args.export_target, args.export_option)


if __name__ == "__main__":
    sys.exit(main())

"""The GRPO job's entrypoint on the Ray head: training, then the model export, each its own step.

    python3 run_grpo.py --run-dir /checkpoints/<experiment>/w16-1a2b3c4d \
        --identity '{"world_size": 16, ...}' [--export-target /data/models/<experiment>] \
        -- python3 -m verl.trainer.main_ppo key=value ...

1. The run folder holds the resume identity it was started with (verl-gke-run.json): another
   identity (world size, model, actor sharding) refuses to start, because verl would resume a
   checkpoint it cannot load (model_world_size_<W>_rank_<r>.pt). A folder with checkpoints and
   no recorded identity is accepted only when its latest shards are of this world size.
2. Training runs unless the run is finished (finished_reason): `training.done` names this
   identity and this training command, or this identity and the same length (--length: total
   steps, epochs, batch size, train files, prompt length and the other keys that decide verl's
   dataloader length) with no checkpoint since, or the latest checkpoint is
   at or past an explicit total step count. At verl v0.6.1 a run resumed at its last step trains
   one more step (fit() has no guard past total_training_steps), so a change of lr or a logger
   must not start verl again. Before every attempt (a resubmission's or a restart's) the
   previous attempt's metrics.jsonl (verl's file logger opens it with "w") is moved to
   metrics/attempt-<n>.jsonl.
3. With --keep-checkpoints K, global_step_* folders beyond the K latest complete ones are
   removed when an attempt starts and each time verl's tracker moves (prune_checkpoints): verl
   prunes only the saves of its own process (previous_saved_paths lives in memory).
4. "Finished" is verl's own state, never the trainer's exit status: with the rehearsal's record
   (--rehearsal-record, verl_scripts/rehearsal.py: length.last_step, the step at which verl's
   fit() ends, and save_steps) the run is finished when latest_checkpointed_iteration.txt names
   last_step (reached and saved). A trainer that exits 0 before that writes no `training.done`
   and the runner exits NOT_FINISHED; the next attempt resumes from the latest checkpoint.
   Without a record the plan's --length estimate is used, and the runner says so. When training
   finished, `training.done` is written (step, identity, command hash, length), then the export
   runs (export_model.py, next to this file). The exit status is the failed step's; a trainer
   killed by signal S is reported by the signal's name and exits 128 + S. With --evaluation, the
   export is then evaluated against the base model (evaluate.py, as a Ray task on a GPU node); a
   failed evaluation is reported and keeps the export and the exit status 0.
5. The training data each attempt starts on is recorded (verl-gke-data.json: train_files, its
   size and modification time); an attempt that resumes a checkpoint on other data says so and
   what verl does with the saved dataloader position (data_change_note).
6. Training runs under supervise.py: a lost node, a dead Ray actor, an NCCL error or a hang
   restarts it (at most --max-restarts times, resuming from verl's latest checkpoint); the
   attempts are recorded in recovery.json.
7. One trainer per run folder (trainer_lease.py): the trainer dies with this runner, and a
   runner that finds an earlier one's trainer still alive in the folder stops it first.

Stdlib only: this folder is all the head gets (the Ray job's working_dir).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    from . import supervise, trainer_lease  # imported as payloads.export.run_grpo (program, tests)
except ImportError:
    import supervise  # run as a script on the head: this folder is sys.path[0]
    import trainer_lease

# The names config/bucket_layout.py gives them (tests/test_run_grpo.py checks they agree).
RUN_IDENTITY_FILE = "verl-gke-run.json"
TRAINING_DONE_FILE = "training.done"
METRICS_FILE = "metrics.jsonl"
METRICS_ATTEMPTS_DIR = "metrics"
# verl writes it after each checkpoint (fsdp checkpoint manager): the latest complete step.
LATEST_FILE = "latest_checkpointed_iteration.txt"
# verl's step folders: <default_local_dir>/global_step_<N> (ray_trainer.py _save_checkpoint).
STEP_PREFIX = "global_step_"
# How often the pruner looks at the tracker while training runs (a save takes minutes).
PRUNE_POLL_S = float(os.environ.get("VERL_GKE_PRUNE_POLL_S", "30"))
EXPORT_SCRIPT = Path(__file__).with_name("export_model.py")
EVALUATE_SCRIPT = Path(__file__).with_name("evaluate.py")
# export_model.MARKER (tests/test_run_grpo.py checks they agree).
EXPORT_MARKER = ".verl-gke-export.json"
# The training data the run's latest attempt started on (data_change_note).
DATA_FILE = "verl-gke-data.json"
# Exit status when the run folder belongs to a run of another identity.
IDENTITY_MISMATCH = 3
# Exit status when the trainer exited 0 before verl's last step was saved.
NOT_FINISHED = 4
# Exit status when another host's runner keeps the run folder's lease (trainer_lease.py).
LEASE_HELD = 5
# The environment variable naming the rehearsal's record (training/assembly.py sets it).
REHEARSAL_RECORD_ENV = "VERL_GKE_REHEARSAL_RECORD"


def _say(text: str) -> None:
    print(f"run_grpo: {text}", flush=True)


def command_sha256(command: list[str]) -> str:
    return hashlib.sha256(json.dumps(command).encode()).hexdigest()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # absent, or a path through a file
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


def record_length(record_path: Path | None) -> dict[str, Any] | None:
    """The run's length as the rehearsal decided it with verl's own code: {"last_step": N,
    "save_steps": [...], "source": ...}; None without a readable record or a last step."""
    if record_path is None:
        return None
    record = _read_json(record_path)
    length = (record or {}).get("length")
    if not isinstance(length, dict):
        return None
    last = length.get("last_step")
    if not isinstance(last, int) or isinstance(last, bool) or last < 0:
        return None
    saves = length.get("save_steps")
    return {
        "last_step": last,
        "save_steps": saves if isinstance(saves, list) else None,
        "source": f"rehearsal record {record_path}: {length.get('source')}",
    }


def run_length(record_path: Path | None, estimate: dict[str, Any]) -> dict[str, Any]:
    """The record's length where there is one, else the plan's --length estimate (said so)."""
    length = record_length(record_path)
    if length is not None:
        _say(f"the run ends at step {length['last_step']} ({length['source']})")
        return length
    where = "no record named" if record_path is None else f"no usable record at {record_path}"
    _say(f"{where}: the run's length is the plan's estimate (--length), not verl's own count")
    return estimate


def finished_reason(
    run_dir: Path, identity: dict[str, Any], sha: str, length: dict[str, Any]
) -> str | None:
    """Why this run needs no more training, or None. verl v0.6.1's fit() resumed at its last
    step trains one more (verl/trainer/ppo/ray_trainer.py: the loop tests global_steps >=
    total_training_steps only after a step), so a finished run must not start verl again."""
    done = _read_json(run_dir / TRAINING_DONE_FILE)
    latest = latest_step(run_dir)
    if done and done.get("identity") == identity:
        done_file = run_dir / TRAINING_DONE_FILE
        where = f"step {done.get('step')}, {done.get('finished_at')}; {done_file}"
        if done.get("command_sha256") == sha:
            return f"training already finished ({where})"
        if done.get("length") == length and latest == done.get("step"):
            return (
                f"training already finished ({where}) with the same length {length}; a change of "
                "any other setting (lr, loggers, test frequency) does not train a finished run. "
                "To train on, raise trainer.total_training_steps or totalEpochs"
            )
    last = length.get("last_step")
    if isinstance(last, int) and latest is not None and latest >= last:
        return (
            f"the latest checkpoint (step {latest}) is at the run's last step {last} "
            f"({length.get('source')})"
        )
    total = length.get("total_training_steps")
    if isinstance(total, int) and latest is not None and latest >= total:
        return f"the latest checkpoint (step {latest}) is at trainer.total_training_steps={total}"
    return None


def train_data(length: dict[str, Any]) -> dict[str, Any]:
    """The run's train_files as the head sees them: path, size and modification time."""
    path = str(length.get("train_files"))
    try:
        stat = Path(path).stat()
    except OSError:
        return {"train_files": path}
    return {"train_files": path, "bytes": stat.st_size, "modified_ns": stat.st_mtime_ns}


def data_change_note(run_dir: Path, length: dict[str, Any]) -> str | None:
    """What resuming on other training data does, when the latest checkpoint was trained on
    other data (another path, size or modification time); records the data this attempt uses.
    verl resumes the checkpoint's model and optimizer and, from its data.pt, the train
    dataloader's position (RayPPOTrainer._load_checkpoint, ray_trainer.py v0.6.1 and 0.9.0):
    torchdata's StatefulDataLoader (0.11) restores how many samples the epoch had drawn and
    skips that many of the new data's shuffled order (the sampler's fixed seed,
    main_ppo.create_rl_sampler), so new rows are counted against the old position; with fewer
    rows than that, the first batch raises StopIteration. verl 0.9.0 skips the restore when the
    step is at an epoch boundary of the new dataloader, and starts at epoch
    global_steps // len(train_dataloader). (Run with verl's RayPPOTrainer._load_checkpoint at
    v0.6.1 and 0.9.0 and torchdata 0.11.0: 10 rows drawn 4, resumed on 10, 6, 4 and 3 rows.)"""
    now = train_data(length)
    before = _read_json(run_dir / DATA_FILE)
    (run_dir / DATA_FILE).write_text(json.dumps(now, sort_keys=True) + "\n")
    step = latest_step(run_dir)
    if before is None or before == now or step is None:
        return None
    changed = ", ".join(
        f"{key} {before.get(key)!r} -> {now.get(key)!r}"
        for key in sorted({*before, *now})
        if before.get(key) != now.get(key)
    )
    return (
        f"the training data changed since this run's checkpoints ({changed}); verl resumes "
        f"global_step_{step} (model, optimizer) and its saved dataloader position: it skips as "
        "many rows of the new data's shuffled order as the epoch had drawn from the old data "
        "and goes on, so this epoch repeats or misses rows, and with fewer new rows than were "
        "drawn the trainer fails (StopIteration; verl 0.9.0 restores no position when the step "
        "is at an epoch boundary of the new data). The run's length follows the new data. To "
        "train on the new data from step 0, set a new verl-gke:job.experimentName"
    )


def signal_exit(returncode: int) -> tuple[str, int]:
    """(how the trainer ended, the runner's exit status). subprocess gives -S for a process
    killed by signal S (Python docs, subprocess.Popen.returncode); returned as is, sys.exit(-9)
    would exit 247, so a killed trainer exits 128 + S, as a shell reports it."""
    if returncode >= 0:
        return f"exited {returncode}", returncode
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return f"was killed by {name} (signal {number}; exit status {128 + number})", 128 + number


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


def _keep_metrics(run_dir: Path) -> None:
    """Before every attempt, a resubmission's or a restart's: verl's FileLogger opens
    metrics.jsonl with "w" (verl/utils/tracking.py FileLogger, v0.6.1), so the attempt before
    would lose its lines."""
    kept = keep_previous_metrics(run_dir)
    if kept is not None:
        _say(f"the previous attempt's {METRICS_FILE} is kept as {kept}")


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
    length: dict[str, Any],
    keep: int | None = None,
    policy: supervise.Policy | None = None,
    dashboard_url: str = "http://127.0.0.1:8265",
    capacity: supervise.provreq.CapacityRenewer | None = None,
) -> int:
    """Run training unless the run is finished (finished_reason); 0 on success."""
    sha = command_sha256(command)
    finished = finished_reason(run_dir, identity, sha, length)
    if finished is not None:
        _say(f"{finished}: not training again")
        if (_read_json(run_dir / TRAINING_DONE_FILE) or {}).get("command_sha256") != sha:
            _record_done(run_dir, identity, sha, length)
        return 0
    changed = data_change_note(run_dir, length)
    if changed is not None:
        _say(changed)
    _say(f"training: {' '.join(command[:3])} ... ({len(command)} arguments)")
    policy = policy or supervise.Policy(0, float("inf"), float("inf"))
    try:
        with (
            trainer_lease.held(run_dir, _say, policy.stop_grace_s) as lease,
            pruning(run_dir, keep),
        ):
            returncode = supervise.supervise(
                command,
                run_dir,
                policy,
                dashboard_url,
                _say,
                lambda: _keep_metrics(run_dir),
                capacity=capacity,
                on_trainer=lease.set_trainer,
            )
    except trainer_lease.LeaseHeldError as held:
        _say(f"refused: {held}")
        return LEASE_HELD
    if returncode != 0:
        how, status = signal_exit(returncode)
        _say(f"training {how}")
        return status
    unfinished = unfinished_exit(run_dir, length)
    if unfinished is not None:
        _say(unfinished)
        return NOT_FINISHED
    step = _record_done(run_dir, identity, sha, length)
    _say(f"training finished at step {step}: {run_dir / TRAINING_DONE_FILE}")
    return 0


def unfinished_exit(run_dir: Path, length: dict[str, Any]) -> str | None:
    """Why a trainer that exited 0 has not finished the run: verl's last step (the record's) is
    not its latest saved checkpoint. None when it has, or when no last step is known."""
    last = length.get("last_step")
    if not isinstance(last, int):
        return None
    latest = latest_step(run_dir)
    if latest is not None and latest >= last:
        return None
    return (
        f"the trainer exited 0 but verl's latest checkpoint is step {latest}, not the run's last "
        f"step {last} ({length.get('source')}): the run is not finished, no training.done is "
        "written and the next attempt resumes from the latest checkpoint"
    )


def _record_done(
    run_dir: Path, identity: dict[str, Any], sha: str, length: dict[str, Any]
) -> int | None:
    step = latest_step(run_dir)
    record = {
        "step": step,
        "identity": identity,
        "command_sha256": sha,
        "length": length,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (run_dir / TRAINING_DONE_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return step


# --- checkpoints kept (trainer.max_actor_ckpt_to_keep) across attempts --------------------------


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Remove global_step_N folders other than the `keep` latest with N <= the tracker's step
    (complete ones); the tracker's step is always kept, later (partial) steps are left to verl,
    which overwrites them. verl's own pruning knows only its process's saves
    (previous_saved_paths, fsdp_checkpoint_manager.py v0.6.1), so after a resume it never
    removes the earlier attempts' folders."""
    latest = latest_step(run_dir)
    if latest is None or keep < 1:
        return []
    steps = sorted(
        int(p.name.removeprefix(STEP_PREFIX))
        for p in run_dir.glob(f"{STEP_PREFIX}*")
        if p.is_dir() and p.name.removeprefix(STEP_PREFIX).isdigit()
    )
    complete = [n for n in steps if n <= latest]
    kept = {latest, *complete[-keep:]}
    removed = [run_dir / f"{STEP_PREFIX}{n}" for n in complete if n not in kept]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def _prune_and_say(run_dir: Path, keep: int) -> None:
    removed = prune_checkpoints(run_dir, keep)
    if removed:
        names = ", ".join(p.name for p in removed)
        _say(f"beyond the {keep} checkpoints kept (max_actor_ckpt_to_keep), removed: {names}")


@contextlib.contextmanager
def pruning(run_dir: Path, keep: int | None) -> Iterator[None]:
    """Prune now, then each time the tracker names a new step, until the block ends."""
    if keep is None:
        yield
        return
    # Read before the first prune: a step saved from here on is a change the watcher sees.
    seen = latest_step(run_dir)
    _prune_and_say(run_dir, keep)
    stop = threading.Event()

    def watch() -> None:
        nonlocal seen
        while not stop.wait(PRUNE_POLL_S):
            now = latest_step(run_dir)
            if now != seen:
                seen = now
                _prune_and_say(run_dir, keep)

    watcher = threading.Thread(target=watch, name="checkpoint-pruner", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()


def label_superseded_export(target: Path, run_dir: Path) -> None:
    """The export folder is one per experiment; a run of another identity (another run folder)
    exports there only when it finishes. Until then the folder's marker says whose model it
    holds and which run will replace it."""
    marker = _read_json(target / EXPORT_MARKER)
    if marker is None or str(marker.get("source", "")).startswith(f"{run_dir}/"):
        return
    if marker.get("superseded_by") == str(run_dir):
        return
    marker["superseded_by"] = str(run_dir)
    marker["note"] = (
        f"holds the model of {marker.get('source')}; the run in {run_dir} replaces it when it "
        "finishes"
    )
    (target / EXPORT_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    _say(f"{target} holds the previous run's model until this run exports: labelled in its marker")


def export(run_dir: Path, target: Path, options: list[str]) -> int:
    argv = [
        sys.executable, str(EXPORT_SCRIPT),
        "--checkpoint-dir", str(run_dir), "--target-dir", str(target), *options,
    ]  # fmt: skip
    _say(f"export: {run_dir} -> {target}")
    return subprocess.run(argv, check=False).returncode


def evaluation_argv(options: dict[str, Any]) -> list[str]:
    """evaluate.py's flags from the runner's --evaluation object (training/model_evaluation.py)."""
    argv: list[str] = []
    for key, value in options.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        argv += [f"--{key.replace('_', '-')}", shown]
    return argv


def evaluate(target: Path, options: dict[str, Any], extra: list[str]) -> None:
    """The export against the base model, on a GPU node (evaluate.py --on-node GPU). Its last
    line is the summary the job provider reads; a failure leaves the export as it is."""
    argv = [
        sys.executable, str(EVALUATE_SCRIPT), "--trained", str(target), "--on-node", "GPU",
        *evaluation_argv(options), *extra,
    ]  # fmt: skip
    _say(f"evaluation: {target} against {options.get('base')}")
    returncode = subprocess.run(argv, check=False).returncode
    if returncode != 0:
        _say(
            f"the evaluation failed (exit {returncode}; the reason is above and in its report); "
            f"the export in {target} stays as it is"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--identity", type=json.loads, required=True)
    parser.add_argument("--export-target", type=Path)
    # What decides how many steps the run has; a finished run trains again only when it changes.
    parser.add_argument("--length", type=json.loads, required=True)
    # The rehearsal's record: its length replaces --length where it exists.
    parser.add_argument(
        "--rehearsal-record", type=Path, default=os.environ.get(REHEARSAL_RECORD_ENV) or None
    )
    parser.add_argument("--keep-checkpoints", type=int)
    # A LoRA run's lora_alpha, for the exported adapter's config (export_model.py).
    parser.add_argument("--lora-alpha", type=int)
    # Tests only: options passed on to export_model.py (a stand-in merger).
    parser.add_argument("--export-option", action="append", default=[])
    # evaluate.py's flags as one JSON object (training/model_evaluation.py); none: no evaluation.
    parser.add_argument("--evaluation", type=json.loads)
    # Tests only: options passed on to evaluate.py (where it runs).
    parser.add_argument("--evaluation-option", action="append", default=[])
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
    if args.export_target is not None:
        label_superseded_export(args.export_target, args.run_dir)
    policy = supervise.policy_from(args)
    capacity = supervise.capacity_from(args, _say)
    length = run_length(args.rehearsal_record, args.length)
    returncode = train(
        args.run_dir,
        args.identity,
        command,
        length,
        args.keep_checkpoints,
        policy,
        args.dashboard_url,
        capacity,
    )
    if returncode != 0 or args.export_target is None:
        return returncode
    supervise.ask_for_export_node(capacity, args.dashboard_url, _say)
    lora = [] if args.lora_alpha is None else ["--lora-alpha", str(args.lora_alpha)]
    returncode = export(args.run_dir, args.export_target, [*lora, *args.export_option])
    if returncode == 0 and args.evaluation is not None:
        evaluate(args.export_target, args.evaluation, args.evaluation_option)
    return returncode


if __name__ == "__main__":
    sys.exit(main())

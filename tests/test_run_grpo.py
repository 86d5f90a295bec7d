"""The GRPO job's runner (payloads/export/run_grpo.py) for real: a subprocess with a stand-in
training command and the real export script, a temp folder as the bucket's checkpoint mount.

Rules it encodes:
- a failed export does not retrain: the resubmission finds `training.done` for the same identity
  and training command and runs only the export (at verl v0.6.1 a run resumed at its last step
  trains one more step: real-contracts.md, verl's fit loop);
- a longer run (more epochs or total steps) trains again, resuming in the same folder;
- a run folder of another resume identity is refused before training (verl loads
  model_world_size_<W>_rank_<r>.pt, fsdp_checkpoint_manager.py);
- every attempt's metrics.jsonl is kept (verl's FileLogger opens it with "w");
- a finished run stays finished when a setting outside its length changes (lr, a logger): at
  verl v0.6.1 fit() resumed at its last step trains one more (ray_trainer.py fit: the
  total_training_steps test comes after the step); a longer run trains on;
- a trainer killed by a signal is reported by the signal's name and exit status 128 + S
  (subprocess gives -S; sys.exit(-9) would exit 247);
- the runner keeps max_actor_ckpt_to_keep checkpoints across attempts (verl prunes only its own
  process's saves: previous_saved_paths, fsdp_checkpoint_manager.py v0.6.1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import bucket_layout
from payloads.export import export_model, run_grpo

# Runs the runner as a subprocess, as the job does.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "payloads" / "export" / "run_grpo.py"
IDENTITY = {"world_size": 16, "model_path": "/data/M", "actor_strategy": "fsdp"}

# Stand-in for verl's trainer: counts its calls, prints a step line, writes a checkpoint of step
# <argv[2]> the way verl lays it out and a metrics.jsonl opened with "w", exits <argv[3]>.
TRAINER = """
import json, pathlib, sys
run = pathlib.Path(sys.argv[1]); step = int(sys.argv[2]); code = int(sys.argv[3])
with open(run / "calls", "a") as calls:
    calls.write("x")
print(f"step:{step} - training/global_step:{step} - timing_s/step:1.0", flush=True)
(run / f"global_step_{step}" / "actor").mkdir(parents=True, exist_ok=True)
(run / "latest_checkpointed_iteration.txt").write_text(str(step))
with open(run / "metrics.jsonl", "w") as metrics:
    metrics.write(json.dumps({"step": step, "data": {"exit": code}}) + "\\n")
sys.exit(code)
"""


LENGTH = {
    "total_training_steps": None,
    "total_epochs": 1,
    "train_batch_size": 8,
    "train_files": "t",
}


def length_option(**changes: object) -> tuple[str, ...]:
    return ("--length", json.dumps({**LENGTH, **changes}))


def run(
    run_dir: Path,
    target: Path,
    step: int = 2,
    code: int = 0,
    identity: dict | None = None,
    *,
    runner_options: tuple[str, ...] = ("--length", json.dumps(LENGTH)),
    trainer_options: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(run_dir),
        "--identity", json.dumps(identity or IDENTITY), "--export-target", str(target),
        *runner_options,
        "--", sys.executable, "-c", TRAINER, str(run_dir), str(step), str(code), *trainer_options,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def calls(run_dir: Path) -> int:
    path = run_dir / "calls"
    return len(path.read_text()) if path.exists() else 0


def mark_exported(target: Path, run_dir: Path, step: int) -> None:
    """What a finished export leaves: the real export script then has nothing to do."""
    target.mkdir(parents=True, exist_ok=True)
    source = str(run_dir / f"global_step_{step}" / "actor")
    (target / export_model.MARKER).write_text(json.dumps({"step": step, "source": source}))


def test_a_failed_export_is_retried_alone(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "ckpt" / "exp" / "w16-abcd1234", tmp_path / "models" / "exp"
    target.parent.mkdir(parents=True)
    target.write_text("a file where the export folder belongs")  # the export fails
    first = run(run_dir, target)
    assert first.returncode != 0
    assert "step:2 - training/global_step:2" in first.stdout
    done = json.loads((run_dir / run_grpo.TRAINING_DONE_FILE).read_text())
    assert done["step"] == 2 and done["identity"] == IDENTITY
    target.unlink()
    mark_exported(target, run_dir, 2)
    second = run(run_dir, target)  # the same job resubmitted
    assert second.returncode == 0, second.stderr
    assert calls(run_dir) == 1  # training ran once
    assert "training already finished (step 2" in second.stdout
    assert "already holds step 2; nothing to do" in second.stdout


def test_a_failed_training_is_not_exported_and_keeps_its_metrics(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    failed = run(run_dir, target, step=1, code=7)
    assert failed.returncode == 7
    assert not (run_dir / run_grpo.TRAINING_DONE_FILE).exists()
    assert not target.exists()
    mark_exported(target, run_dir, 2)
    assert run(run_dir, target, step=2).returncode == 0
    assert calls(run_dir) == 2
    kept = run_dir / "metrics" / "attempt-001.jsonl"
    assert json.loads(kept.read_text())["data"] == {"exit": 7}
    assert json.loads((run_dir / "metrics.jsonl").read_text())["step"] == 2


def test_a_folder_of_another_world_size_is_refused_before_training(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    mark_exported(target, run_dir, 2)
    assert run(run_dir, target).returncode == 0
    other = {**IDENTITY, "world_size": 32}
    refused = run(run_dir, target, identity=other)
    assert refused.returncode == run_grpo.IDENTITY_MISMATCH
    assert "world_size: 16 -> 32" in refused.stderr
    assert calls(run_dir) == 1


@pytest.mark.parametrize(("shard_world_size", "refused"), [(8, True), (16, False)])
def test_an_unrecorded_folder_is_checked_by_its_shards(
    tmp_path: Path, shard_world_size: int, refused: bool
) -> None:
    # A folder set as defaultLocalDir that holds checkpoints but no verl-gke-run.json: each rank
    # would load model_world_size_<W>_rank_<r>.pt of its own W (fsdp_checkpoint_manager.py).
    run_dir, target = tmp_path / "run", tmp_path / "models"
    actor = run_dir / "global_step_3" / "actor"
    actor.mkdir(parents=True)
    (actor / f"model_world_size_{shard_world_size}_rank_0.pt").write_bytes(b"")
    (run_dir / run_grpo.LATEST_FILE).write_text("3")
    mark_exported(target, run_dir, 3)
    result = run(run_dir, target, step=3)
    if refused:
        assert result.returncode == run_grpo.IDENTITY_MISMATCH
        assert "model_world_size_8_rank_0.pt" in result.stderr
        assert calls(run_dir) == 0
        assert not (run_dir / run_grpo.RUN_IDENTITY_FILE).exists()
    else:
        assert result.returncode == 0, result.stderr
        assert calls(run_dir) == 1


@pytest.mark.parametrize(
    "name",
    ["RUN_IDENTITY_FILE", "TRAINING_DONE_FILE", "METRICS_FILE", "METRICS_ATTEMPTS_DIR"],
)
def test_runner_names_agree_with_the_bucket_layout(name: str) -> None:
    # The runner cannot import the program (it is all the head gets); the names must agree.
    assert getattr(run_grpo, name) == getattr(bucket_layout, name)


def test_runner_and_export_agree_on_verls_marker() -> None:
    assert run_grpo.LATEST_FILE == export_model.LATEST_FILE


def test_a_finished_run_stays_finished_when_the_lr_changes(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    mark_exported(target, run_dir, 2)
    assert run(run_dir, target, runner_options=length_option()).returncode == 0
    # Another training command (the lr), the same length: verl would train step 3.
    again = run(
        run_dir, target, step=3, runner_options=length_option(), trainer_options=("lr=2e-6",)
    )
    assert again.returncode == 0, again.stderr
    assert calls(run_dir) == 1
    assert "training already finished (step 2" in again.stdout
    assert "raise trainer.total_training_steps or totalEpochs" in again.stdout
    assert "already holds step 2; nothing to do" in again.stdout


def test_a_longer_run_trains_on(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    mark_exported(target, run_dir, 2)
    assert run(run_dir, target, runner_options=length_option()).returncode == 0
    mark_exported(target, run_dir, 4)
    longer = run(run_dir, target, step=4, runner_options=length_option(total_epochs=2))
    assert longer.returncode == 0, longer.stderr
    assert calls(run_dir) == 2


def test_a_run_at_its_explicit_total_is_not_trained_again(tmp_path: Path) -> None:
    # No training.done (the attempt died after its last save): the tracker already names the
    # total, so verl would train step 5 of a 4-step run.
    run_dir, target = tmp_path / "run", tmp_path / "models"
    (run_dir / "global_step_4" / "actor").mkdir(parents=True)
    (run_dir / run_grpo.LATEST_FILE).write_text("4")
    mark_exported(target, run_dir, 4)
    result = run(run_dir, target, step=5, runner_options=length_option(total_training_steps=4))
    assert result.returncode == 0, result.stderr
    assert calls(run_dir) == 0
    assert "is at trainer.total_training_steps=4" in result.stdout
    assert json.loads((run_dir / run_grpo.TRAINING_DONE_FILE).read_text())["step"] == 4


def test_a_trainer_killed_by_a_signal_is_named(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(run_dir),
        "--identity", json.dumps(IDENTITY), "--export-target", str(target), *length_option(),
        "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 128 + 9
    assert "training was killed by SIGKILL (signal 9; exit status 137)" in result.stdout


def _step_folders(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("global_step_*"))


def test_checkpoints_beyond_the_kept_ones_are_pruned_when_an_attempt_starts(
    tmp_path: Path,
) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    for step in (1, 2, 3, 4, 5):  # 5 is a save the crash cut short: the tracker names 4
        (run_dir / f"global_step_{step}" / "actor").mkdir(parents=True)
    (run_dir / run_grpo.LATEST_FILE).write_text("4")
    # The stand-in trainer fails at once, so only the runner's pruning acted.
    keep = ("--keep-checkpoints", "2")
    run(run_dir, target, step=4, code=1, runner_options=(*length_option(), *keep))
    assert _step_folders(run_dir) == ["global_step_3", "global_step_4", "global_step_5"]


def test_checkpoints_are_pruned_each_time_the_tracker_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_grpo, "PRUNE_POLL_S", 0.1)
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def save(step: int) -> None:  # verl's order: the step's folder, then the tracker
        (run_dir / f"global_step_{step}" / "actor").mkdir(parents=True)
        (run_dir / run_grpo.LATEST_FILE).write_text(str(step))

    save(1)
    with run_grpo.pruning(run_dir, 1):
        for step in (2, 3):
            save(step)
            # Waits for the pruner; the deadline only ends a test that would hang.
            deadline = time.monotonic() + 300
            while f"global_step_{step - 1}" in _step_folders(run_dir):
                assert time.monotonic() < deadline, _step_folders(run_dir)
                time.sleep(0.05)
    assert _step_folders(run_dir) == ["global_step_3"]


def test_the_previous_identitys_export_is_labelled_until_this_run_exports(tmp_path: Path) -> None:
    old_run, run_dir = tmp_path / "w8-old", tmp_path / "w16-new"
    target = tmp_path / "models"
    mark_exported(target, old_run, 9)
    run(run_dir, target, code=1)  # the new identity's first attempt fails before its export
    marker = json.loads((target / export_model.MARKER).read_text())
    assert marker["source"] == str(old_run / "global_step_9" / "actor")
    assert marker["superseded_by"] == str(run_dir)
    assert f"the run in {run_dir} replaces it" in marker["note"]


def test_the_runner_and_export_agree_on_the_export_marker() -> None:
    assert run_grpo.EXPORT_MARKER == export_model.MARKER


def test_a_lora_export_says_what_it_holds_and_gets_the_runs_alpha(tmp_path: Path) -> None:
    # The layout verl's merger writes for a LoRA checkpoint (base_model_merger.py
    # save_lora_adapter, v0.6.1): the base weights as the model, the adapter in lora_adapter/
    # with lora_alpha 0.
    adapter = tmp_path / export_model.LORA_DIR
    adapter.mkdir()
    written = {"r": 32, "lora_alpha": 0, "target_modules": ["q_proj", "v_proj"]}
    (adapter / "adapter_config.json").write_text(json.dumps(written))
    contents = export_model.lora_contents(tmp_path, 64)
    assert json.loads((adapter / "adapter_config.json").read_text())["lora_alpha"] == 64
    assert contents["contents"].startswith("the untrained base model + the trained LoRA adapter")
    assert f"--lora-modules trained={adapter}" in contents["serve"]
    assert "--max-lora-rank 32" in contents["serve"]
    with pytest.raises(export_model.ExportError, match="scaled by 0"):
        (adapter / "adapter_config.json").write_text(json.dumps(written))
        export_model.lora_contents(tmp_path, None)
    assert export_model.lora_contents(tmp_path / "plain", None)["contents"] == "model"


# Stand-in for verl's trainer whose first call loses a Ray actor (Ray 2.47/2.49 ray/exceptions.py
# ActorDiedError.BASE_ERROR_MSG, a retried cause) and whose second call finishes; each call opens
# metrics.jsonl with "w", as verl's FileLogger does (verl/utils/tracking.py, v0.6.1).
RESTARTED_TRAINER = """
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
with open(run / "calls", "a") as calls:
    calls.write("x")
call = len((run / "calls").read_text())
print(f"step:{call} - training/global_step:{call} - timing_s/step:1.0", flush=True)
with open(run / "metrics.jsonl", "w") as metrics:
    metrics.write(json.dumps({"step": call}) + "\\n")
if call == 1:
    print("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    sys.exit(1)
"""


def test_a_restart_keeps_the_lost_attempts_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [
        sys.executable, str(RUNNER), "--run-dir", str(run_dir),
        "--identity", json.dumps(IDENTITY), "--max-restarts", "1", *length_option(),
        "--", sys.executable, "-c", RESTARTED_TRAINER, str(run_dir),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls(run_dir) == 2
    kept = run_dir / "metrics" / "attempt-001.jsonl"
    assert json.loads(kept.read_text())["step"] == 1
    assert json.loads((run_dir / "metrics.jsonl").read_text())["step"] == 2


@pytest.mark.parametrize(("rank", "flag"), [(4, 8), (8, 8), (48, 64), (300, 320), (512, 512)])
def test_the_serve_command_names_a_max_lora_rank_vllm_accepts(
    tmp_path: Path, rank: int, flag: int
) -> None:
    # vLLM's --max-lora-rank takes only the values of MaxLoRARanks (vllm/config/lora.py, vLLM
    # 0.11: 1, 8, 16, 32, 64, 128, 256, 320, 512); the adapter needs one at or above its rank.
    adapter = tmp_path / export_model.LORA_DIR
    adapter.mkdir()
    written = {"r": rank, "lora_alpha": 0, "target_modules": ["q_proj"]}
    (adapter / "adapter_config.json").write_text(json.dumps(written))
    serve = export_model.lora_contents(tmp_path, 16)["serve"]
    assert serve.endswith(f"--max-lora-rank {flag}")
    assert flag in (1, 8, 16, 32, 64, 128, 256, 320, 512) and flag >= rank


def test_a_resume_on_changed_training_data_says_what_verl_does(tmp_path: Path) -> None:
    run_dir, target = tmp_path / "run", tmp_path / "models"
    data = tmp_path / "train.parquet"
    data.write_bytes(b"x" * 10)
    mark_exported(target, run_dir, 2)
    first = run(run_dir, target, runner_options=length_option(train_files=str(data)))
    assert first.returncode == 0, first.stderr
    assert "training data changed" not in first.stdout
    recorded = json.loads((run_dir / run_grpo.DATA_FILE).read_text())
    assert recorded == {
        "train_files": str(data),
        "bytes": 10,
        "modified_ns": recorded["modified_ns"],
    }
    # The same data, a longer run: no note.
    mark_exported(target, run_dir, 4)
    same = run(
        run_dir, target, step=4, runner_options=length_option(train_files=str(data), total_epochs=2)
    )
    assert same.returncode == 0, same.stderr
    assert "training data changed" not in same.stdout
    # Other rows at the same path, a longer run again: verl resumes step 4 on the new data.
    data.write_bytes(b"y" * 6)
    mark_exported(target, run_dir, 6)
    options = length_option(train_files=str(data), total_epochs=3)
    changed = run(run_dir, target, step=6, runner_options=options)
    assert changed.returncode == 0, changed.stderr
    assert "the training data changed since this run's checkpoints (bytes 10 -> 6" in changed.stdout
    assert (
        "verl resumes global_step_4 (model, optimizer) and its saved dataloader" in changed.stdout
    )
    assert calls(run_dir) == 3

"""What the runner is told about a run beyond its identity (training/run_life.py), rendered by the
program, and the verl rules behind it.

- verl v0.6.1 removes the previous checkpoints down to max_ckpt_to_keep - 1 before it writes the
  new one (verl/utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint); 0.9.0 keeps the
  only one until the new save is registered (checkpoint_manager.py register_checkpoint,
  volcengine/verl#4873). Both prune only what their own process saved (previous_saved_paths), so
  after a resume the runner prunes.
- verl trains LoRA when actor_rollout_ref.model.lora_rank > 0, lora_alpha default 16
  (_generated_ppo_trainer.yaml, 0.6.1 and 0.9.0).
"""

from __future__ import annotations

import ast
import json
import shlex
from typing import Any

import pytest

from config.settings import load_settings
from tests.program import REAL
from tests.support.require import verl_installed
from training.assembly import training_job
from training.grpo_spec import GrpoPreflightError
from training.run_life import DATALOADER_KEYS

GOOD = {**REAL, "verl-gke:mode": "standard"}


def _job(*overrides: str, **config: str) -> Any:
    values = {**GOOD, "verl-gke:job": json.dumps({"extraOverrides": list(overrides)})}
    values.update({f"verl-gke:{k}": v for k, v in config.items()})
    return training_job(load_settings("a3u", values, offline=False).settings)


def _runner_args(entrypoint: str) -> dict[str, str]:
    words = shlex.split(entrypoint)
    runner = words[: words.index("--")]
    return {w: runner[i + 1] for i, w in enumerate(runner) if w.startswith("--")}


@pytest.mark.parametrize(
    "override", ["trainer.max_actor_ckpt_to_keep=1", "trainer.remove_previous_ckpt_in_save=true"]
)
def test_keeping_one_checkpoint_is_refused_with_a_fix_that_is_accepted(override: str) -> None:
    with pytest.raises(GrpoPreflightError) as error:
        _job(override)
    message = str(error.value)
    assert "preemption during that save" in message or "deletes the only checkpoint" in message
    assert "'trainer.max_actor_ckpt_to_keep=2'" in message
    job = _job("trainer.max_actor_ckpt_to_keep=2")
    assert _runner_args(job.entrypoint)["--keep-checkpoints"] == "2"
    # verl 0.9.0 keeps the only checkpoint until the new one is saved: 1 is accepted there.
    safe = _job(override, verlRef="v0.9.0", verlImage="verlai/verl:vllm024.latest")
    if override.startswith("trainer.max_actor_ckpt_to_keep"):
        assert _runner_args(safe.entrypoint)["--keep-checkpoints"] == "1"


def test_the_runner_gets_the_runs_length() -> None:
    length = json.loads(_runner_args(_job().entrypoint)["--length"])
    assert length["total_training_steps"] is None and length["total_epochs"] >= 1
    longer = json.loads(
        _runner_args(_job("trainer.total_training_steps=40").entrypoint)["--length"]
    )
    assert longer["total_training_steps"] == 40
    assert "--keep-checkpoints" not in _runner_args(_job().entrypoint)


@pytest.mark.parametrize(
    ("override", "config"),
    [
        ("data.train_max_samples=512", {}),
        ("+data.gen_batch_size=64", {}),
        (None, {"job": json.dumps({"maxPromptLength": 256})}),
    ],
)
def test_what_changes_the_dataloaders_length_changes_the_runs_length(
    override: str | None, config: dict[str, str]
) -> None:
    # A finished run trains again only when its length changes (payloads/export/run_grpo.py).
    before = json.loads(_runner_args(_job().entrypoint)["--length"])
    values = {**GOOD, **{f"verl-gke:{k}": v for k, v in config.items()}}
    if override is not None:
        values["verl-gke:job"] = json.dumps({"extraOverrides": [override]})
    after_job = training_job(load_settings("a3u", values, offline=False).settings)
    assert json.loads(_runner_args(after_job.entrypoint)["--length"]) != before


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_the_length_keys_are_what_verls_dataloader_reads(release: str) -> None:
    # verl/trainer/ppo/ray_trainer.py _create_dataloader: the dataset's max_samples and the
    # dataloader's batch size; rl_dataset.py drops prompts over max_prompt_length when filtering.
    trainer = _verl_source(release, "trainer/ppo/ray_trainer.py")
    body = trainer[trainer.index("def _create_dataloader") :]
    body = body[: body.index("\n    def ", 1)]
    for key in DATALOADER_KEYS:
        assert f'self.config.data.get("{key.removeprefix("data.")}"' in body, key
    dataset = _verl_source(release, "utils/dataset/rl_dataset.py")
    assert "self.max_prompt_length" in dataset and "filter_overlong_prompts" in dataset


@pytest.mark.parametrize(
    ("overrides", "alpha"),
    [
        ((), None),
        (("actor_rollout_ref.model.lora_rank=32",), "16"),
        (("actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.lora_alpha=64"), "64"),
    ],
)
def test_a_lora_runs_alpha_reaches_the_export(
    overrides: tuple[str, ...], alpha: str | None
) -> None:
    assert _runner_args(_job(*overrides).entrypoint).get("--lora-alpha") == alpha


def _verl_source(release: str, relative: str) -> str:
    return verl_installed(release, f"verl/{relative}").read_text()


def _save_checkpoint_calls(release: str) -> tuple[str, list[tuple[int, str]]]:
    source = _verl_source(release, "utils/checkpoint/fsdp_checkpoint_manager.py")
    save = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef) and n.name == "save_checkpoint"
    )
    calls = [
        (n.lineno, n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
        for n in ast.walk(save)
        if isinstance(n, ast.Call)
    ]
    return source, calls


def test_verl_061_removes_the_previous_checkpoint_before_it_writes_the_next() -> None:
    source, calls = _save_checkpoint_calls("0.6.1")
    removal = min(line for line, name in calls if name == "remove_previous_save_local_path")
    first_write = min(line for line, name in calls if name == "local_mkdir_safe")
    assert removal < first_write
    # The keep count applies to this process's own saves only (kept in memory).
    assert "self.previous_saved_paths.append(local_path)" in source


def test_verl_090_registers_the_new_checkpoint_before_it_removes_the_last() -> None:
    _, calls = _save_checkpoint_calls("0.9.0")
    names = [name for _, name in sorted(calls)]
    assert "remove_previous_save_local_path" not in names
    assert names.index("local_mkdir_safe") < names.index("register_checkpoint")
    manager = _verl_source("0.9.0", "utils/checkpoint/checkpoint_manager.py")
    assert "max_ckpt_to_keep > 1" in manager  # ensure_checkpoint_capacity leaves 1 alone


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_verl_builds_no_reference_model_for_lora(release: str) -> None:
    """The memory fit's LoRA terms (training/memory_fit.py): verl's trainer sets ref_in_actor from
    lora_rank > 0 (or an adapter path) and then builds no reference worker; the actor computes
    the reference log-probs with its adapter disabled. torchdata (the trainer's import) is not in
    the check virtualenvs, so the trainer's source is read, not run."""
    trainer = ast.parse(_verl_source(release, "trainer/ppo/ray_trainer.py"))
    assigned = [
        ast.unparse(n.value)
        for n in ast.walk(trainer)
        if isinstance(n, ast.Assign)
        and any(ast.unparse(t) in ("self.ref_in_actor", "lora_rank") for t in n.targets)
    ]
    assert any("lora_rank" in a and "> 0" in a for a in assigned), assigned
    conditions = [ast.unparse(n.test) for n in ast.walk(trainer) if isinstance(n, ast.If)]
    assert "self.use_reference_policy and (not self.ref_in_actor)" in conditions


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_verl_restores_the_dataloader_position_on_resume(release: str) -> None:
    """What the runner says on resuming on changed data (run_grpo.data_change_note): verl's
    _load_checkpoint loads the step's data.pt into the train dataloader, at 0.9.0 except at an
    epoch boundary of the (new) dataloader. torchdata, which runs the restore, is not in the
    check virtualenvs, so the trainer's source is read, not run."""
    trainer = ast.parse(_verl_source(release, "trainer/ppo/ray_trainer.py"))
    load = next(
        n
        for n in ast.walk(trainer)
        if isinstance(n, ast.FunctionDef) and n.name == "_load_checkpoint"
    )
    code = ast.unparse(load)
    assert "self.train_dataloader.load_state_dict(dataloader_state_dict)" in code
    assert "os.path.join(global_step_folder, 'data.pt')" in code
    assert ("at_epoch_boundary" in code) is (release == "0.9.0")

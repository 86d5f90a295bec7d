"""Steps 3 and 4 of the rehearsal: the datasets and dataloaders with the trainer's own method,
the run's length as fit() walks it, and whether a save leaves the tracker verl resumes from.
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

from rehearsal_common import (
    ProblemFoundError,
    fix_for,
    line_of,
    problem_entry,
    setting_for,
    verl_function,
    verl_namespace,
    verl_source,
)


def _rows_in(files: Any) -> int:
    import pyarrow.parquet as pq

    paths = [files] if isinstance(files, str) else list(files)
    return sum(pq.ParquetFile(str(p)).metadata.num_rows for p in paths)


def uses_v1(config: Any) -> bool:
    # verl 0.9.0 main_ppo.main: `if config.trainer.use_v1: run_ppo(config, TaskRunnerV1)`;
    # 0.6.1 has no such key and always runs RayPPOTrainer.
    return bool(config.trainer.get("use_v1", False))


def build_dataloaders(config: Any, tokenizer: Any, record: dict[str, Any]) -> types.SimpleNamespace:
    """The trainer's own method on a stand-in for the trainer object: it builds the datasets
    (create_rl_dataset: filter_overlong_prompts, truncation, max_samples), the sampler
    (create_rl_sampler), the StatefulDataLoaders and total_training_steps."""
    trainer = types.SimpleNamespace(config=config, tokenizer=tokenizer, processor=None)
    if uses_v1(config):
        module, method = "verl.trainer.ppo.v1.trainer_base", "PPOTrainer._init_dataloader"
        # PPOTrainer.__init__ sets these two before init() calls _init_dataloader.
        trainer.trainer_mode = config.trainer.v1.trainer_mode
        trainer.parameter_sync_step = config.trainer.v1.get(trainer.trainer_mode, {}).get(
            "parameter_sync_step", 1
        )
        arguments: tuple[Any, ...] = ()
    else:
        module, method = "verl.trainer.ppo.ray_trainer", "RayPPOTrainer._create_dataloader"
        # 0.6.1 imports create_rl_dataset/create_rl_sampler from main_ppo inside the method.
        verl_namespace("verl.trainer.main_ppo")
        arguments = (None, None, None, None)
    try:
        verl_function(module, method)(trainer, *arguments)
    except (AssertionError, ValueError) as error:
        # AssertionError "Train dataloader is empty!" (drop_last=True); ValueError from the
        # sampler when no row is left (RandomSampler: num_samples=0).
        kept = len(getattr(trainer, "train_dataset", []) or [])
        if isinstance(error, ValueError) and kept:
            raise
        message = f"{type(error).__name__}: {error} ({module}.{method})"
        raise _too_few_rows(config, kept, message) from error
    trainer.method = f"{module}.{method}"
    record["data"] = {
        "train_rows": _rows_in(config.data.train_files),
        "train_rows_kept": len(trainer.train_dataset),
        "val_rows": _rows_in(config.data.val_files),
        "val_rows_kept": len(trainer.val_dataset),
    }
    return trainer


def _too_few_rows(config: Any, kept: int, message: str) -> ProblemFoundError:
    """Fewer rows than one batch left after RLHFDataset.maybe_filter_out_long_prompts, which
    counts a row whose prompt it cannot read or template as too long (its doc2len returns
    max_prompt_length + 1 on any exception, rl_dataset.py 0.6.1 and 0.9.0): with no prompt
    column every row goes."""
    import pyarrow.parquet as pq

    files = config.data.train_files
    first = str(files if isinstance(files, str) else next(iter(files)))
    columns = pq.read_schema(first).names
    prompt_key = str(config.data.prompt_key)
    rows = f"{kept} of {_rows_in(files)} training rows are left after verl's filtering"
    if prompt_key not in columns:
        return ProblemFoundError(
            "data.prompt_key",
            prompt_key,
            f"{message}: {rows}: the parquet has no column {prompt_key!r} (its columns: "
            f"{columns}), so verl's filter drops every row",
            f"data.prompt_key one of {columns}, or remove the override",
        )
    batch = config.data.get("gen_batch_size") or config.data.train_batch_size
    if kept < _rows_in(files):  # the filter dropped rows: the prompt limit is what to change
        return ProblemFoundError(
            "data.max_prompt_length",
            config.data.max_prompt_length,
            f"{message}: {rows} (data.filter_overlong_prompts), fewer than one batch of {batch}",
            "a data.max_prompt_length that keeps a batch, or a dataset with more rows",
        )
    return ProblemFoundError(
        "data.train_batch_size",
        batch,
        f"{message}: {rows}, fewer than one batch of {batch}",
        "a data.train_batch_size of at most the rows, or a dataset with more rows",
    )


RESUME_PATH = "trainer.resume_from_path"
# What resume_from_path names: a step folder verl's _save_checkpoint wrote under
# trainer.default_local_dir (ray_trainer.py: global_step_{self.global_steps}).
_SAVED_STEP = "<run folder>/global_step_<N>"


def _trainer_module(config: Any) -> tuple[str, str]:
    if uses_v1(config):
        return "verl.trainer.ppo.v1.trainer_base", "PPOTrainer"
    return "verl.trainer.ppo.ray_trainer", "RayPPOTrainer"


def start_step(
    config: Any, trainer: types.SimpleNamespace, context: dict[str, Any], record_notes: list[str]
) -> int:
    """The step every attempt of this command starts from, by the trainer's own _load_checkpoint
    (RayPPOTrainer, ray_trainer.py at 0.6.1 and 0.9.0; PPOTrainer, v1/trainer_base.py at 0.9.0)
    on the stand-in trainer with trainer.default_local_dir an empty folder and worker groups that
    load nothing. resume_mode auto or disable: 0, a fresh start (the record is a fresh run's; the
    runner reads the run folder's latest_checkpointed_iteration.txt when an attempt starts, and
    resumes_end_where_fresh_runs_end checks that a resume at any step the run saves ends where
    the fresh run ends). resume_path: the step in resume_from_path, for every attempt (verl
    asserts it is a str naming global_step_<N>)."""
    import tempfile

    from omegaconf import OmegaConf, open_dict

    module, owner = _trainer_module(config)
    with tempfile.TemporaryDirectory(prefix="rehearsal-resume-") as folder:
        copy = OmegaConf.create(OmegaConf.to_container(config))
        with open_dict(copy):
            copy.trainer.default_local_dir = folder
        loader = types.SimpleNamespace(**vars(trainer))
        loader.config, loader.global_steps, loader.use_critic = copy, 0, False
        loader.actor_rollout_wg = types.SimpleNamespace(load_checkpoint=lambda *a, **k: None)
        # A resume_from_path visible here with a data.pt: the trainer's dataloader stays as built.
        loader.train_dataloader = types.SimpleNamespace(load_state_dict=lambda state: None)
        try:
            verl_function(module, f"{owner}._load_checkpoint")(loader)
        except AssertionError as error:
            where = f"{module.replace('.', '/')}.py {owner}._load_checkpoint"
            raise ProblemFoundError(
                RESUME_PATH,
                OmegaConf.select(config, RESUME_PATH),
                f"AssertionError: {error} ({where}, with trainer.resume_mode = resume_path)",
                f"{fix_for(context, RESUME_PATH, _SAVED_STEP)} (a folder verl saved), or "
                f"{fix_for(context, 'trainer.resume_mode', None)}",
            ) from error
    step = int(loader.global_steps or 0)
    if str(config.trainer.resume_mode) == "resume_path":
        _resume_folder_found(str(config.trainer.resume_from_path), context, record_notes)
    return step


def _resume_folder_found(path: str, context: dict[str, Any], notes: list[str]) -> None:
    """verl's workers load <resume_from_path>/actor (the trainer's _load_checkpoint hands it to
    actor_rollout_wg.load_checkpoint) on the GPUs. Checked where the path's mount is visible
    (the rehearsal Job mounts /data and, read only, /checkpoints); else a note."""
    folder = Path(os.path.abspath(path))
    top = Path(folder.anchor) / folder.parts[1] if len(folder.parts) > 1 else folder
    if not top.is_dir():
        notes.append(f"{RESUME_PATH} {path}: {top} is not mounted here, not checked")
        return
    if (folder / "actor").is_dir():
        return
    raise ProblemFoundError(
        RESUME_PATH,
        path,
        f"{folder / 'actor'} does not exist: every attempt's workers load the actor from there "
        "(the trainer's _load_checkpoint: actor_rollout_wg.load_checkpoint(<path>/actor))",
        f"a global_step_<N> folder verl saved (with its actor/ folder) for {RESUME_PATH}, or "
        f"{fix_for(context, 'trainer.resume_mode', None)}",
    )


def _legacy_fit(per_epoch: int, epochs: int, total: int, save_freq: int, resumed: int) -> tuple:
    """RayPPOTrainer.fit (0.6.1 and 0.9.0's legacy trainer): global_steps = the resumed step
    + 1; `for epoch in range(total_epochs)` (0.9.0: from current_epoch = global_steps //
    len(train_dataloader), 0.6.1: from 0) `for batch_dict in self.train_dataloader`, whose first
    pass after a resume yields what the saved StatefulDataLoader state has left of its epoch;
    is_last_step = global_steps >= total_training_steps; a save when save_freq > 0 and
    (is_last_step or global_steps % save_freq == 0); return after the last step's save."""
    first = resumed // per_epoch if _resumes_at_its_epoch() else 0
    left = (per_epoch - resumed % per_epoch) % per_epoch if resumed else per_epoch
    step, saves = resumed + 1, []
    for epoch in range(first, epochs):
        for _batch in range(left if epoch == first else per_epoch):
            is_last_step = step >= total
            if save_freq > 0 and (is_last_step or step % save_freq == 0):
                saves.append(step)
            step += 1
            if is_last_step:
                return step - 1, saves
    return step - 1, saves


def _resumes_at_its_epoch() -> bool:
    source = verl_source("verl.trainer.ppo.ray_trainer").read_text()
    return "current_epoch = self.global_steps // len(self.train_dataloader)" in source


def _v1_fit(steps_per_epoch: int, epochs: int, total: int, save_freq: int, resumed: int) -> tuple:
    """PPOTrainer.fit (0.9.0 verl/trainer/ppo/v1/trainer_base.py, trainer.use_v1):
    current_epoch = resumed // steps_per_epoch, global_steps = resumed + 1;
    `while current_epoch < total_epochs and global_steps <= total_training_steps`; the same
    is_last_step and save condition; current_epoch = (global_steps - 1) // steps_per_epoch."""
    step, epoch, saves = resumed + 1, resumed // steps_per_epoch, []
    while epoch < epochs and step <= total:
        is_last_step = step >= total
        if save_freq > 0 and (is_last_step or step % save_freq == 0):
            saves.append(step)
        step += 1
        epoch = (step - 1) // steps_per_epoch
    return step - 1, saves


def _fit_loop(config: Any, trainer: types.SimpleNamespace) -> tuple[Any, int, str, str]:
    """The trainer's fit() walk, steps per epoch, how they were counted, and the loop's line."""
    if uses_v1(config):
        per_epoch = int(trainer.steps_per_epoch)
        loop = line_of("verl.trainer.ppo.v1.trainer_base", "while current_epoch < self.config")
        return (
            _v1_fit,
            per_epoch,
            f"len(train_dataset) // data.train_batch_size = {per_epoch}",
            loop,
        )
    per_epoch = len(trainer.train_dataloader)
    loop = line_of("verl.trainer.ppo.ray_trainer", "for epoch in range(self.config.trainer.total")
    return _legacy_fit, per_epoch, f"len(train_dataloader) = {per_epoch}", loop


def _validates_only(config: Any) -> str | None:
    """The line of fit()'s early return when it only validates: RayPPOTrainer.fit (0.6.1 and
    0.9.0 ray_trainer.py) and PPOTrainer.fit (0.9.0 v1/trainer_base.py) run `if
    val_before_train: <validate>; if val_only: return` before the first step (0.6.1 also needs
    a val_reward_fn, which main_ppo always loads)."""
    trainer = config.trainer
    if not (trainer.get("val_before_train", True) and trainer.get("val_only", False)):
        return None
    module = (
        "verl.trainer.ppo.v1.trainer_base" if uses_v1(config) else "verl.trainer.ppo.ray_trainer"
    )
    return line_of(module, 'if self.config.trainer.get("val_only", False):')


def _val_only_problem(context: dict[str, Any], resumed: int, where: str) -> dict[str, Any]:
    key = "trainer.val_only"
    return problem_entry(
        setting_for(context, key),
        True,
        f"trainer.val_only = True with trainer.val_before_train = True: verl's fit() validates "
        f"and returns before step {resumed + 1}, so nothing trains and no checkpoint is saved "
        f"({where})",
        fix_for(context, key, None),
    )


def _length_fields(
    config: Any,
    trainer: types.SimpleNamespace,
    loop: tuple[int, str, str],
    walked: tuple[int, int, list, int],
) -> dict[str, Any]:
    """The record's `length`; `loop`: steps per epoch, how they were counted, fit()'s line;
    `walked`: the start, the last step, the saves, where a finished run started again ends."""
    per_epoch, counted, where = loop
    resumed, last, saves, restarted = walked
    epochs = int(config.trainer.total_epochs)
    override = config.trainer.total_training_steps
    decided = f"{counted} x trainer.total_epochs {epochs}"
    if override is not None:
        decided = f"trainer.total_training_steps = {override}"
    return {
        "steps_per_epoch": per_epoch,
        "epochs": epochs,
        "total_training_steps": int(trainer.total_training_steps),
        "source": f"{trainer.method}: {counted}; total_training_steps from {decided}; fit() loop "
        f"{where} ends at step {last}",
        "last_step": last,
        "save_steps": saves,
        "final_save": bool(saves) and saves[-1] == last,
        "trainer": "v1" if uses_v1(config) else "RayPPOTrainer",
        "resumed_from": resumed,
        "steps_to_train": last - resumed,
        "restarted_ends_at": restarted,
    }


def run_length(
    config: Any, trainer: types.SimpleNamespace, context: dict[str, Any], record: dict[str, Any]
) -> list[dict[str, Any]]:
    """The run's length from the step every attempt starts at (start_step): fit()'s walk."""
    epochs, save_freq = int(config.trainer.total_epochs), int(config.trainer.save_freq)
    total = int(trainer.total_training_steps)
    fit, per_epoch, counted, loop = _fit_loop(config, trainer)
    resumed = start_step(config, trainer, context, record["notes"])
    last, saves = fit(per_epoch, epochs, total, save_freq, resumed)
    validates_only = _validates_only(config)
    if validates_only is not None:
        last, saves, loop = resumed, [], validates_only
    override = config.trainer.total_training_steps
    # A finished run started again: the runner does not (its latest checkpoint is last_step).
    restarted = fit(per_epoch, epochs, total, save_freq, last)[0] if last else last
    walked = (resumed, last, saves, restarted)
    record["length"] = _length_fields(config, trainer, (per_epoch, counted, loop), walked)
    if resumed:
        record["notes"].append(
            f"every attempt resumes from step {resumed} (trainer.resume_mode = resume_path, "
            f"{config.trainer.resume_from_path}), a restart after a failure too, and trains "
            f"to step {last}"
        )
    if restarted != last:
        record["notes"].append(
            f"a finished run started again would train to step {restarted} (verl's fit() "
            f"{loop}); the runner does not start it: its latest checkpoint is step {last}"
        )
    if validates_only is not None:
        return [_val_only_problem(context, resumed, validates_only)]
    if resumed and last == resumed:
        return [_nothing_after(context, resumed, total, loop)]
    if str(config.trainer.resume_mode) == "auto" and last:
        problems = resumes_end_where_fresh_runs_end(
            fit, (per_epoch, epochs, total, save_freq), (last, saves), context, loop
        )
        if problems and not context.get("rows_are_the_runs", True):
            record["notes"].append(
                "on these rows, not the run's own (context rows_are_the_runs false): "
                f"{problems[0]['message']}"
            )
            return []
        if problems:
            problems[0]["value"] = override
            return problems
    return _ends_short(
        fit,
        (per_epoch, epochs, total, save_freq),
        (resumed, last, saves),
        context,
        record,
        (counted, loop, override),
    )


def _ends_short(
    fit: Any,
    lengths: tuple[int, int, int, int],
    walked: tuple[int, int, list],
    context: dict[str, Any],
    record: dict[str, Any],
    said: tuple[str, str, Any],
) -> list[dict[str, Any]]:
    """No step trained, or fit() ending before total_training_steps without saving its last
    step; the fix walked through the same loop. `said`: how the steps were counted, fit()'s
    line, the override."""
    per_epoch, epochs, total, save_freq = lengths
    resumed, last, saves = walked
    counted, loop, override = said
    if last == 0:
        message = f"verl trains no step: total_training_steps = {total}, total_epochs = {epochs}"
        fixed = per_epoch * epochs
    elif save_freq > 0 and saves[-1:] != [last]:
        saved = f"its last checkpoint is step {saves[-1]}" if saves else "it saves no checkpoint"
        message = (
            f"verl's fit() ends at step {last} ({counted} x {epochs} epochs) before "
            f"total_training_steps = {total} is reached, so is_last_step never holds and "
            f"{saved} (trainer.save_freq = {save_freq})"
        )
        fixed = last
        if not context.get("rows_are_the_runs", True):
            record["notes"].append(
                f"on these rows, not the run's own (context rows_are_the_runs false): {message}; "
                "the run's length is rehearsed on its own rows in the training image"
            )
            return []
    else:
        return []
    # The fix, walked through the same loop: it must end at a step it saves.
    end, fixed_saves = fit(per_epoch, epochs, fixed, save_freq, resumed)
    accepted = end > resumed and (save_freq <= 0 or fixed_saves[-1:] == [end])
    key = "trainer.total_training_steps"
    return [
        problem_entry(
            setting_for(context, key),
            override,
            f"{message} ({loop})",
            fix_for(context, key, fixed) if accepted else f"a dataset of more rows than {key}",
        )
    ]


def _nothing_after(context: dict[str, Any], resumed: int, total: int, loop: str) -> dict:
    key = RESUME_PATH
    return problem_entry(
        setting_for(context, key),
        None,
        f"verl's fit() resumes every attempt at step {resumed} ({key}) and trains no step: "
        f"total_training_steps = {total} ({loop})",
        f"{fix_for(context, 'trainer.total_training_steps', resumed + 1)} or more, or a "
        f"{key} of an earlier step",
    )


def resumes_end_where_fresh_runs_end(
    fit: Any,
    lengths: tuple[int, int, int, int],
    fresh: tuple[int, list],
    context: dict[str, Any],
    loop: str,
) -> list[dict[str, Any]]:
    """resume_mode auto: an attempt after a failure resumes from the latest step the run saved
    (find_latest_ckpt_path). Each such resume must end where the fresh run ends, or the runner
    (finished: the latest checkpoint is last_step) and verl disagree. 0.6.1's fit() runs
    `for epoch in range(total_epochs)` from epoch 0 after a resume, so a run that ends when its
    data runs out (before total_training_steps) trains epochs again after a resume past its
    first epoch; fit() ending at total_training_steps (is_last_step) ends there from any resume.
    `lengths`: steps per epoch, epochs, total_training_steps, save_freq; `fresh`: its end and
    saves."""
    per_epoch, epochs, total, save_freq = lengths
    last, saves = fresh
    moved = [(at, fit(per_epoch, epochs, total, save_freq, at)[0]) for at in saves if at < last]
    moved = [(at, end) for at, end in moved if end != last]
    if not moved:
        return []
    at, end = moved[0]
    key = "trainer.total_training_steps"
    fixed_end, fixed_saves = fit(per_epoch, epochs, last, save_freq, 0)
    fixed_resumes = {fit(per_epoch, epochs, last, save_freq, r)[0] for r in fixed_saves if r < last}
    accepted = fixed_end == last and fixed_resumes <= {last} and fixed_saves[-1:] == [last]
    return [
        problem_entry(
            setting_for(context, key),
            None,
            f"a fresh start ends at step {last}, but resumed from step {at} (a checkpoint it "
            f"saves, where an attempt after a failure resumes) verl's fit() ends at step {end} "
            f"({loop}): total_training_steps = {total} is past the end of the data, so the "
            "loop ends when the data runs out, which a resume moves",
            fix_for(context, key, last) if accepted else f"a dataset of more rows than {key}",
        )
    ]


ASYNC_SAVE = "actor_rollout_ref.actor.checkpoint.async_save"


def save_writes_tracker(
    config: Any, trainer: types.SimpleNamespace, context: dict[str, Any], record: dict[str, Any]
) -> list[dict[str, Any]]:
    """The trainer's own _save_checkpoint (ray_trainer.py; 0.9.0's V1 trainer_base.py) on the
    stand-in trainer, with a worker group that saves nothing, into a temporary folder: verl's
    resume (find_latest_ckpt_path) and the runner's finished state read the
    latest_checkpointed_iteration.txt it writes; at 0.9.0 it skips that file when
    actor.checkpoint.async_save is true (a setting only Megatron's checkpoint manager acts on)."""
    import tempfile

    from omegaconf import OmegaConf, open_dict

    if int(config.trainer.save_freq) <= 0:
        return []
    module = (
        "verl.trainer.ppo.v1.trainer_base" if uses_v1(config) else "verl.trainer.ppo.ray_trainer"
    )
    owner = "PPOTrainer" if uses_v1(config) else "RayPPOTrainer"
    with tempfile.TemporaryDirectory(prefix="rehearsal-save-") as folder:
        copy = OmegaConf.create(OmegaConf.to_container(config))
        with open_dict(copy):
            copy.trainer.default_local_dir, copy.trainer.default_hdfs_dir = folder, None
        saver = types.SimpleNamespace(**vars(trainer))
        saver.config, saver.global_steps, saver.use_critic = copy, 1, False
        saver.actor_rollout_wg = types.SimpleNamespace(save_checkpoint=lambda *a, **k: None)
        verl_function(module, f"{owner}._save_checkpoint")(saver)
        written = (Path(folder) / "latest_checkpointed_iteration.txt").is_file()
    record["length"]["tracker_written"] = written
    if written:
        return []
    key = ASYNC_SAVE
    return [
        problem_entry(
            setting_for(context, key),
            OmegaConf.select(config, key),
            f"verl's {owner}._save_checkpoint ({module.replace('.', '/')}.py) writes no "
            "latest_checkpointed_iteration.txt with this config: verl's resume "
            "(find_latest_ckpt_path) finds no checkpoint, every attempt starts at step 0, and "
            "the run never counts as finished",
            fix_for(context, key, None),
        )
    ]

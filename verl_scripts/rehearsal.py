"""The rehearsal: what verl's trainer does up to its first rollout, with verl's own code, on the
job's real inputs. Runs inside verl (the training image; locally a verl virtualenv), imports
nothing from this project, and writes the record docs/rehearsal.md describes.

    python3 rehearsal.py --out RECORD.json [--reward-samples 4] [--context JSON]
        [--model-files DIR] [--stand-in-model JSON] [--offline-plan] -- <main_ppo's overrides>
    python3 rehearsal.py --out RECORDS.json --cases CASES.json      (several cases, one process)

Steps, each verl's code where it runs here (file and function cited at each):
1. compose the overrides with verl's ppo_trainer config and run main_ppo's validation;
2. load the tokenizer (verl.utils.hf_tokenizer) and model config (AutoConfig) as TaskRunner does;
3. build the train/val datasets and dataloaders with the trainer's own method
   (RayPPOTrainer._create_dataloader; at 0.9.0 with trainer.use_v1 the V1 trainer's
   _init_dataloader), which also decides total_training_steps;
4. walk fit()'s loop condition (cited) to the step at which verl stops and the steps it saves at;
5. load the reward as verl does and score real rows with their ground truth and a wrong answer;
6. run verl's rollout length checks on the composed rollout config and the model config;
7. compare the image's vllm/transformers/torch with verl's (and vLLM's) declared requirements.

Where a verl module does not import here (a minimal virtualenv without vLLM, peft, ...), its
statements are loaded one by one, skipping the imports that fail, and the functions named are
verl's own source run in that namespace; the record's notes say so.

--context JSON: {"settings": {"<hydra key>": "<setting, e.g. verl-gke:job.saveFreq>"},
                 "append": "<setting path a new override goes to>", "model": "<hub id>",
                 "chat_model": "<a model of the program's table with a chat template>",
                 "rows_are_the_runs": false (stand-in rows of another size: a run that
                 outlasts them is a note, not a problem)}
--model-files DIR: the model's files but its weights (config, tokenizer, chat template; data
    prep's inputs Job, the same commit as the weights), read in place of
    actor_rollout_ref.model.path: nothing here reads a weight (step 2 is hf_tokenizer and
    AutoConfig), so the rehearsal runs while the weights download.
--stand-in-model JSON: {"dir": DIR, "max_position_embeddings": N, "vocab_size": N,
                        "chat_template": bool}: a tiny tokenizer and config written to DIR and
    used instead of actor_rollout_ref.model.path (the offline plan, when the model is absent).
--cases CASES.json: {"parquet": {"<dest.parquet>": "<rows.jsonl>" or {"rows": ..., "at_least": N}},
    "cases": {"<name>": {"overrides": [...], "context": {...}, "stand_in_model": {...},
    "model_files": DIR, "offline_plan": bool}}};
    --out then holds {"<name>": <record>}.
--offline-plan: not the training image: a package missing here is a note, not a problem.
Exit status 0 when every case is ok, 1 when a problem was found, 2 on bad arguments.

This file is the command line and the order of the steps; the steps are the modules beside it,
imported by plain name (this folder is sys.path[0]; the rehearsal Job mounts them flat at
/scripts, config/rehearsal_scripts.py read_scripts): rehearsal_common (verl's code, the config, the
problem shape), rehearsal_versions (7), rehearsal_model (2), rehearsal_length (3, 4),
rehearsal_checks (1b, 5, 6).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from rehearsal_checks import (
    dynamic_batch_checks,
    lora_weight_sync,
    loss_functions,
    rollout_checks,
    rollout_lengths_follow_data,
    score_rows,
)
from rehearsal_common import (
    MODEL_PATH,
    PARTIAL,
    ProblemFoundError,
    compose,
    named_override,
    problem_entry,
    setting_for,
    validate,
)
from rehearsal_length import build_dataloaders, run_length, save_writes_tracker
from rehearsal_model import check_chat_template, load_model, write_stand_in_model
from rehearsal_versions import installed, versions_and_requirements

SCHEMA = 1


def _with_stand_in(overrides: list[str], stand_in: dict[str, Any], notes: list[str]) -> list[str]:
    folder = write_stand_in_model(stand_in)
    notes.append(
        f"the model is a stand-in ({folder}): a word-level tokenizer, chat template "
        f"{bool(stand_in.get('chat_template', True))}, and a config with the model's context and "
        "vocabulary; prompt token counts are words, not the model's tokens"
    )
    kept = [o for o in overrides if not o.lstrip("+").startswith(f"{MODEL_PATH}=")]
    return [*kept, f"{MODEL_PATH}={folder}"]


def _with_model_files(overrides: list[str], folder: str, notes: list[str]) -> list[str]:
    notes.append(
        f"the tokenizer and model config are read from {folder}, the model's files but its "
        "weights (data prep's inputs Job, the same commit as the weights); no weight is read"
    )
    kept = [o for o in overrides if not o.lstrip("+").startswith(f"{MODEL_PATH}=")]
    return [*kept, f"{MODEL_PATH}={folder}"]


def _resolved(overrides: list[str]) -> Any:
    from omegaconf import OmegaConf

    config = compose(overrides)
    OmegaConf.resolve(config)  # TaskRunner.run resolves every interpolation first
    return config


def _composed(overrides: list[str], offline: bool, notes: list[str]) -> Any:
    try:
        config = _resolved(overrides)
        try:
            validate(config)
        except ValueError as error:
            # verl 0.9.0's validate_config checks a LoRA rank against vLLM's limit through
            # verl.third_party.vllm, which raises when vLLM is not installed: in a local
            # virtualenv (not the image) the rest of the checks run without the LoRA rank.
            if not (offline and installed("vllm") is None and "vllm version None" in str(error)):
                raise
            notes.append(
                f"verl's LoRA rank check needs vLLM, not installed here ({error}); the other "
                "config checks ran with actor_rollout_ref.model.lora_rank=0"
            )
            validate(_resolved([*overrides, "actor_rollout_ref.model.lora_rank=0"]))
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        key, value = named_override(overrides, message) or ("verl-gke:job", None)
        raise ProblemFoundError(key, value, message, f"correct or remove {key}") from error
    return config


def _steps(
    overrides: list[str],
    args: argparse.Namespace,
    record: dict[str, Any],
    stage: list[str],
    problems: list[dict[str, Any]],
) -> None:
    """The rehearsal's steps in the trainer's order, adding to `problems`; `stage` names the
    step running."""
    notes, context = record["notes"], args.context
    stage[0] = "composing and validating the config (main_ppo)"
    config = _composed(overrides, args.offline_plan, notes)
    versions_and_requirements(config, args.offline_plan, record, problems)
    stage[0] = "looking up the loss functions (core_algos)"
    problems += loss_functions(config, context)
    stage[0] = "splitting a full-length batch by token count (seqlen_balancing)"
    problems += dynamic_batch_checks(config, context)
    stage[0] = "loading the tokenizer and model config (TaskRunner.run)"
    tokenizer, hf_config = load_model(config, record)
    check_chat_template(config, tokenizer, context)
    stage[0] = "building the datasets and dataloaders (the trainer's own method)"
    trainer = build_dataloaders(config, tokenizer, record)
    problems += run_length(config, trainer, context, record)
    problems += save_writes_tracker(config, trainer, context, record)
    stage[0] = "loading and calling the reward"
    problems += score_rows(config, trainer, args.reward_samples, context, record)
    stage[0] = "checking the rollout's lengths"
    problems += rollout_lengths_follow_data(config, context)
    problems += lora_weight_sync(config, context)
    problems += rollout_checks(config, hf_config, context, record, notes)


def rehearse(overrides: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One record. `args`: reward_samples, context, stand_in_model, offline_plan."""
    notes: list[str] = []
    record: dict[str, Any] = {"schema": SCHEMA, "ok": False, "verl": installed("verl")}
    for field in ("versions", "requirements", "model", "data", "length", "reward", "rollout"):
        record[field] = None
    record["notes"] = notes
    problems: list[dict[str, Any]] = []
    stage = ["writing the stand-in model"]
    try:
        if args.stand_in_model is not None:
            overrides = _with_stand_in(overrides, args.stand_in_model, notes)
        elif args.model_files is not None:
            overrides = _with_model_files(overrides, args.model_files, notes)
        _steps(overrides, args, record, stage, problems)
    except ProblemFoundError as problem:
        setting = setting_for(args.context, problem.key, problem.key)
        problems.append(problem_entry(setting, problem.value, problem.message, problem.fix))
    except Exception as error:  # verl refused something this rehearsal has no rule for
        message = f"verl refused the job while {stage[0]}: {type(error).__name__}: {error}"
        key, value = named_override(overrides, message) or ("rehearsal", None)
        fix = f"correct or remove {key}" if value is not None else None
        problems.append(
            problem_entry(
                setting_for(args.context, key, key),
                value,
                message,
                fix or "see verl's message; the traceback is in notes",
            )
        )
        notes.append(traceback.format_exc(limit=-8))
    if record["versions"] is None:
        versions_and_requirements(None, args.offline_plan, record, problems)
    notes.extend(PARTIAL.values())
    record["problems"] = problems
    record["ok"] = not problems
    return record


def write_parquet(destination: Path, source: str | dict[str, Any]) -> None:
    """JSON lines (rows in verl's parquet shape) -> parquet, for the committed example rows;
    {"rows": FILE, "at_least": N} repeats them (a fresh extra_info.index each) to N rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = {"rows": source} if isinstance(source, str) else source
    lines = Path(spec["rows"]).read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    wanted = max(len(rows), int(spec.get("at_least") or 0))
    repeated = [json.loads(json.dumps(rows[i % len(rows)])) for i in range(wanted)]
    for index, row in enumerate(repeated):
        row.setdefault("extra_info", {})["index"] = index
    destination.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(repeated), str(destination))


def _arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    overrides: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, overrides = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--reward-samples", type=int, default=4)
    parser.add_argument("--context", type=json.loads, default={})
    parser.add_argument("--model-files", default=None)
    parser.add_argument("--stand-in-model", type=json.loads, default=None)
    parser.add_argument("--offline-plan", action="store_true")
    parser.add_argument("--cases", type=Path, default=None)
    return parser.parse_args(argv), overrides


def main(argv: list[str]) -> int:
    args, overrides = _arguments(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.cases is not None:
        request = json.loads(args.cases.read_text())
        cases = request["cases"]
        for destination, source in request.get("parquet", {}).items():
            write_parquet(Path(destination), source)
    else:
        cases = None
    # verl, Hydra and datasets print progress on stdout: the record alone goes there.
    with contextlib.redirect_stdout(sys.stderr):
        if cases is None:
            result = rehearse(overrides, args)
            ok = result["ok"]
        else:
            result = {}
            for name, case in cases.items():
                case_args = argparse.Namespace(
                    reward_samples=case.get("reward_samples", args.reward_samples),
                    context=case.get("context", {}),
                    stand_in_model=case.get("stand_in_model"),
                    model_files=case.get("model_files"),
                    offline_plan=case.get("offline_plan", args.offline_plan),
                )
                result[name] = rehearse(case["overrides"], case_args)
            ok = all(r["ok"] for r in result.values())
    text = json.dumps(result, indent=2, default=str)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

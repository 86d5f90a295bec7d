"""The offline plan's rehearsal: verl_scripts/rehearsal.py in a local verl virtualenv, on the
committed example rows, with a stand-in tokenizer and model config when the model is not here.

`offline_rehearsal(settings, spec)` gives the record (verl_scripts/rehearsal.py, docs/rehearsal.md)
or a plain "could not rehearse: <why>"; `rehearsal_lines(result)` says it in the plan's words.
It passes training.rehearsal_context's map (--context), as the rehearsal Job in the training image
does (manifests/rehearsal.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from config import run_inputs
from config.settings import StackSettings
from training.assembly import reward_overrides
from training.grpo_spec import GrpoSpec, hydra_overrides
from training.model_facts import ModelFacts, ModelFactsError, model_facts
from training.rehearsal_context import rehearsal_context

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "verl_scripts" / "rehearsal.py"
EXAMPLE_ROWS = REPO / "docs" / "examples" / "rows"
VENVS_ENV = "VERL_GKE_VERL_VENVS"
TIMEOUT_S = 300
# A verl commit the profiles pin -> the release whose virtualenv stands for it: ddbcdb7 lies on
# verl's main between v0.8.0 and v0.9.0 and carries 0.9.0's config (trainer.use_v1) and
# requirements (tests/test_verl_config_compose.py says how this was checked).
RELEASE_FOR_COMMIT = {"ddbcdb7": "0.9.0"}
_TAG = re.compile(r"v?(\d+\.\d+\.\d+)")


def local_release(verl_ref: str) -> str | None:
    """The verl release whose local virtualenv runs `verl_ref`'s code: a tag vX.Y.Z is X.Y.Z."""
    tag = _TAG.fullmatch(verl_ref)
    return tag.group(1) if tag else RELEASE_FOR_COMMIT.get(verl_ref)


def verl_venvs() -> Path:
    return Path(os.environ.get(VENVS_ENV) or REPO / ".venv-verl")


def rehearsal_site(release: str) -> Path | None:
    """The folder of requirements-rehearsal-<release>.txt's packages, when the release has such a
    file (None when it needs nothing beside its virtualenv)."""
    if not (REPO / f"requirements-rehearsal-{release}.txt").is_file():
        return None
    return verl_venvs() / "rehearsal" / release


def rehearsal_env(release: str) -> dict[str, str]:
    """The environment the rehearsal runs in locally: offline, with .venv-verl/rehearsal/<r>
    (requirements-rehearsal-<r>.txt) on PYTHONPATH."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    site = rehearsal_site(release)
    if site is not None and site.is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    return env


def local_overrides(
    overrides: list[str], data: Path, model: Path, reward_file: Path | None
) -> list[str]:
    """The job's overrides with the data files, the model and the reward file of this machine."""
    local = {
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "test.parquet"),
        "actor_rollout_ref.model.path": str(model),
    }
    result = []
    for override in overrides:
        key = override.lstrip("+").partition("=")[0]
        if key in local:
            override = f"{key}={local[key]}"
        elif reward_file is not None and key.endswith("custom_reward_function.path"):
            override = f"{key}={reward_file}"
        result.append(override)
    return result


def run_sized_rows(settings: StackSettings) -> tuple[int, str] | None:
    """(train rows, whose size) where the program knows the size of the run's train split:
    openai/gsm8k's (config/run_inputs.py, the dataset card); None for a Hub or bucket dataset,
    whose size only the data-prep Job sees."""
    if run_inputs.dataset_of(settings).kind != "gsm8k":
        return None
    return run_inputs.GSM8K_ROWS["train"], "openai/gsm8k's train split"


def _facts(settings: StackSettings) -> ModelFacts | None:
    """The model's facts as the plan has them (verl-gke:modelConfig or the committed table)."""
    try:
        return model_facts(settings)
    except ModelFactsError:
        return None


def _request(settings: StackSettings, spec: GrpoSpec, work: Path) -> dict[str, Any]:
    """The --cases request: the job's overrides on this machine's example rows (the train split
    repeated to the run's own size where the program knows it, so verl's dataloader counts the
    run's steps), stand-in model and reward file."""
    reward = run_inputs.reward_of(settings)
    overrides = local_overrides(
        [*hydra_overrides(spec), *reward_overrides(settings)],
        work / "data",
        work / "model",
        REPO / reward.file if reward is not None else None,
    )
    facts = _facts(settings)
    stand_in = {
        "dir": str(work / "model"),
        "max_position_embeddings": (facts.max_position_embeddings if facts else None) or 32768,
        "vocab_size": facts.arch.vocab_size if facts else 32000,
        "chat_template": True,
    }
    # At least one batch: the trainer refuses an empty dataloader.
    sized = run_sized_rows(settings)
    rows = {
        "train": max(spec.train_batch_size, sized[0] if sized else 0),
        "test": spec.train_batch_size,
    }
    return {
        "parquet": {
            str(work / "data" / f"{split}.parquet"): {
                "at_least": rows[split],
                "rows": str(EXAMPLE_ROWS / f"{split}.jsonl"),
            }
            for split in ("train", "test")
        },
        "cases": {
            "plan": {
                "overrides": overrides,
                "context": {
                    **rehearsal_context(spec, settings.model),
                    "rows_are_the_runs": run_inputs.dataset_of(settings).kind == "gsm8k",
                },
                "stand_in_model": stand_in,
                "offline_plan": True,
            }
        },
    }


def offline_rehearsal(settings: StackSettings, spec: GrpoSpec) -> dict[str, Any] | str:
    """The rehearsal's record for this job on the committed example rows, or why it could not
    run."""
    release = local_release(settings.verl_ref)
    if release is None:
        return f"could not rehearse: no local verl release stands for verlRef {settings.verl_ref}"
    python = verl_venvs() / release / "bin" / "python"
    if not python.is_file():
        return f"could not rehearse: no verl {release} virtualenv ({python}; `bash .ci/setup`)"
    site = rehearsal_site(release)
    if site is not None and not site.is_dir():
        return f"could not rehearse: no {site} (verl's dataset packages; `bash .ci/setup`)"
    with tempfile.TemporaryDirectory(prefix="verl-gke-rehearsal-") as folder:
        work = Path(folder)
        (work / "cases.json").write_text(json.dumps(_request(settings, spec, work)))
        out = work / "record.json"
        command = [str(python), str(SCRIPT), "--out", str(out), "--cases", str(work / "cases.json")]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=rehearsal_env(release),
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"could not rehearse: verl {release}'s rehearsal ran past {TIMEOUT_S} s"
        if done.returncode not in (0, 1) or not out.is_file():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            exited = f"verl {release}'s rehearsal exited {done.returncode}"
            return f"could not rehearse: {exited}: {tail}"
        record: dict[str, Any] = json.loads(out.read_text())["plan"]
    sized = run_sized_rows(settings)
    rows = max(spec.train_batch_size, sized[0] if sized else 0)
    # The plan's own key, beside the record's: what the example rows stood for.
    length_key = "trainer.total_training_steps"  # the key verl_scripts' run_length names
    record["offline"] = {
        "venv": str(python.parent.parent),
        "train_rows": rows,
        "sized_as": sized[1] if sized else None,
        # Without the run's row count, a length problem is one of the example rows, not the run.
        "unsized_length_setting": None
        if sized
        else rehearsal_context(spec)["settings"].get(length_key, length_key),
    }
    record["notes"].append(
        f"offline plan: verl {release} from {python.parent.parent}, on the committed example rows "
        f"({EXAMPLE_ROWS.relative_to(REPO)}, repeated to {rows} train rows); the run's own data, "
        "model and image are rehearsed in the training image before training"
    )
    return record


# Problems the offline rehearsal shows without refusing the job: they concern this machine, not
# the job. Every other problem is verl's refusal of the job's own settings.
NOT_CHECKED_HERE = {
    "verl-gke:verlImage": "the versions are this virtualenv's, not the image's; the training "
    "image's rehearsal reads the image's own",
    "rehearsal": "an error the rehearsal has no rule for, which this machine's partial "
    "virtualenv (no vLLM, peft, ...) or the stand-in model may cause; the training image's "
    "rehearsal runs it with the image's packages and the model",
}


UNSIZED = (
    "the run's length depends on its dataset's size, which only the data-prep Job sees; the "
    "training image's rehearsal counts it"
)


def _why_not_checked(result: dict[str, Any], problem: dict[str, Any]) -> str | None:
    """Why a problem of the offline rehearsal is not a refusal of the job; None when it is."""
    if problem["setting"] in NOT_CHECKED_HERE:
        return NOT_CHECKED_HERE[problem["setting"]]
    if problem["setting"] == (result.get("offline") or {}).get("unsized_length_setting"):
        return UNSIZED
    return None


def refusals(result: dict[str, Any] | str) -> list[dict[str, Any]]:
    """The problems by which verl refuses the job itself (exit status 2 in the plan)."""
    if isinstance(result, str):
        return []
    return [p for p in result["problems"] if _why_not_checked(result, p) is None]


def run_length_record(result: dict[str, Any] | str) -> dict[str, Any] | None:
    """The record, for the cost block, where its length is the run's: the train rows were the
    run's own number (run_sized_rows). None otherwise: the cost block then says it estimates."""
    if isinstance(result, str) or not (result.get("offline") or {}).get("sized_as"):
        return None
    return result


def _problem_line(problem: dict[str, Any]) -> str:
    return (
        f"{problem['setting']} = {problem['value']!r}: {problem['message']}. Fix: {problem['fix']}"
    )


def refusal_message(result: dict[str, Any] | str) -> str | None:
    """The plan's error when verl refuses the job, each problem with its fix; None when none."""
    refused = refusals(result)
    if not refused:
        return None
    assert isinstance(result, dict)
    lines = [
        f"the offline rehearsal (verl {result['verl']}'s own code, on the committed example "
        f"rows) refuses the GRPO job: {len(refused)} problem(s), nothing was created:",
        *(f"  - {_problem_line(p)}" for p in refused),
    ]
    return "\n".join(lines)


def _unchecked(result: dict[str, Any]) -> list[str]:
    """What the offline rehearsal could not check, and why."""
    lines = [
        f"{p['setting']}: {p['message']} ({why})"
        for p in result["problems"]
        if (why := _why_not_checked(result, p)) is not None
    ]
    # The script's own word that a length found on stand-in rows is not the run's (the context's
    # rows_are_the_runs false): shown, not refused.
    lines += [
        f"the run's length: {note.partition('): ')[2]} ({UNSIZED})"
        for note in result.get("notes") or []
        if "rows_are_the_runs false" in note
    ]
    # A resume_from_path under a mount this machine lacks (verl_scripts/rehearsal_length.py
    # _resume_folder_found): its actor/ folder is checked in the Job, which mounts it.
    lines += [
        f"{note} (the training image's rehearsal checks its actor/ folder)"
        for note in result.get("notes") or []
        if note.endswith("is not mounted here, not checked")
    ]
    lines.append(
        "the model's own tokenizer and chat template: the model is not downloaded for the plan, "
        "so a stand-in tokenizer (a word per token, a chat template) with the model's context "
        "and vocabulary was used"
    )
    missing = [r["package"] for r in result.get("requirements") or [] if r["found"] is None]
    if missing:
        lines.append(
            f"the image's {', '.join(sorted(set(missing)))}: not installed in this virtualenv"
        )
    lines.append("the run's own data and the image: the training image's rehearsal checks them")
    return lines


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def rehearsal_lines(result: dict[str, Any] | str) -> list[str]:
    """The offline rehearsal for the plan: what verl's code said, what it could not check and
    why, or why it could not run."""
    if isinstance(result, str):
        return [
            f"Rehearsal (offline): {result}; verl's checks run in the training image before "
            "training, and the whole run below is the program's estimate"
        ]
    refused = refusals(result)
    offline = result.get("offline") or {}
    lines = [
        f"Rehearsal (offline, verl {result['verl']}'s own code from {offline.get('venv')}, on the "
        "committed example rows): "
        + (f"verl refuses the job: {len(refused)} problem(s)" if refused else "ok")
    ]
    length, data = result.get("length") or {}, result.get("data") or {}
    if length:
        saves = ", ".join(str(s) for s in length["save_steps"]) or "none"
        sized = offline.get("sized_as")
        rows = (
            f"the example rows repeated to {sized}'s {offline['train_rows']:,} rows"
            if sized
            else f"the example rows repeated to one batch of {offline.get('train_rows')}: the "
            "run's dataset size is known only to the data-prep Job"
        )
        counted = (
            # The rows kept are the example rows' (a stand-in tokenizer), never the run's own:
            # verl drops the run's prompts longer than data.max_prompt_length, the data-prep
            # Job counts them (payloads/data_prep/prep_checks.py check_prompt_lengths).
            f"the whole run below is priced at this count, at most the run's: verl drops "
            f"{sized}'s own prompts longer than verl-gke:job.maxPromptLength tokens of the "
            "model's tokenizer, which the data-prep Job counts before training"
            if sized
            else "this is not the run's length; the whole run below is the program's estimate"
        )
        lines.append(
            f"  rows: {rows}; {_count(data.get('train_rows_kept'))} kept; verl's fit() ends at "
            f"step {length['last_step']} (saves at {saves}): {counted}"
        )
    lines += [f"  problem: {_problem_line(p)}" for p in refused]
    lines += [f"  not checked here: {line}" for line in _unchecked(result)]
    return lines

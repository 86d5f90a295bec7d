"""The offline plan's rehearsal: verl_scripts/rehearsal.py in a local verl virtualenv, on the
committed example rows, with a stand-in tokenizer and model config when the model is not here.

`offline_rehearsal(settings, spec)` gives the record (verl_scripts/rehearsal.py, docs/rehearsal.md)
or a plain "could not rehearse: <why>"; `rehearsal_lines(result)` says it in the plan's words.
`rehearsal_context(spec, model)` is the Hydra key -> setting map the rehearsal names problems and
fixes by; the Job that runs the rehearsal in the training image passes the same map (--context).
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
from training.grpo_spec import (
    CONFIG_KEY,
    MODEL_KEY,
    GrpoSpec,
    hydra_overrides,
    modelled_keys,
    setting_of,
)
from training.model_facts import table_facts

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


def rehearsal_context(spec: GrpoSpec, model: str | None = None) -> dict[str, Any]:
    """Hydra key -> the setting a user changes for it: a modelled key's verl-gke:job field, an
    extraOverrides entry's index, the model path's verl-gke:model; where a new override goes."""
    settings = {key: setting_of(alias) for key, alias in modelled_keys().items()}
    settings["actor_rollout_ref.model.path"] = MODEL_KEY
    for index, override in enumerate(spec.extra_overrides):
        key = override.lstrip("+").partition("=")[0]
        settings[key] = f"{CONFIG_KEY}.extraOverrides[{index}]"
    for key in set(run_inputs.REWARD_CONFIG_KEY.values()):
        settings[f"{key}.path"] = settings[f"{key}.name"] = run_inputs.REWARD_KEY
    context: dict[str, Any] = {
        "settings": settings,
        "append": f"{CONFIG_KEY}.extraOverrides[{len(spec.extra_overrides)}]",
    }
    if model is not None:
        context["model"] = model
        # The instruction-tuned sibling the refusal of a model without a chat template offers,
        # where the program's model table has it (meta-llama/Llama-3.1-8B -> ...-Instruct).
        if "instruct" not in model.lower() and _known(f"{model}-Instruct"):
            context["chat_model"] = f"{model}-Instruct"
    return context


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


def example_rows_wanted(settings: StackSettings, spec: GrpoSpec, split: str) -> int:
    """How many rows the example rows are repeated to: the dataset's own row count where the
    program knows it (openai/gsm8k), so verl's dataloader, fit() walk and saves are the run's;
    else one batch (the trainer refuses an empty dataloader), the run's own length then being
    rehearsed in the training image."""
    if run_inputs.dataset_of(settings).kind == "gsm8k":
        return max(spec.train_batch_size, run_inputs.GSM8K_ROWS[split])
    return spec.train_batch_size


def _request(settings: StackSettings, spec: GrpoSpec, work: Path) -> dict[str, Any]:
    """The --cases request: the job's overrides on this machine's example rows, stand-in model
    and reward file."""
    reward = run_inputs.reward_of(settings)
    overrides = local_overrides(
        [*hydra_overrides(spec), *reward_overrides(settings)],
        work / "data",
        work / "model",
        REPO / reward.file if reward is not None else None,
    )
    facts = table_facts(settings.model) if _known(settings.model) else None
    stand_in = {
        "dir": str(work / "model"),
        "max_position_embeddings": (facts.max_position_embeddings if facts else None) or 32768,
        "vocab_size": facts.arch.vocab_size if facts else 32000,
        "chat_template": True,
    }
    return {
        "parquet": {
            str(work / "data" / f"{split}.parquet"): {
                "at_least": example_rows_wanted(settings, spec, split),
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
    rows = example_rows_wanted(settings, spec, "train")
    known = run_inputs.dataset_of(settings).kind == "gsm8k"
    counted = "openai/gsm8k's train rows" if known else "one batch: the dataset's size is unknown"
    record["notes"].append(
        f"offline plan: verl {release} from {python.parent.parent}, on the committed example rows "
        f"({EXAMPLE_ROWS.relative_to(REPO)}, repeated to {rows} train rows, {counted}); "
        "the run's own data, model and image are rehearsed in the training image before training"
    )
    return record


def _known(model: str) -> bool:
    try:
        table_facts(model)
    except (KeyError, ValueError):
        return False
    return True


def rehearsal_lines(result: dict[str, Any] | str) -> list[str]:
    """The offline rehearsal for the plan: what verl's code said, or why it could not run."""
    if isinstance(result, str):
        return [result]
    length, data = result.get("length") or {}, result.get("data") or {}
    lines = [
        f"rehearsal with verl {result['verl']} on the example rows: "
        + ("ok" if result["ok"] else f"{len(result['problems'])} problem(s)")
    ]
    if length:
        saves = ", ".join(str(s) for s in length["save_steps"]) or "none"
        lines.append(
            f"  {data.get('train_rows_kept')} of {data.get('train_rows')} rows kept; fit() ends at "
            f"step {length['last_step']} (saves at {saves})"
        )
    lines += [
        f"  {p['setting']} = {p['value']!r}: {p['message']}. Fix: {p['fix']}"
        for p in result["problems"]
    ]
    return lines

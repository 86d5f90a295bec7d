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
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import traceback
import types
from pathlib import Path
from typing import Any

SCHEMA = 1
MODEL_PATH = "actor_rollout_ref.model.path"
WRONG_ANSWER = "987654321"
# Packages whose installed version is held against verl's (and vLLM's) declared requirements.
CHECKED_PACKAGES = ("vllm", "transformers", "torch", "tensordict", "numpy", "torchdata")
STAND_IN_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# verl modules loaded statement by statement in this process -> the note saying why.
PARTIAL: dict[str, str] = {}


class ProblemFoundError(Exception):
    """A finding that stops the run: the Hydra key, its value, the library's message, a fix."""

    def __init__(self, key: str, value: Any, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.key, self.value, self.message, self.fix = key, value, message, fix


# --- verl's code, imported or loaded statement by statement ------------------------------------


def verl_source(module: str) -> Path:
    """The file of verl module `module`, found from verl's own folder: no parent package is
    imported (verl/workers/rollout/vllm_rollout/__init__.py imports vLLM's server stack)."""
    import verl

    root = Path(verl.__file__).parent
    relative = Path(*module.split(".")[1:])
    for path in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
        if path.is_file():
            return path
    raise ImportError(f"{module} is not in verl {verl.__version__} ({root})")


def verl_has(module: str) -> bool:
    with contextlib.suppress(ImportError):
        return bool(verl_source(module))
    return False


def verl_namespace(module: str) -> dict[str, Any]:
    """The module's globals: imported when it imports, else its top-level statements run one by
    one, those that fail (an import of a package missing here, a class built on one) skipped; the
    partial module then stands in sys.modules for verl's own `from <module> import ...`."""
    try:
        return vars(importlib.import_module(module))
    except Exception as error:  # ImportError, or a package's own refusal (vLLM absent: ValueError)
        reason = f"{type(error).__name__}: {error}"
    path = verl_source(module)
    spec = importlib.util.spec_from_file_location(module, path)
    partial = types.ModuleType(module)
    partial.__spec__, partial.__file__ = spec, str(path)
    partial.__package__ = module.rpartition(".")[0]
    skipped = 0
    for node in ast.parse(path.read_text()).body:
        try:
            exec(compile(ast.Module([node], []), str(path), "exec"), vars(partial))
        except Exception:  # a statement needing what is missing here; its names stay unbound
            skipped += 1
    sys.modules[module] = partial
    PARTIAL[module] = (
        f"{module} does not import here ({reason}); its statements were run one by one "
        f"({skipped} skipped) and its functions are verl's own source in that namespace"
    )
    return vars(partial)


def _function_node(path: Path, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = ast.parse(path.read_text()).body
    *owners, name = qualname.split(".")
    for owner in owners:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner).body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


def verl_function(module: str, qualname: str) -> Any:
    """verl's function or method `qualname` of `module` (a method as a plain function of self)."""
    namespace = verl_namespace(module)
    found: Any = namespace
    with contextlib.suppress(KeyError, AttributeError):
        for part in qualname.split("."):
            found = found[part] if isinstance(found, dict) else getattr(found, part)
        return found
    node = _function_node(verl_source(module), qualname)
    node.decorator_list = []
    local: dict[str, Any] = {}
    exec(compile(ast.Module([node], []), str(verl_source(module)), "exec"), namespace, local)
    return local[node.name]


def line_of(module: str, text: str) -> str:
    """`verl/<path>:<line>` of the first line of `module` containing `text`."""
    path = verl_source(module)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line:
            return f"{module.replace('.', '/')}.py:{number}"
    return f"{module.replace('.', '/')}.py (no line with {text!r}: verl changed here)"


# --- 1. the config ------------------------------------------------------------------------------


def config_dir() -> Path:
    # main_ppo's @hydra.main(config_path="config", config_name="ppo_trainer"), relative to
    # verl/trainer/main_ppo.py; found without importing main_ppo.
    return verl_source("verl.trainer.main_ppo").parent / "config"


_HYDRA: list[Any] = []


def compose(overrides: list[str]) -> Any:
    """verl's ppo_trainer config with `overrides`, composed by Hydra as main_ppo's
    @hydra.main(version_base=None) does; Hydra is initialized once per process."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    if not _HYDRA:
        _HYDRA.append(initialize_config_dir(config_dir=str(config_dir()), version_base=None))
        _HYDRA[0].__enter__()
    return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def validate(config: Any, stage: dict[str, Any] | None = None) -> None:
    """main_ppo's checks before anything is built: verl's validate_config with the reference and
    critic switches TaskRunner derives, then the worker config dataclasses fsdp_workers.py
    converts first (their __post_init__ checks). `stage["stage"]` follows the step."""
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    stage = stage if stage is not None else {}
    stage["stage"] = "validate"
    # TaskRunner adds the reference-policy worker exactly when either KL switch is on
    # (add_ref_policy_worker, 0.6.1; need_reference_policy, 0.9.0); the worker classes need
    # GPUs, so the rule is restated here and the rest is verl's own code.
    use_reference_policy = bool(
        config.algorithm.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss
    )
    validate_config(
        config=config, use_reference_policy=use_reference_policy, use_critic=need_critic(config)
    )
    stage["stage"] = "worker_config"
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.actor_rollout_ref.ref.fsdp_config)


# --- 1b. the loss functions the first update calls -----------------------------------------------


def loss_functions(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """verl's own loss lookups, called on CPU with the composed names, as the first actor update
    and the first in-reward KL call them (no config check covers these names; an unknown one
    raises on the GPUs): core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode) and
    core_algos.kl_penalty(..., actor.kl_loss_type) when use_kl_loss (0.6.1
    workers/actor/dp_actor.py DataParallelPPOActor.update_policy; 0.9.0 workers/utils/losses.py
    ppo_loss), core_algos.kl_penalty(..., algorithm.kl_penalty) when use_kl_in_reward
    (ray_trainer.py apply_kl_penalty)."""
    import torch

    core = verl_namespace("verl.trainer.ppo.core_algos")
    actor = config.actor_rollout_ref.actor
    checks: list[tuple[str, Any, Any]] = [
        (
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            actor.policy_loss.get("loss_mode", "vanilla"),
            core["get_policy_loss_fn"],
        )
    ]
    zeros = torch.zeros(1, 2)
    kl = core["kl_penalty"]
    if actor.use_kl_loss:
        checks.append(
            (
                "actor_rollout_ref.actor.kl_loss_type",
                actor.kl_loss_type,
                lambda n: kl(zeros, zeros, n),
            )
        )
    if config.algorithm.use_kl_in_reward:
        checks.append(
            ("algorithm.kl_penalty", config.algorithm.kl_penalty, lambda n: kl(zeros, zeros, n))
        )
    problems = []
    for key, name, call in checks:
        try:
            call(name)
        except (ValueError, NotImplementedError, KeyError) as error:
            function = "get_policy_loss_fn" if key.endswith("loss_mode") else "kl_penalty"
            problems.append(
                _problem(
                    _setting(context, key),
                    name,
                    f"{type(error).__name__}: {str(error) or 'verl has no branch for this name'} "
                    f"(verl/trainer/ppo/core_algos.py "
                    f"{function}({name!r}), called at the first actor update on the GPUs)",
                    _fix(context, key, None),
                )
            )
    return problems


def _dynamic_passes(config: Any) -> list[tuple[bool, str]]:
    """(dynamic batch size on, its max-token key) of the actor update and the log-prob passes
    (the reference's only where a KL switch adds the reference worker)."""
    aref = config.actor_rollout_ref
    passes = [
        (aref.actor.use_dynamic_bsz, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"),
        (
            aref.rollout.get("log_prob_use_dynamic_bsz", False),
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        ),
    ]
    if aref.actor.use_kl_loss or config.algorithm.use_kl_in_reward:
        passes.append(
            (
                aref.ref.get("log_prob_use_dynamic_bsz", False),
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            )
        )
    return passes


def dynamic_batch_checks(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """With dynamic batch sizes, each pass splits its batch by verl's
    seqlen_balancing.rearrange_micro_batches(batch, max_token_len), which asserts max_token_len
    >= the batch's sequence length: prompt + response as the padded batch comes (0.6.1), the
    longest sequence (0.9.0's nested batches; a response that runs to max_response_length
    reaches it). Called here on such a batch with each pass's max_token_len x
    ulysses_sequence_parallel_size: the actor update (ppo_max_token_len_per_gpu), the rollout
    and reference log-prob passes (log_prob_max_token_len_per_gpu): 0.6.1 dp_actor.py
    update_policy and fsdp_workers.py compute_log_prob / compute_ref_log_prob; 0.9.0
    engine_workers.py (engine_config.max_token_len_per_gpu, infer_max_token_len_per_gpu) through
    workers/engine/utils.py prepare_micro_batches."""
    import torch
    from omegaconf import OmegaConf
    from tensordict import TensorDict

    rearrange = verl_namespace("verl.utils.seqlen_balancing")["rearrange_micro_batches"]
    aref = config.actor_rollout_ref
    length = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    batch = TensorDict(
        {
            "input_ids": torch.zeros(2, length, dtype=torch.long),
            "attention_mask": torch.ones(2, length, dtype=torch.long),
        },
        batch_size=[2],
    )
    sp = int(aref.actor.get("ulysses_sequence_parallel_size", 1) or 1)
    where = line_of("verl.utils.seqlen_balancing", "def rearrange_micro_batches")
    problems, refused = [], set()
    for dynamic, key in _dynamic_passes(config):
        per_gpu = int(OmegaConf.select(config, key))
        # The log-prob lengths default to the actor's (rollout.yaml, ref.yaml oc.select): one
        # problem for one value.
        if not dynamic or per_gpu in refused:
            continue
        try:
            rearrange(batch, max_token_len=per_gpu * sp)
        except AssertionError as error:
            refused.add(per_gpu)
            problems.append(
                _problem(
                    _setting(context, key),
                    per_gpu,
                    f"AssertionError: {error} ({where}, "
                    f"on a batch of data.max_prompt_length + data.max_response_length = {length} "
                    "tokens, with use_dynamic_bsz)",
                    _fix(context, key, length),
                )
            )
    return problems


# --- 7. versions --------------------------------------------------------------------------------


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requires(package: str) -> list[str]:
    """The distribution's Requires-Dist lines; none when it is not installed."""
    try:
        return importlib.metadata.requires(package) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def versions_and_requirements(
    config: Any, offline: bool, record: dict[str, Any], problems: list[dict[str, Any]]
) -> None:
    from packaging.requirements import Requirement

    record["versions"] = {p: _installed(p) for p in ("verl", "vllm", "transformers", "torch")}
    imported = imported_verl_version()
    record["verl"] = record["versions"]["verl"] = imported
    rollout = str(config.actor_rollout_ref.rollout.name) if config is not None else "vllm"
    declared = [*_verl_requirements(imported, rollout, record["notes"])]
    declared += [("vllm", r, {"extra": ""}) for r in _requires("vllm")]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for owner, text, environment in declared:
        requirement = Requirement(text)
        name = requirement.name.lower()
        if name not in CHECKED_PACKAGES:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if environment["extra"] and requirement.marker is None:
            continue  # a base requirement, already taken
        found = _installed(name)
        ok = None if found is None else requirement.specifier.contains(found, prereleases=True)
        row = {"package": name, "required": str(requirement.specifier) or "any", "found": found}
        rows[(name, row["required"])] = {**row, "by": owner, "ok": ok}
    record["requirements"] = list(rows.values())
    for row in record["requirements"]:
        required = f"{row['by']} requires {row['package']}{row['required']}"
        if row["ok"] is False:
            problems.append(
                _problem(
                    "verl-gke:verlImage",
                    f"{row['package']}=={row['found']}",
                    f"{required}; the image has {row['found']} (importlib.metadata)",
                    f"an image with {row['package']}{row['required']}: pulumi config set "
                    "verl-gke:verlImage <that image>",
                )
            )
        elif row["found"] is None:
            message = f"{required}; {row['package']} is not installed here"
            if offline:
                record["notes"].append(message + " (a local verl virtualenv, not the image)")
            else:
                problems.append(
                    _problem(
                        "verl-gke:verlImage",
                        None,
                        message,
                        f"an image with {row['package']}{row['required']}: pulumi config set "
                        "verl-gke:verlImage <that image>",
                    )
                )


def _verl_requirements(
    imported: str | None, rollout: str, notes: list[str]
) -> list[tuple[str, str, dict[str, str]]]:
    """verl's base requirements and its extra for the rollout engine (verl's setup.py
    extras_require has one per engine, "vllm" and "sglang" at v0.6.1 and v0.9.0), as declared by
    the verl that runs: a source tree (verlSource=checkout: a checkout on PYTHONPATH, without
    installed metadata) is asked through its own packaging (source_tree_requires); otherwise the
    installed distribution, when it is the verl that runs."""
    root = verl_source_tree()
    if root is not None:
        requires, why_not = source_tree_requires(root)
        if requires is None:
            notes.append(f"verl's declared requirements were not checked: {why_not}")
            return []
        notes.append(
            f"verl's declared requirements: `setup.py egg_info` on a copy of {root}'s "
            "packaging files (the verl that runs is that source tree)"
        )
    elif _installed("verl") == imported:
        requires = _requires("verl")
    else:
        notes.append(
            f"verl's declared requirements were not checked: the verl that runs ({imported}, "
            f"verl.__version__) has neither installed metadata of its own (the installed verl "
            f"distribution: {_installed('verl')}) nor a setup.py beside it; vLLM's own "
            "requirements were checked"
        )
        return []
    return [("verl", r, {"extra": ""}) for r in requires] + [
        ("verl", r, {"extra": rollout}) for r in requires
    ]


def verl_source_tree() -> Path | None:
    """The folder holding the imported verl package when it is a source tree (a setup.py or
    pyproject.toml beside the package, as in a git checkout); None for an installed verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    if (root / "setup.py").is_file() or (root / "pyproject.toml").is_file():
        return root
    return None


def source_tree_requires(root: Path) -> tuple[list[str] | None, str]:
    """The Requires-Dist lines of a verl source tree, as pip would read them: setuptools'
    `egg_info` command, run on a temporary copy of the tree's top-level files (setup.py,
    pyproject.toml, README.md, requirements*.txt) and verl/version/ (verl's setup.py reads
    verl/version/version and README.md, at v0.6.1 and v0.9.0), since the checkout is read-only
    in the pods. Returns (lines, "") or (None, why not)."""
    import shutil
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="verl-packaging-") as temporary:
        copy, egg_base = Path(temporary) / "source", Path(temporary) / "egg-info"
        copy.mkdir()
        egg_base.mkdir()
        for entry in root.iterdir():
            if entry.is_file():
                shutil.copy2(entry, copy / entry.name)
        if (root / "verl" / "version").is_dir():
            shutil.copytree(root / "verl" / "version", copy / "verl" / "version")
        # A pyproject.toml-only tree: setuptools' setup() reads it.
        setup = (
            ["setup.py"]
            if (copy / "setup.py").is_file()
            else ["-c", "import setuptools as s; s.setup()"]
        )
        done = subprocess.run(
            [sys.executable, *setup, "--quiet", "egg_info", "--egg-base", str(egg_base)],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=300,
        )
        found = sorted(egg_base.glob("*.egg-info"))
        if done.returncode != 0 or not found:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"`setup.py egg_info` on a copy of {root} failed: {tail}"
        # importlib.metadata reads an egg-info's requires.txt as Requires-Dist lines.
        return list(importlib.metadata.PathDistribution(found[0]).requires or []), ""


def imported_verl_version() -> str | None:
    """The version of the verl `import verl` finds (its verl/version/version file)."""
    try:
        import verl
    except ImportError:
        return None
    return str(getattr(verl, "__version__", None) or "") or None


# --- 2. tokenizer and model config --------------------------------------------------------------


def write_stand_in_model(spec: dict[str, Any]) -> Path:
    """A word-level tokenizer (every word one token, as [UNK]) and a one-layer Mistral config with
    the real model's context and vocabulary size: no download. Mistral because AutoTokenizer keeps
    the saved tokenizer.json for it: transformers 5 (tokenization_auto.py,
    MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS) loads a qwen2 folder with Qwen2Tokenizer, a BPE
    without this vocabulary's words, which makes every prompt 0 tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MistralConfig, PreTrainedTokenizerFast

    folder = Path(spec["dir"])
    specials = ["[UNK]", "[PAD]", "[EOS]", "<|user|>", "<|assistant|>", "<|system|>"]
    model = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials)}, "[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    if spec.get("chat_template", True):
        tokenizer.chat_template = STAND_IN_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    MistralConfig(
        vocab_size=int(spec.get("vocab_size", 32000)),
        max_position_embeddings=int(spec.get("max_position_embeddings", 32768)),
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
    ).save_pretrained(str(folder))
    return folder


def max_position_embeddings(hf_config: Any) -> int | None:
    # verl 0.9.0: verl/workers/rollout/utils.py get_max_position_embeddings (what the vLLM server
    # checks max_model_len against); 0.6.1 reads the attribute (vllm_rollout_spmd.py __init__).
    if verl_has("verl.workers.rollout.utils"):
        with contextlib.suppress(KeyError, StopIteration):
            function = verl_function("verl.workers.rollout.utils", "get_max_position_embeddings")
            return int(function(hf_config))
    for owner in (hf_config, getattr(hf_config, "text_config", None)):
        if owner is not None and getattr(owner, "max_position_embeddings", None) is not None:
            return int(owner.max_position_embeddings)
    return None


def load_model(config: Any, record: dict[str, Any]) -> tuple[Any, Any]:
    """TaskRunner.run (main_ppo.py): copy_to_local(model.path), hf_tokenizer(local_path,
    trust_remote_code=data.trust_remote_code); the workers' AutoConfig.from_pretrained."""
    from transformers import AutoConfig
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    path = config.actor_rollout_ref.model.path
    local = copy_to_local(path, use_shm=config.actor_rollout_ref.model.get("use_shm", False))
    trust = config.data.get("trust_remote_code", False)
    try:
        tokenizer = hf_tokenizer(local, trust_remote_code=trust)
        hf_config = AutoConfig.from_pretrained(local, trust_remote_code=trust)
    except Exception as error:
        raise ProblemFoundError(
            MODEL_PATH,
            path,
            f"{type(error).__name__}: {error}",
            "a model folder data prep downloaded: pulumi up prepares it before the rehearsal",
        ) from error
    record["model"] = {
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "max_position_embeddings": max_position_embeddings(hf_config),
        "vocab_size": getattr(hf_config, "vocab_size", None),
        "tokenizer_vocab": len(tokenizer),
    }
    return tokenizer, hf_config


def check_chat_template(config: Any, tokenizer: Any, context: dict[str, Any]) -> None:
    """RLHFDataset applies the tokenizer's chat template to every prompt that is a list of
    messages (rl_dataset.py _build_messages, maybe_filter_out_long_prompts, __getitem__)."""
    import pyarrow.parquet as pq

    files = config.data.train_files
    first = str(files if isinstance(files, str) else next(iter(files)))
    if config.data.prompt_key not in pq.read_schema(first).names:
        return  # verl's own dataset code says so next
    table = pq.read_table(first, columns=[config.data.prompt_key]).slice(0, 1).to_pylist()
    prompt = table[0][config.data.prompt_key] if table else None
    if not isinstance(prompt, list):
        return
    try:
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    except Exception as error:
        model = context.get("model")
        chat_model = context.get("chat_model")
        fix = f"pulumi config set verl-gke:model {chat_model or '<a model with a chat template>'}"
        raise ProblemFoundError(
            "verl-gke:model",
            model or config.actor_rollout_ref.model.path,
            f"the prompts are chat messages and the tokenizer has no chat template: "
            f"{type(error).__name__}: {error}",
            fix,
        ) from error


# --- 3/4. datasets, dataloaders and the run's length --------------------------------------------


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


def resumed_step(config: Any) -> int:
    """The global step a fresh start resumes from, by the trainers' _load_checkpoint rules
    (ray_trainer.py and v1/trainer_base.py, 0.6.1 and 0.9.0): resume_mode disable -> 0; auto ->
    verl's find_latest_ckpt_path(default_local_dir), 0 without one; resume_path -> that folder;
    the step is the number after "global_step_"."""
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    mode = config.trainer.resume_mode
    if mode == "disable":
        return 0
    if mode == "resume_path":
        folder = str(config.trainer.resume_from_path)
    else:
        found = find_latest_ckpt_path(os.path.abspath(str(config.trainer.default_local_dir)))
        if found is None:
            return 0
        folder = found
    return int(folder.split("global_step_")[-1])


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
    return _problem(
        _setting(context, key),
        True,
        f"trainer.val_only = True with trainer.val_before_train = True: verl's fit() validates "
        f"and returns before step {resumed + 1}, so nothing trains and no checkpoint is saved "
        f"({where})",
        _fix(context, key, None),
    )


def _length_fields(
    config: Any, trainer: types.SimpleNamespace, loop: tuple[int, str, str], last: int, saves: list
) -> dict[str, Any]:
    """The record's `length`; `loop`: steps per epoch, how they were counted, fit()'s line."""
    per_epoch, counted, where = loop
    epochs, resumed = int(config.trainer.total_epochs), resumed_step(config)
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
    }


def run_length(
    config: Any, trainer: types.SimpleNamespace, context: dict[str, Any], record: dict[str, Any]
) -> list[dict[str, Any]]:
    epochs, save_freq = int(config.trainer.total_epochs), int(config.trainer.save_freq)
    total = int(trainer.total_training_steps)
    fit, per_epoch, counted, loop = _fit_loop(config, trainer)
    resumed = resumed_step(config)
    last, saves = fit(per_epoch, epochs, total, save_freq, resumed)
    validates_only = _validates_only(config)
    if validates_only is not None:
        last, saves, loop = resumed, [], validates_only
    override = config.trainer.total_training_steps
    record["length"] = _length_fields(config, trainer, (per_epoch, counted, loop), last, saves)
    if resumed:
        record["notes"].append(
            f"verl resumes from step {resumed} (trainer.resume_mode = "
            f"{config.trainer.resume_mode}, {config.trainer.default_local_dir}) and trains "
            f"{last - resumed} more step(s)"
        )
    if validates_only is not None:
        return [_val_only_problem(context, resumed, validates_only)]
    if resumed and last == resumed:
        return []
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
        _problem(
            _setting(context, key),
            override,
            f"{message} ({loop})",
            _fix(context, key, fixed) if accepted else f"a dataset of more rows than {key}",
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
        _problem(
            _setting(context, key),
            OmegaConf.select(config, key),
            f"verl's {owner}._save_checkpoint ({module.replace('.', '/')}.py) writes no "
            "latest_checkpointed_iteration.txt with this config: verl's resume "
            "(find_latest_ckpt_path) finds no checkpoint, every attempt starts at step 0, and "
            "the run never counts as finished",
            _fix(context, key, None),
        )
    ]


# --- 5. the reward ------------------------------------------------------------------------------


def load_reward(config: Any) -> tuple[Any, str]:
    """verl's get_custom_reward_fn (verl/trainer/ppo/reward.py), else default_compute_score, as
    load_reward_manager chooses (0.6.1; 0.9.0's reward loop calls the same pair)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    # get_custom_reward_fn keeps the file it loaded as sys.modules["custom_module"] and reuses
    # it (reward.py, 0.6.1 and 0.9.0): one reward per trainer process, one per case here.
    sys.modules.pop("custom_module", None)
    function = get_custom_reward_fn(config)
    if function is not None:
        section = config.get("custom_reward_function") or {}
        if not section.get("path") and "reward" in config:
            section = config.reward.get("custom_reward_function") or {}
        return function, f"{section.get('path')}:{section.get('name')}"
    from verl.utils.reward_score import default_compute_score

    return default_compute_score, "verl.utils.reward_score:default_compute_score"


def _verl_reward_value(score: Any) -> Any:
    """What the reward manager makes of a return (NaiveRewardManager.__call__,
    verl/workers/reward_manager/naive.py): a dict gives score["score"], anything else is the
    reward itself, written into a float tensor: `reward_tensor[i, length - 1] = reward`."""
    import torch

    reward = score["score"] if isinstance(score, dict) else score
    torch.zeros(1, 1, dtype=torch.float32)[0, 0] = reward
    return float(reward)


def score_rows(
    config: Any,
    trainer: types.SimpleNamespace,
    samples: int,
    context: dict[str, Any],
    record: dict[str, Any],
) -> list[dict[str, Any]]:
    function, name = load_reward(config)
    record["reward"] = {"function": name, "samples": []}
    key = config.data.get("reward_fn_key", "data_source")
    count = min(samples, len(trainer.train_dataset))
    for index in range(count):
        item = trainer.train_dataset[index]
        truth = item["reward_model"]["ground_truth"]
        extra = item.get("extra_info")
        sample: dict[str, Any] = {"row": index, "ground_truth": str(truth)}
        for label, answer in (("score_correct", str(truth)), ("score_wrong", WRONG_ANSWER)):
            response = f"So the answer is \\boxed{{{answer}}}.\n#### {answer}"
            score: Any = "<nothing: it raised>"
            try:
                score = function(
                    data_source=item[key],
                    solution_str=response,
                    ground_truth=truth,
                    extra_info=extra,
                )
                sample[label] = _verl_reward_value(score)
            except Exception as error:
                record["reward"]["samples"].append(sample)
                return [
                    _problem(
                        _setting(context, "custom_reward_function.path", "verl-gke:reward"),
                        name,
                        f"train row {index} (data_source {item[key]!r}, ground truth "
                        f"{str(truth)!r}), response {response!r}: it returned {score!r}: "
                        f"{type(error).__name__}: {error}; verl needs a number or a dict with "
                        "'score' (NaiveRewardManager)",
                        "a reward that returns a number (or a dict with 'score') on every path: "
                        "e.g. verl-gke:reward docs/examples/exact_match.py:compute_score",
                    )
                ]
        record["reward"]["samples"].append(sample)
    return []


# --- 6. the rollout's lengths -------------------------------------------------------------------

SPMD = "verl.workers.rollout.vllm_rollout.vllm_rollout_spmd"
ASYNC_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"


def _spmd_length_checks() -> tuple[ast.Module, str] | None:
    """verl 0.6.1 vLLMRollout.__init__ (vllm_rollout_spmd.py): its statements from
    `max_num_batched_tokens = self.config.get(...)` through the chunked-prefill ValueError."""
    if not verl_has(SPMD):
        return None
    path = verl_source(SPMD)
    init = _function_node(path, "vLLMRollout.__init__")
    body = init.body
    starts = [i for i, s in enumerate(body) if "max_num_batched_tokens =" in ast.unparse(s)]
    ends = [
        i
        for i, s in enumerate(body)
        if isinstance(s, ast.If) and "max_num_batched_tokens < max_model_len" in ast.unparse(s.test)
    ]
    if not starts or not ends:
        return None
    return ast.Module(body[starts[0] : ends[0] + 1], []), f"{path.name}:{body[ends[0]].lineno}"


def lora_weight_sync(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """LoRA with rollout.layered_summon needs the base model in vLLM before the first weight
    sync. The worker sets base_sync_done = "dummy" not in rollout.load_format (0.6.1
    fsdp_workers.py, 0.9.0 engine_workers.py), and the first sync of a LoRA actor raises
    ValueError when layered_summon and not base_sync_done (utils/fsdp_utils.py
    collect_lora_params; 0.6.1 sync mode sharding_manager/fsdp_vllm.py __enter__; 0.9.0 unless
    model.lora.merge). Restated: the check needs an FSDP-wrapped PEFT model on GPUs."""
    model, rollout = config.actor_rollout_ref.model, config.actor_rollout_ref.rollout
    lora = int(model.get("lora_rank", 0) or 0) > 0
    merged = bool((model.get("lora") or {}).get("merge", False))
    if not (lora and rollout.get("layered_summon", False)) or merged:
        return []
    if "dummy" not in str(rollout.load_format):
        return []
    key = "actor_rollout_ref.rollout.load_format"
    where = line_of("verl.utils.fsdp_utils", "To use layered_summon, you must make sure")
    return [
        _problem(
            _setting(context, "actor_rollout_ref.rollout.layered_summon"),
            True,
            "ValueError at the first weight sync on the GPUs: 'To use layered_summon, you must "
            "make sure base-model is preloaded in vllm, e.g. let rollout.load_format="
            f"safetensors' ({where}); {key} = {rollout.load_format}",
            _fix(context, key, "safetensors"),
        )
    ]


def rollout_lengths_follow_data(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """rollout.prompt_length / response_length default to data.max_prompt_length /
    max_response_length (rollout.yaml, `${oc.select:data...}`, 0.6.1 and 0.9.0); vLLM generates
    and the actor trains on the rollout's lengths, while the plan's memory fit, step time and
    evaluation use the data's. An override that sets them apart is refused with the data
    setting that keeps the length asked for."""
    rollout = config.actor_rollout_ref.rollout
    problems = []
    for field, data_key in (
        ("prompt_length", "data.max_prompt_length"),
        ("response_length", "data.max_response_length"),
    ):
        asked, data_value = int(rollout[field]), int(config.data[data_key.split(".")[1]])
        if asked == data_value:
            continue
        key = f"actor_rollout_ref.rollout.{field}"
        problems.append(
            _problem(
                _setting(context, key),
                asked,
                f"{key} = {asked} while {data_key} = {data_value}: vLLM generates and the actor "
                f"trains on the rollout's length, but the plan's memory fit and step time use "
                f"{data_key} (verl's rollout.yaml sets the first from the second)",
                f"{_fix(context, data_key, asked)}, and {_fix(context, key, None)}",
            )
        )
    return problems


def rollout_checks(
    config: Any, hf_config: Any, context: dict[str, Any], record: dict[str, Any], notes: list[str]
) -> list[dict[str, Any]]:
    rollout = config.actor_rollout_ref.rollout
    model_context = record.get("model", {}).get("max_position_embeddings")
    record["rollout"] = {
        "name": str(rollout.name),
        "mode": str(rollout.get("mode", "async")),
        "max_model_len": rollout.get("max_model_len"),
        "max_num_batched_tokens": rollout.get("max_num_batched_tokens"),
        "enable_chunked_prefill": rollout.get("enable_chunked_prefill"),
        "model_context": model_context,
    }
    if str(rollout.name) != "vllm" or hf_config is None:
        return []
    spmd = _spmd_length_checks()
    server_check = verl_has(ASYNC_SERVER) and "_validate_configs" in (
        verl_source(ASYNC_SERVER).read_text()
    )
    if record["rollout"]["mode"] == "sync" and spmd is not None:
        return _run_spmd(spmd, config, hf_config, context, record)
    if server_check:  # 0.9.0: vLLMHttpServer._validate_configs
        return _run_server_check(config, hf_config, context, record)
    if record["rollout"]["mode"] == "async":
        # 0.6.1 vLLMHttpServerBase.__init__ (vllm_async_server.py) replaces the override.
        where = line_of(ASYNC_SERVER, "self.config.max_model_len = self.config.prompt_length")
        effective = int(rollout.prompt_length) + int(rollout.response_length)
        if rollout.get("max_model_len") not in (None, effective):
            notes.append(
                f"rollout.max_model_len={rollout.max_model_len} is replaced by prompt_length + "
                f"response_length = {effective} in async mode ({where})"
            )
        record["rollout"]["max_model_len"] = effective
    return []


def _run_spmd(
    spmd: tuple[ast.Module, str],
    config: Any,
    hf_config: Any,
    context: dict[str, Any],
    record: dict[str, Any],
) -> list[dict[str, Any]]:
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    code, where = spmd
    composed = config.actor_rollout_ref.rollout

    def run(values: dict[str, Any]) -> str | None:
        """verl's statements on the rollout config (RolloutConfig, as the worker converts it)
        with `values` changed; verl's message, or None when they pass."""
        rollout = omega_conf_to_dataclass(OmegaConf.merge(composed, values))
        scope = {"config": rollout, "self": types.SimpleNamespace(config=rollout)}
        scope["model_hf_config"] = hf_config
        try:
            exec(compile(code, where, "exec"), scope)
        except (ValueError, AssertionError) as error:
            return f"{type(error).__name__}: {' '.join(str(error).split())} ({where})"
        if not values:  # the job's own config: the length vLLM gets
            record["rollout"]["max_model_len"] = scope.get("max_model_len")
        return None

    message = run({})
    if message is None:
        return []
    if message.startswith("AssertionError"):
        return [_context_problem(composed, run, message, context, record)]
    asked = composed.get("max_model_len")
    context_len = record["rollout"]["model_context"]
    # The fix keeps the asked length where the model holds it (more batched tokens), else drops
    # the override; either is run through the same statements before it is offered.
    candidates: list[tuple[str, Any, dict[str, Any]]] = [
        ("actor_rollout_ref.rollout.max_model_len", None, {"max_model_len": None})
    ]
    if asked and context_len and int(asked) <= int(context_len):
        batched = ("actor_rollout_ref.rollout.max_num_batched_tokens", int(asked))
        candidates.insert(0, (*batched, {"max_num_batched_tokens": int(asked)}))
    fix = next(
        (_fix(context, key, value) for key, value, change in candidates if run(change) is None),
        None,
    )
    setting = _setting(context, "actor_rollout_ref.rollout.max_model_len")
    return [_problem(setting, asked, message, fix)]


def _context_problem(
    composed: Any, run: Any, message: str, context: dict[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """verl 0.6.1's assertion that the model's context holds prompt + response: the fix is the
    longest response it holds, run through the same statements (with max_num_batched_tokens at
    least prompt + response, which the chunked-prefill check right after asks for)."""
    prompt, response = int(composed.prompt_length), int(composed.response_length)
    longest = int(record["rollout"]["model_context"] or 0) - prompt
    change = {
        "response_length": longest,
        "max_num_batched_tokens": max(int(composed.max_num_batched_tokens), prompt + longest),
    }
    accepted = longest > 0 and run(change) is None
    key = "data.max_response_length"
    fix = _fix(context, key, longest) if accepted else "a model with a longer context"
    return _problem(_setting(context, key), response, message, fix)


def _run_server_check(
    config: Any, hf_config: Any, context: dict[str, Any], record: dict[str, Any]
) -> list[dict[str, Any]]:
    from verl.utils.config import omega_conf_to_dataclass

    check = verl_function(ASYNC_SERVER, "vLLMHttpServer._validate_configs")
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    server = types.SimpleNamespace(
        config=rollout, model_config=types.SimpleNamespace(hf_config=hf_config)
    )
    asked = rollout.max_model_len
    try:
        check(server)
    except ValueError as error:
        return [
            _problem(
                _setting(context, "actor_rollout_ref.rollout.max_model_len"),
                asked,
                f"ValueError: {error} ({line_of(ASYNC_SERVER, 'def _validate_configs')})",
                _fix(context, "actor_rollout_ref.rollout.max_model_len", None),
            )
        ]
    record["rollout"]["max_model_len"] = server.config.max_model_len
    return []


# --- the record ---------------------------------------------------------------------------------


def _setting(context: dict[str, Any], key: str, default: str | None = None) -> str:
    return context.get("settings", {}).get(key) or default or key


def _problem(setting: str, value: Any, message: str, fix: str | None) -> dict[str, Any]:
    return {"setting": setting, "value": value, "message": message, "fix": fix}


def _fix(context: dict[str, Any], key: str, value: Any) -> str:
    """The command that sets Hydra key `key` to `value` (None: drops the override)."""
    setting = context.get("settings", {}).get(key)
    if value is None:
        where = setting or f"the override of {key}"
        return f"pulumi config rm --path {where}" if setting else f"remove {where}"
    if setting and setting.startswith("verl-gke:job.extraOverrides"):
        return f"pulumi config set --path {setting} {key}={value}"
    if setting:
        return f"pulumi config set --path {setting} {value}"
    append = context.get("append", "verl-gke:job.extraOverrides[<next>]")
    return f"pulumi config set --path {append} {key}={value}"


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
            if not (offline and _installed("vllm") is None and "vllm version None" in str(error)):
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


def named_override(overrides: list[str], message: str) -> tuple[str, str] | None:
    """The override a library's message is about: its whole key is in the message, else its
    last key part and its value are (OmegaConf and verl's config dataclasses name the section
    and the field apart: "Invalid loss_agg_mode: token_mean ... full_key: actor_rollout_ref.
    actor"), else its value is, quoted ("KeyError: 'question'")."""
    pairs = [(k.lstrip("+"), v) for k, _, v in (o.partition("=") for o in overrides)]
    rules = (
        lambda key, value: key in message,
        lambda key, value: key.rpartition(".")[2] in message and bool(value) and value in message,
        lambda key, value: bool(value) and f"'{value}'" in message,
    )
    for rule in rules:
        found = [(key, value) for key, value in pairs if rule(key, value)]
        if len(found) == 1:
            return found[0]
    return None


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
    record: dict[str, Any] = {"schema": SCHEMA, "ok": False, "verl": _installed("verl")}
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
        setting = _setting(args.context, problem.key, problem.key)
        problems.append(_problem(setting, problem.value, problem.message, problem.fix))
    except Exception as error:  # verl refused something this rehearsal has no rule for
        message = f"verl refused the job while {stage[0]}: {type(error).__name__}: {error}"
        key, value = named_override(overrides, message) or ("rehearsal", None)
        fix = f"correct or remove {key}" if value is not None else None
        problems.append(
            _problem(
                _setting(args.context, key, key),
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

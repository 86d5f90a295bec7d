"""What every step of the rehearsal shares (verl_scripts/rehearsal.py runs them): verl's own code,
imported or, where a module does not import here, loaded statement by statement; the config
composed and validated as main_ppo does; the problem shape a step returns and the fix it offers.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

MODEL_PATH = "actor_rollout_ref.model.path"

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


def function_node(path: Path, qualname: str) -> ast.FunctionDef:
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
    node = function_node(verl_source(module), qualname)
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


# --- the record ---------------------------------------------------------------------------------


def setting_for(context: dict[str, Any], key: str, default: str | None = None) -> str:
    return context.get("settings", {}).get(key) or default or key


def problem_entry(setting: str, value: Any, message: str, fix: str | None) -> dict[str, Any]:
    return {"setting": setting, "value": value, "message": message, "fix": fix}


def fix_for(context: dict[str, Any], key: str, value: Any) -> str:
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

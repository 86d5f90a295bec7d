"""Compose Hydra overrides against the installed verl's own `ppo_trainer` config and run the
config checks verl's `main_ppo` applies before it touches a GPU. Prints one JSON verdict.

Runs inside an isolated verl virtualenv (requirements-verl-*.txt, built by .ci/run), never the
project's: verl pins numpy, and its config modules import torch, ray, tensordict and
transformers at module level. It therefore imports nothing from this project.

stdin:  {"cases": {"<name>": ["key=value", ...], ...}, "report": ["<key>", ...]}
        ("report", optional: keys whose composed value every case reports besides its own)
stdout: {"verl_version": "0.6.1", "results": {"<name>": {
            "ok": bool,
            "stage": null | "compose" | "resolve" | "validate" | "worker_config",
            "error": null | "<exception type>: <message>",
            "values": {"<key>": {"composed": <value>, "type": "<type>",
                                 "default_type": "<type of verl's default>"}}}}}
Exit status 0 when every case passed, 1 when one was rejected, 2 on malformed input, 3 when
verl's config code does not import here (a package missing from the virtualenv: no verdict).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

# `key=value`, `+key=value` or `++key=value`; the key is what `values` reports on.
_OVERRIDE_KEY = re.compile(r"\+{0,2}(?P<key>[^=~]+)=")


def _config_dir() -> Path:
    # main_ppo declares @hydra.main(config_path="config", config_name="ppo_trainer"): the path is
    # relative to verl/trainer/main_ppo.py. Found without importing main_ppo, whose imports
    # (datasets, torchdata, the FSDP workers) are not needed for the config.
    spec = importlib.util.find_spec("verl.trainer.main_ppo")
    if spec is None or spec.origin is None:
        raise RuntimeError("verl.trainer.main_ppo is not importable in this interpreter")
    return Path(spec.origin).parent / "config"


def _type_name(value: Any) -> str:
    from omegaconf import DictConfig, ListConfig

    if isinstance(value, ListConfig):
        return "list"
    if isinstance(value, DictConfig):
        return "dict"
    return type(value).__name__


def _plain(value: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _compose(config_dir: Path, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    # version_base=None, as main_ppo's @hydra.main.
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def _check(
    config_dir: Path, defaults: Any, overrides: list[str], report: list[str]
) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    verdict: dict[str, Any] = {"ok": False, "stage": "compose", "error": None, "values": {}}
    try:
        config = _compose(config_dir, overrides)
        verdict["stage"] = "resolve"
        # TaskRunner.run resolves every interpolation before it builds anything.
        OmegaConf.resolve(config)
        matches = (_OVERRIDE_KEY.match(override) for override in overrides)
        for key in [*(m["key"] for m in matches if m is not None), *report]:
            composed = OmegaConf.select(config, key)
            verdict["values"][key] = {
                "composed": _plain(composed),
                "type": _type_name(composed),
                "default_type": _type_name(OmegaConf.select(defaults, key)),
            }
        verdict["stage"] = "validate"
        # TaskRunner adds the reference-policy worker exactly when either KL switch is on
        # (add_ref_policy_worker); the worker classes themselves need GPUs, so the rule is
        # restated here and the rest is verl's own code.
        use_reference_policy = bool(
            config.algorithm.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss
        )
        validate_config(
            config=config,
            use_reference_policy=use_reference_policy,
            use_critic=need_critic(config),
        )
        verdict["stage"] = "worker_config"
        # What the FSDP workers convert first (fsdp_workers.py), with the checks in the
        # dataclasses' __post_init__; the model config itself needs the model files.
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
        omega_conf_to_dataclass(config.actor_rollout_ref.ref.fsdp_config)
    except Exception as error:  # the verdict reports any rejection, whatever verl raises
        verdict["error"] = f"{type(error).__name__}: {error}"
        return verdict
    verdict["ok"] = True
    verdict["stage"] = None
    return verdict


def main() -> int:
    try:
        request = json.load(sys.stdin)
        cases, report = request["cases"], request.get("report", [])
        if not isinstance(report, list) or not all(isinstance(k, str) for k in report):
            raise TypeError("'report' must be a list of keys")
        if not isinstance(cases, dict) or not all(
            isinstance(v, list) and all(isinstance(o, str) for o in v) for v in cases.values()
        ):
            raise TypeError("'cases' must map names to lists of override strings")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        print(f"bad request on stdin: {error}", file=sys.stderr)
        return 2

    try:
        import verl
        import verl.trainer.ppo.utils
        import verl.utils.config
        import verl.workers.config  # the _target_ classes of the actor config

        config_dir = _config_dir()
    except ImportError as error:
        print(
            f"verl's config code does not import in {sys.executable}: "
            f"{type(error).__name__}: {error}. The virtualenv lacks a package: add it, pinned, to "
            "the requirements-verl-<version>.txt it was built from",
            file=sys.stderr,
        )
        return 3
    results = {}
    # verl and Hydra print progress to stdout; the verdict must be the only thing there.
    with contextlib.redirect_stdout(sys.stderr):
        defaults = _compose(config_dir, [])
        for name, overrides in cases.items():
            results[name] = _check(config_dir, defaults, overrides, report)
    json.dump({"verl_version": verl.__version__, "results": results}, sys.stdout, indent=2)
    print()
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

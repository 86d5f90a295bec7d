"""Compose Hydra overrides against the installed verl's own `ppo_trainer` config and run the
config checks verl's `main_ppo` applies before it touches a GPU. Prints one JSON verdict.

Runs inside an isolated verl virtualenv (requirements-verl-*.txt, built by .ci/run), never the
project's: verl pins numpy, and its config modules import torch, ray, tensordict and
transformers at module level. It therefore imports nothing from this project but the
rehearsal beside it (verl_scripts/rehearsal_common.py), whose compose and validate it shares.

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
import json
import re
import sys
from typing import Any

from rehearsal_common import compose, config_dir, validate

# `key=value`, `+key=value` or `++key=value`; the key is what `values` reports on.
_OVERRIDE_KEY = re.compile(r"\+{0,2}(?P<key>[^=~]+)=")


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


def _check(defaults: Any, overrides: list[str], report: list[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    verdict: dict[str, Any] = {"ok": False, "stage": "compose", "error": None, "values": {}}
    try:
        config = compose(overrides)
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
        validate(config, stage=verdict)
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

        config_dir()
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
        defaults = compose([])
        for name, overrides in cases.items():
            results[name] = _check(defaults, overrides, report)
    json.dump({"verl_version": verl.__version__, "results": results}, sys.stdout, indent=2)
    print()
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

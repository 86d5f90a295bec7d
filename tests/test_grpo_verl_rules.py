"""GRPO settings the plan judges as verl does, each beside verl's own code in the verl virtualenvs
(v0.6.1 and v0.9.0):

- rolloutN = 1: verl runs it; verl's GRPO advantage of a group of one is the reward itself
  (verl/trainer/ppo/core_algos.py compute_grpo_outcome_advantage). The plan accepts it with a
  note that says so.
- No KL at all (useKlLoss and useKlInReward false): verl's config checks take it and it builds
  no reference model. The plan accepts it.
- actor_rollout_ref.model.lora_alpha: verl converts actor_rollout_ref.model to its HFModelConfig
  (lora_alpha: int) when the rollout starts; OmegaConf refuses a float such as 32.0. The plan
  refuses what verl refuses, with a fix verl takes, and hands an accepted value to the export
  unchanged.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from functools import cache
from typing import Any

import pytest

from config.settings import load_settings
from tests.program import REAL
from tests.support.require import verl_python
from training.assembly import memory_fit_inputs, training_job
from training.grpo_spec import GrpoPreflightError, render_entrypoint

# Runs verl's own code in the verl virtualenvs (subprocesses).
pytestmark = pytest.mark.integration

RELEASES = ("0.6.1", "0.9.0")
GOOD = {**REAL, "verl-gke:mode": "standard"}
ALPHAS = ("32", "16", "32.0", "32.5", "sixteen")

# Run in a verl virtualenv: argv[1] is a JSON request {"jobs": {name: [override, ...]},
# "alphas": [...]}. Prints one JSON object.
PROBE = r"""
import importlib.util, json, sys, tempfile
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.trainer.ppo.utils import need_critic
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.config import HFModelConfig

request = json.loads(sys.argv[1])
config_dir = Path(importlib.util.find_spec("verl.trainer.main_ppo").origin).parent / "config"
out = {}

# The advantage of groups of one (four prompts, one response each) and of two.
rewards = torch.tensor([1.0, 0.0, 0.5, -1.0])
token_rewards = torch.zeros(4, 3)
token_rewards[:, -1] = rewards
mask = torch.ones(4, 3)
for name, uids in {"n1": ["a", "b", "c", "d"], "n2": ["a", "a", "b", "b"]}.items():
    for norm in (True, False):
        advantages, _ = compute_grpo_outcome_advantage(
            token_rewards, mask, np.array(uids, dtype=object), norm_adv_by_std_in_grpo=norm
        )
        out[f"{name}:norm={norm}"] = advantages[:, 0].tolist()


def composed(overrides):
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


# The job's own overrides: verl's config checks, and whether a reference policy is used (the
# 0.6.1 TaskRunner adds the RefPolicy worker on the same two switches).
for name, overrides in request["jobs"].items():
    config = composed(overrides)
    OmegaConf.resolve(config)
    use_ref = bool(config.algorithm.use_kl_in_reward or config.actor_rollout_ref.actor.use_kl_loss)
    try:
        validate_config(config=config, use_reference_policy=use_ref, use_critic=need_critic(config))
        error = None
    except Exception as caught:
        error = f"{type(caught).__name__}: {caught}"
    out[f"job:{name}"] = {"error": error, "use_reference_policy": use_ref}

# actor_rollout_ref.model as the rollout converts it, on a tiny local model (no tokenizer).
model_dir = Path(tempfile.mkdtemp())
(model_dir / "config.json").write_text(json.dumps({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
}))
for alpha in request["alphas"]:
    config = composed([
        "actor_rollout_ref.model.lora_rank=32",
        f"actor_rollout_ref.model.lora_alpha={alpha}",
        f"actor_rollout_ref.model.path={model_dir}",
        "+actor_rollout_ref.model.load_tokenizer=false",
    ])
    try:
        section = config.actor_rollout_ref.model
        model = omega_conf_to_dataclass(section, dataclass_type=HFModelConfig)
        out[f"alpha:{alpha}"] = {"value": model.lora_alpha, "error": None}
    except Exception as caught:
        out[f"alpha:{alpha}"] = {"value": None, "error": f"{type(caught).__name__}: {caught}"}
print(json.dumps(out))
"""


def _settings(job: dict[str, Any]) -> Any:
    return load_settings("a3u", {**GOOD, "verl-gke:job": json.dumps(job)}, offline=False).settings


def _job(job: dict[str, Any]) -> Any:
    return training_job(_settings(job))


def _verl_args(job: dict[str, Any]) -> list[str]:
    """main_ppo's overrides of the plan's job."""
    spec = _job(job).spec
    return shlex.split(render_entrypoint(spec))[3:]


JOBS = {
    "no-kl": {"useKlLoss": False, "useKlInReward": False},
    "one-response": {"rolloutN": 1},
}


@cache
def _probe(release: str) -> dict[str, Any]:
    request = {"jobs": {name: _verl_args(job) for name, job in JOBS.items()}, "alphas": ALPHAS}
    done = subprocess.run(
        [str(verl_python(release)), "-c", PROBE, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("release", RELEASES)
def test_one_response_per_prompt_runs_with_the_reward_as_its_advantage(release: str) -> None:
    probe = _probe(release)
    rewards = [1.0, 0.0, 0.5, -1.0]
    # A group of one: mean 0, std 1, so the advantage is the reward (/ (1 + 1e-6)).
    for norm in (True, False):
        assert probe[f"n1:norm={norm}"] == pytest.approx(rewards, rel=1e-5)
    # Groups of two: each response against the other one.
    assert probe["n2:norm=False"] == pytest.approx([0.5, -0.5, 0.75, -0.75])
    assert probe["job:one-response"]["error"] is None
    job = _job(JOBS["one-response"])
    (note,) = job.notes
    assert "verl-gke:job.rolloutN = 1: verl runs it" in note
    assert "the response's own reward" in note
    assert "pulumi config set --path verl-gke:job.rolloutN 8" in note


@pytest.mark.parametrize("release", RELEASES)
def test_grpo_without_kl_is_accepted_and_builds_no_reference_model(release: str) -> None:
    verdict = _probe(release)["job:no-kl"]
    assert verdict == {"error": None, "use_reference_policy": False}
    job = _job(JOBS["no-kl"])
    assert job.notes == ()
    settings = _settings(JOBS["no-kl"])
    assert not memory_fit_inputs(job.spec, settings.profile, job.model.arch).use_reference


def _lora_job(alpha: str) -> Any:
    return _job(
        {
            "extraOverrides": [
                "actor_rollout_ref.model.lora_rank=32",
                f"actor_rollout_ref.model.lora_alpha={alpha}",
            ]
        }
    )


def _runner_alpha(entrypoint: str) -> str | None:
    words = shlex.split(entrypoint)
    runner = words[: words.index("--")]
    return runner[runner.index("--lora-alpha") + 1] if "--lora-alpha" in runner else None


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("alpha", ALPHAS)
def test_lora_alpha_is_refused_where_verls_model_config_refuses_it(
    release: str, alpha: str
) -> None:
    verl = _probe(release)[f"alpha:{alpha}"]
    if verl["error"] is None:
        # The plan takes it and the export scales the adapter by exactly verl's value.
        assert _runner_alpha(_lora_job(alpha).entrypoint) == str(verl["value"])
        return
    assert "could not be converted to Integer" in verl["error"]
    with pytest.raises(GrpoPreflightError) as caught:
        _lora_job(alpha)
    (problem,) = caught.value.problems
    assert f"actor_rollout_ref.model.lora_alpha={alpha}: verl declares lora_alpha an integer" in (
        problem
    )
    fix = problem.split("Fix: item 'actor_rollout_ref.model.lora_alpha=", 1)[1].split("'")[0]
    # The fix is one verl takes (an integer, checked above for 32) and the plan then accepts.
    assert fix.isdigit()
    assert _runner_alpha(_lora_job(fix).entrypoint) == fix

"""`verl-gke:job.extraOverrides`: what the preflight refuses, with a fix that is itself accepted.

Rules of Hydra (hydra-core 1.3.2, verl's pin) and verl (v0.6.1, ddbcdb7) encoded here; each is
also run through verl's own compose and validate_config in tests/test_verl_config_compose.py:
- A dict value given for a group is merged into it: `trainer={nnodes:4}` sets trainer.nnodes
  (measured there: verl composes it to nnodes 4), so it must not pass the owned-settings guard.
- A key the composed config lacks cannot be set without `+`; an existing key cannot be added
  with `+`; a section with `_target_` becomes a dataclass that refuses an unknown field.
- verl refuses a deprecated micro-batch key set together with its per-GPU successor.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from config.profiles import PROFILES, Mode
from config.settings import load_settings
from training.assembly import TrainingJob, training_job
from training.grpo_preflight import preflight
from training.grpo_spec import (
    GrpoPreflightError,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    modelled_keys,
)
from training.model_facts import table_facts
from training.verl_keys import KEY_FILE_FOR_REF, KEYS_DIR, config_keys, extra_override_problems

A4_REF = PROFILES["a4"].verl_ref


def _default(profile: str = "a4") -> GrpoSpec:
    p = PROFILES[profile]
    return default_grpo_spec(p, Mode.STANDARD, p.default_gpu_nodes)


def _accepted(job: dict[str, Any], profile: str = "a4") -> GrpoSpec:
    """`job` passes every check this module covers, and the preflight."""
    p = PROFILES[profile]
    spec = apply_overrides(_default(profile), job)
    assert extra_override_problems(spec, p.verl_ref) == []
    preflight(
        spec,
        gpus_per_node_provisioned=p.gpus_per_node,
        gpu_nodes_provisioned=p.default_gpu_nodes,
        model=table_facts("Qwen/Qwen2.5-32B-Instruct").arch,
    )
    return spec


def _refused(extra: list[str]) -> str:
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {"extraOverrides": extra})
    return str(caught.value)


# --- owned keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "fix", "fixed_job"),
    [
        (
            "trainer={total_epochs:3}",
            "Fix: instead, set verl-gke:job.totalEpochs to 3",
            {"totalEpochs": 3},
        ),
        (
            "trainer={default_local_dir:/checkpoints/other,val_only:false}",
            "Fix: instead, set verl-gke:job.defaultLocalDir to /checkpoints/other and "
            "'trainer.val_only=false'",
            {"defaultLocalDir": "/checkpoints/other", "extraOverrides": ["trainer.val_only=false"]},
        ),
    ],
)
def test_a_dict_override_into_an_owned_group_is_refused_with_a_fix_that_passes(
    extra: str, fix: str, fixed_job: dict[str, Any]
) -> None:
    message = _refused([extra])
    assert f"verl-gke:job.extraOverrides[0] = {extra!r}: trainer is a group" in message
    assert fix in message
    _accepted(fixed_job)


@pytest.mark.parametrize(
    "extra",
    [
        "actor_rollout_ref={actor:{ppo_micro_batch_size_per_gpu:4}}",
        "actor_rollout_ref.actor={optim:{lr:1e-5}}",
        "++trainer={nnodes:4}",
    ],
)
def test_any_override_of_a_group_holding_an_owned_key_is_refused(extra: str) -> None:
    message = _refused([extra])
    assert "is a group holding keys this program sets" in message
    assert "Fix: give each key on its own" in message or "Fix: instead" in message


def test_a_group_override_of_the_world_size_names_gpu_nodes() -> None:
    # trainer.nnodes is derived from verl-gke:gpuNodes (verl waits for nnodes x n_gpus_per_node).
    message = _refused(["trainer={nnodes:2}"])
    assert "Fix: instead, set verl-gke:gpuNodes to 2" in message


def test_a_key_inside_an_owned_value_is_refused() -> None:
    message = _refused(["+trainer.logger.extra=1"])
    assert "trainer.logger.extra lies inside trainer.logger, which verl-gke:job.logger sets" in (
        message
    )
    _accepted({"logger": ["console", "file"]})


def test_every_owned_key_and_every_group_above_it_is_refused() -> None:
    for key in modelled_keys():
        parts = key.split(".")
        for end in range(1, len(parts) + 1):
            group = ".".join(parts[:end])
            assert "extraOverrides[0]" in _refused([f"{group}=1"]), group


def test_resume_mode_must_stay_auto() -> None:
    # RayPPOTrainer._load_checkpoint resumes from the experiment folder only in mode auto
    # (verl/trainer/ppo/ray_trainer.py, v0.6.1); the per-experiment folder relies on it.
    message = _refused(["trainer.resume_mode=disable"])
    assert "trainer.resume_mode must stay auto (verl's default) or be resume_path" in message
    assert "Fix: remove it; to start afresh set verl-gke:job.experimentName" in message
    _accepted({"extraOverrides": ["trainer.resume_mode=auto"]})
    _accepted({"experimentName": "fresh-start"})


def test_resume_path_is_accepted_on_a_path_the_ray_workers_see() -> None:
    # verl 0.6.1 and 0.9.0 (_load_checkpoint) load <resume_from_path>/actor on every attempt;
    # the Ray workers see the bucket only at its mounts. verl's own asserts on the path are the
    # rehearsal's (tests/test_rehearsal.py).
    at = "/checkpoints/grpo/w16-0123abcd/global_step_40"
    _accepted(
        {"extraOverrides": ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={at}"]}
    )
    message = _refused(
        ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/tmp/global_step_40"]
    )
    assert "extraOverrides[1]" in message and "/checkpoints/" in message


# --- verl's keys ---------------------------------------------------------------------------------


def _fixed(extra: list[str], message: str, index: int) -> list[str]:
    """extraOverrides with the fix the message gives for item `index` applied."""
    use = re.search(r"(?:Use|Fix:) '([^']+)'", message)
    rest = [o for i, o in enumerate(extra) if i != index]
    return [*rest[:index], use[1], *rest[index:]] if use else rest


@pytest.mark.parametrize("ref", sorted(KEY_FILE_FOR_REF))
@pytest.mark.parametrize(
    ("extra", "why", "fix"),
    [
        (
            "actor_rollout_ref.rollout.max_num_seq=512",
            "has no key actor_rollout_ref.rollout.max_num_seq",
            "did you mean actor_rollout_ref.rollout.max_num_seqs? "
            "Use 'actor_rollout_ref.rollout.max_num_seqs=512'",
        ),
        (
            "+actor_rollout_ref.rollout.max_num_seq=512",
            "a section verl turns into a dataclass",
            "Use 'actor_rollout_ref.rollout.max_num_seqs=512'",
        ),
        (
            "+actor_rollout_ref.rollout.max_num_seqs=512",
            "Hydra refuses to add ('+') a key that exists",
            "Fix: 'actor_rollout_ref.rollout.max_num_seqs=512'",
        ),
        (
            "trainer.nnode=2",
            "has no key trainer.nnode",
            "did you mean trainer.nnodes? It is set by verl-gke:gpuNodes: set that instead",
        ),
        ("+trainer.critic_warmup.x=1", "holds a value, not a group", "Fix: remove it"),
        ("no_such_group.key=1", "has no key no_such_group.key", "Fix: remove it"),
        (
            "actor_rollout_ref.actor.ppo_micro_batch_size=16",
            "refuses a job that sets both actor_rollout_ref.actor.ppo_micro_batch_size",
            "Fix: remove it; the micro-batch is set per GPU by "
            "verl-gke:job.ppoMicroBatchSizePerGpu",
        ),
        (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size=16",
            "refuses a job that sets both actor_rollout_ref.rollout.log_prob_micro_batch_size",
            "verl-gke:job.rolloutLogProbMicroBatchSizePerGpu",
        ),
        (
            "actor_rollout_ref.ref.log_prob_micro_batch_size=16",
            "refuses a job that sets both actor_rollout_ref.ref.log_prob_micro_batch_size",
            "verl-gke:job.refLogProbMicroBatchSizePerGpu",
        ),
    ],
)
def test_what_verl_refuses_is_refused_with_a_fix_that_passes(
    ref: str, extra: str, why: str, fix: str
) -> None:
    extras = ["trainer.project_name=sweep", extra]
    spec = apply_overrides(_default(), {"extraOverrides": extras})
    problems = extra_override_problems(spec, ref)
    assert len(problems) == 1
    assert problems[0].startswith(f"verl-gke:job.extraOverrides[1] = {extra!r}: ")
    assert why in problems[0] and fix in problems[0]
    fixed = apply_overrides(_default(), {"extraOverrides": _fixed(extras, problems[0], 1)})
    assert extra_override_problems(fixed, ref) == []


@pytest.mark.parametrize("ref", sorted(KEY_FILE_FOR_REF))
@pytest.mark.parametrize(
    "extra",
    [
        "actor_rollout_ref.rollout.max_num_seqs=512",
        "++actor_rollout_ref.rollout.max_num_seqs=512",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager=true",
        "+my_group.note=x",
        "+trainer.note=x",
        "hydra.job.chdir=false",
        # verl checks the pair only without dynamic batch sizes (FSDPActorConfig.__post_init__).
        "actor_rollout_ref.actor.use_dynamic_bsz=true,actor_rollout_ref.actor.ppo_micro_batch_size=16",
    ],
)
def test_what_verl_accepts_is_accepted(ref: str, extra: str) -> None:
    spec = apply_overrides(_default(), {"extraOverrides": extra.split(",")})
    assert extra_override_problems(spec, ref) == []


def test_every_stack_ref_has_a_key_file_that_names_its_source() -> None:
    for profile in PROFILES.values():
        name = KEY_FILE_FOR_REF[profile.verl_ref]
        header = (KEYS_DIR / f"{name}.txt").read_text().split("\n# Kinds")[0]
        assert f"verl {name}'s composed PPO trainer config" in header
        assert "Source: " in header
        # Every modelled key is one of verl's: the program never sets a key verl lacks.
        assert set(modelled_keys()) <= set(config_keys(name)), name


def test_the_a4x_key_file_is_within_the_release_that_contains_its_commit() -> None:
    # ddbcdb7 is not on PyPI, so CI cannot regenerate its file; v0.9.0 contains the commit and
    # is regenerated from its wheel (tests/test_verl_config_compose.py). Every key of the
    # commit's config is in 0.9.0's with the same kind; 0.9.0 only adds keys.
    commit, release = config_keys("ddbcdb7"), config_keys("0.9.0")
    assert {k: release.get(k) for k in commit} == dict(commit)
    assert 0 < len(release) - len(commit) < 100


def test_an_unknown_ref_is_not_checked() -> None:
    spec = apply_overrides(_default(), {"extraOverrides": ["no_such_group.key=1"]})
    assert extra_override_problems(spec, A4_REF)
    assert extra_override_problems(spec, "v0.7.0") == []


# --- through the stack's settings ---------------------------------------------------------------

_STACK_CONFIG = {
    "gcp:project": "my-project-123",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-reservation",
    "verl-gke:hfToken": "hf_abcdefghijklmnopqrstuvwxyz0123456789",
}


def _job(stack: str, job: dict[str, object]) -> TrainingJob:
    config = {**_STACK_CONFIG, "verl-gke:job": json.dumps(job)}
    return training_job(load_settings(stack, config, offline=False).settings)


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_the_stack_checks_extra_overrides_against_its_own_verl_ref(stack: str) -> None:
    job = {"extraOverrides": ["actor_rollout_ref.rollout.max_num_seq=512"]}
    with pytest.raises(GrpoPreflightError) as caught:
        _job(stack, job)
    key_file = KEY_FILE_FOR_REF[PROFILES[stack].verl_ref]
    assert f"verl {key_file}'s config has no key actor_rollout_ref.rollout.max_num_seq" in str(
        caught.value
    )
    fixed = _job(stack, {"extraOverrides": ["actor_rollout_ref.rollout.max_num_seqs=512"]})
    assert " actor_rollout_ref.rollout.max_num_seqs=512" in fixed.entrypoint


def test_a_key_only_the_release_has_is_refused_on_the_commit_stack() -> None:
    # 0.9.0 added actor_rollout_ref.actor.pad_to_length; A4X's ddbcdb7 lacks it.
    job = {"extraOverrides": ["actor_rollout_ref.actor.pad_to_length=true"]}
    assert "actor_rollout_ref.actor.pad_to_length" in config_keys("0.9.0")
    with pytest.raises(GrpoPreflightError, match="verl ddbcdb7's config has no key"):
        _job("a4x", job)


@pytest.mark.parametrize("ref", sorted(KEY_FILE_FOR_REF))
def test_the_critic_pair_is_refused_only_when_verl_builds_the_critic(ref: str) -> None:
    # CriticConfig.__post_init__ runs when need_critic() is true: critic.enable, when set.
    pair = ["critic.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size=64"]
    off = apply_overrides(_default(), {"extraOverrides": pair})
    assert extra_override_problems(off, ref) == []
    on = apply_overrides(_default(), {"extraOverrides": ["critic.enable=true", *pair]})
    (problem,) = extra_override_problems(on, ref)
    assert problem.startswith("verl-gke:job.extraOverrides[2] = 'critic.ppo_micro_batch_size=64'")
    assert (
        "Fix: remove it; the micro-batch is set per GPU by critic.ppo_micro_batch_size_per_gpu=4"
        in problem
    )

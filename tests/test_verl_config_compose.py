"""Every stack's GRPO command composes against verl's own Hydra config, and verl's own checks accept
it, at the verl release the stack runs.

The overrides are the ones the Ray job runs (`render_entrypoint`, split as the job's shell splits
it). verl_scripts/verl_compose_check.py composes them against the packaged `ppo_trainer` config
of a real verl wheel, as `main_ppo` does, then runs verl's `validate_config` and the worker-side
config dataclasses. It runs in an isolated virtualenv per verl release
(requirements-verl-<version>.txt), which .ci/setup builds under .venv-verl/<version> and names in
VERL_GKE_VERL_VENVS.

Which release stands for a stack's verl ref:
- v0.6.1 (A4, A3 Ultra) is a release: verl 0.6.1 from PyPI. All five jobs also
  pass verl 0.6.1's checks, so the A4X job is composed there too.
- ddbcdb7 (A4X) is a commit on verl's main (2026-07-09, "[veomni] fix: use default moe param
  handler (#6993)"; `git describe`: v0.8.0-164-gddbcdb79f). Its nearest release is v0.9.0: v0.9.0
  contains it (134 commits later, against 164 since v0.8.0), its version file already reads
  0.9.0.dev, it declares v0.9.0's numpy>=2 floor, and its config has v0.9.0's `trainer.use_v1`
  switch, which v0.8.0 lacks. By changed lines of the generated ppo_trainer.yaml v0.8.0 is a
  little closer (64 against 83). Checked once by hand: the five jobs also compose and validate
  against the commit's own config code, and against v0.8.0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from config.profiles import PROFILES, Mode
from tests.support.require import missing
from tests.support.verl_check import start_check
from training.grpo_preflight import preflight
from training.grpo_spec import (
    GrpoPreflightError,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    render_entrypoint,
)
from training.memory_fit import ModelArch
from training.model_facts import table_facts
from training.verl_keys import KEYS_DIR, extra_override_problems

# Runs verl's own config code in the verl virtualenvs (subprocesses).
pytestmark = pytest.mark.integration

VENVS_ENV = "VERL_GKE_VERL_VENVS"
REPO = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = REPO / "verl_scripts" / "verl_compose_check.py"
KEYS_SCRIPT = REPO / "maintenance" / "verl_config_keys.py"
# Keys every case reports the composed value of, besides its own overrides.
REPORTED = ["trainer.resume_mode"]

# A profile's verl ref -> the PyPI release whose packaged config stands for it (module docstring).
RELEASE_FOR_REF = {"v0.6.1": "0.6.1", "ddbcdb7": "0.9.0"}
# Every job also composes and validates against verl v0.6.1.
BASELINE_RELEASE = "0.6.1"
# Keys whose composed type may differ from the type of verl's default, and why.
TYPE_CHANGES_ALLOWED = {
    # The tutorial passes one backend; verl's Tracking wraps a string in a list.
    "trainer.logger": ("list", "str"),
}
STACKS = [(p.name, m) for p in PROFILES.values() for m in p.modes]
ALL_RELEASES = sorted({BASELINE_RELEASE, *RELEASE_FOR_REF.values()})


TUTORIAL_MODEL = table_facts("Qwen/Qwen2.5-32B-Instruct").arch


def _spec(profile: str, mode: Mode, gpu_nodes: int | None = None, **job: Any) -> GrpoSpec:
    p = PROFILES[profile]
    nodes = p.default_gpu_nodes if gpu_nodes is None else gpu_nodes
    return apply_overrides(default_grpo_spec(p, mode, nodes), job)


def _overrides(spec: GrpoSpec) -> list[str]:
    """main_ppo's arguments as the Ray job's shell hands them over."""
    args = shlex.split(render_entrypoint(spec))
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return args[3:]


def _releases(profile: str) -> list[str]:
    # A ref missing from RELEASE_FOR_REF fails test_every_profile_ref_has_a_release.
    release = RELEASE_FOR_REF.get(PROFILES[profile].verl_ref)
    return sorted({BASELINE_RELEASE, *([release] if release else [])})


def _cases(release: str) -> dict[str, list[str]]:
    """Every job that must pass at `release`, plus the negative cases."""
    cases = {f"{p}:{m}": _overrides(_spec(p, m)) for p, m in STACKS if release in _releases(p)}
    cases["misspelled-key"] = [*_overrides(_spec("a4", Mode.STANDARD)), "trainer.nnode=2"]
    cases["batch-does-not-split"] = _overrides(_unsplittable_batch())
    cases.update(_extra_override_cases(release))
    cases.update(_rule_cases())
    return cases


def _unsplittable_batch() -> GrpoSpec:
    # 3 nodes x 8 GPUs: 256 prompts x 8 responses = 2048 does not split over 24 GPUs.
    return _spec("a4", Mode.STANDARD, gpu_nodes=3)


def _require_venv(release: str) -> None:
    root = os.environ.get(VENVS_ENV)
    if not root:
        reason = (
            f"{VENVS_ENV} is unset: the verl config compose check needs the isolated verl "
            f"virtualenvs that .ci/setup builds (.venv-verl/<version> from "
            f"requirements-verl-<version>.txt)"
        )
        missing(reason)
    python = Path(root) / release / "bin" / "python"
    if not python.is_file():
        pytest.fail(
            f"{VENVS_ENV}={root} has no virtualenv for verl {release} ({python} is missing); "
            f"build it as .ci/setup does: python3 -m venv {Path(root) / release} && {python} -m "
            f"pip install -r requirements-verl-{release}.txt && {python} -m pip install "
            f"--no-deps verl=={release}"
        )


@cache
def _reports() -> dict[str, dict[str, Any] | str]:
    """Each release's report, or why it gave none. The check scripts of all releases run at
    once, one interpreter each: importing verl (torch, ray, transformers) takes seconds."""
    root = Path(os.environ[VENVS_ENV])
    running = {}
    for release in ALL_RELEASES:
        python = root / release / "bin" / "python"
        if python.is_file():
            request = {"cases": _cases(release), "report": REPORTED}
            running[release] = start_check(python, CHECK_SCRIPT, request)
    reports: dict[str, dict[str, Any] | str] = {}
    for release, process in running.items():
        stdout, stderr = process.communicate()
        # 1 means a case was rejected (the negative cases are); anything else is no verdict.
        if process.returncode in (0, 1):
            reports[release] = json.loads(stdout)
        else:
            reports[release] = f"exit {process.returncode}:\n{stderr[-4000:]}"
    return reports


def _verdict(release: str, case: str) -> dict[str, Any]:
    _require_venv(release)
    report = _reports()[release]
    assert not isinstance(report, str), f"{CHECK_SCRIPT.name} under verl {release}: {report}"
    assert report["verl_version"] == release, "the virtualenv holds another verl release"
    return report["results"][case]


def test_every_profile_ref_has_a_release() -> None:
    refs = {p.verl_ref for p in PROFILES.values()}
    missing = refs - set(RELEASE_FOR_REF)
    assert not missing, (
        f"verl refs {sorted(missing)} have no release to compose against: add the nearest "
        f"release to RELEASE_FOR_REF and a requirements-verl-<version>.txt for it"
    )
    # .ci/setup builds one virtualenv per requirements-verl-<release>.txt.
    built = {
        p.name[len("requirements-verl-") : -len(".txt")]
        for p in REPO.glob("requirements-verl-*.txt")
    }
    assert set(ALL_RELEASES) <= built


@pytest.mark.parametrize(
    ("profile", "mode", "release"),
    [(p, m, r) for p, m in STACKS for r in _releases(p)],
    ids=lambda v: str(v),
)
def test_job_composes_and_validates(profile: str, mode: Mode, release: str) -> None:
    verdict = _verdict(release, f"{profile}:{mode}")
    assert verdict["ok"], f"verl {release} rejects the {profile} {mode} job: {verdict['error']}"
    overrides = _overrides(_spec(profile, mode))
    assert set(verdict["values"]) == {o.split("=", 1)[0] for o in overrides} | set(REPORTED)
    # verl resumes from the experiment folder's latest checkpoint only in mode auto
    # (RayPPOTrainer._load_checkpoint): every job keeps it, as docs/grpo-job.md promises.
    assert verdict["values"]["trainer.resume_mode"]["composed"] == "auto"
    for key, value in verdict["values"].items():
        if key in REPORTED:
            continue
        default, composed = value["default_type"], value["type"]
        if default in ("NoneType", composed) or TYPE_CHANGES_ALLOWED.get(key) == (
            default,
            composed,
        ):
            continue
        pytest.fail(f"{key}: verl {release}'s default is a {default}, the job passes a {composed}")


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_a_misspelled_key_is_rejected_by_compose(release: str) -> None:
    verdict = _verdict(release, "misspelled-key")
    assert not verdict["ok"]
    assert verdict["stage"] == "compose"
    assert "trainer.nnode" in verdict["error"]


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_verl_and_our_preflight_both_reject_a_batch_that_does_not_split(release: str) -> None:
    verdict = _verdict(release, "batch-does-not-split")
    assert not verdict["ok"]
    assert verdict["stage"] == "validate"
    assert "real_train_batch_size (2048)" in verdict["error"]
    # Our preflight refuses the same job on 3 provisioned nodes before any resource exists.
    with pytest.raises(GrpoPreflightError, match="trainBatchSize"):
        preflight(
            _unsplittable_batch(),
            gpus_per_node_provisioned=8,
            gpu_nodes_provisioned=3,
            model=TUTORIAL_MODEL,
        )


def test_the_check_script_refuses_a_malformed_request() -> None:
    # Runs under the project's interpreter: input is checked before verl is imported.
    done = subprocess.run(
        [sys.executable, str(CHECK_SCRIPT)],
        input=json.dumps({"cases": {"x": "trainer.nnodes=2"}}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "'cases' must map names to lists of override strings" in done.stderr


# --- the key files the preflight reads ------------------------------------------------------------


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_the_key_file_is_what_verl_composes(release: str) -> None:
    """training/verl_keys/<release>.txt, regenerated from the release's own config: the file
    the preflight checks extraOverrides against cannot drift from verl."""
    _require_venv(release)
    python = Path(os.environ[VENVS_ENV]) / release / "bin" / "python"
    done = subprocess.run(
        [str(python), str(KEYS_SCRIPT)], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-4000:]
    committed = (KEYS_DIR / f"{release}.txt").read_text()
    assert done.stdout == committed, (
        f"training/verl_keys/{release}.txt differs from verl {release}'s config: regenerate it "
        f"with {python} {KEYS_SCRIPT.relative_to(REPO)} > training/verl_keys/{release}.txt"
    )


# --- extraOverrides: what the preflight refuses, verl refuses; each fix, both accept -------------

# The verl ref whose key file the preflight uses, for each release the cases run under.
REF_FOR_RELEASE = {"0.6.1": "v0.6.1", "0.9.0": "ddbcdb7"}
# extraOverrides the preflight refuses (the last item) -> the stage of
# verl_scripts/verl_compose_check.py at which verl refuses them too. The dataclass cases are in
# sections the check converts (the actor in validate_config, the rollout as the FSDP worker
# does). None: verl's config checks accept it; `+trainer.critic_warmup.x=1` replaces the number 0
# with a group {x: 1}, which
# RayPPOTrainer.fit compares with the step number at the first step (ray_trainer.py, v0.6.1).
REFUSED_EXTRAS: dict[str, tuple[list[str], str | None, str]] = {
    "misspelled-nested-key": (
        ["actor_rollout_ref.rollout.max_num_seq=512"],
        "compose",
        "Could not override 'actor_rollout_ref.rollout.max_num_seq'",
    ),
    "append-an-existing-key": (
        ["+actor_rollout_ref.rollout.max_num_seqs=512"],
        "compose",
        "Could not append to config. An item is already at",
    ),
    "append-into-the-rollout-dataclass": (
        ["+actor_rollout_ref.rollout.max_num_seq=512"],
        "worker_config",
        "unexpected keyword argument 'max_num_seq'",
    ),
    "append-into-the-actor-dataclass": (
        ["+actor_rollout_ref.actor.ppo_epoch_s=2"],
        "validate",
        "unexpected keyword argument 'ppo_epoch_s'",
    ),
    "append-below-a-value": (["+trainer.critic_warmup.x=1"], None, ""),
    "actor-micro-batch-pair": (
        ["actor_rollout_ref.actor.ppo_micro_batch_size=16"],
        "validate",
        "You have set both 'actor.ppo_micro_batch_size' AND",
    ),
    "rollout-micro-batch-pair": (
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size=16"],
        "validate",
        "You have set both 'actor_rollout_ref.rollout.log_prob_micro_batch_size' AND",
    ),
    "ref-micro-batch-pair": (
        ["actor_rollout_ref.ref.log_prob_micro_batch_size=16"],
        "validate",
        "You have set both 'actor_rollout_ref.ref.log_prob_micro_batch_size' AND",
    ),
    "critic-micro-batch-pair": (
        [
            "critic.enable=true",
            "critic.ppo_micro_batch_size_per_gpu=4",
            "critic.ppo_micro_batch_size=64",
        ],
        "validate",
        "[critic] You have set both",
    ),
}
# From v0.9.0 verl builds the critic's HFModelConfig (which reads the model's files) before the
# critic's own checks, so with no model here the critic case is checked at 0.6.1 only.
REFUSED_EXTRA_RUNS = [
    (release, name)
    for release in ALL_RELEASES
    for name in sorted(REFUSED_EXTRAS)
    if not (name == "critic-micro-batch-pair" and release != "0.6.1")
]
ACCEPTED_EXTRAS = {
    "set-an-existing-key": ["actor_rollout_ref.rollout.max_num_seqs=512"],
    "force-an-existing-key": ["++actor_rollout_ref.rollout.max_num_seqs=512"],
    "append-into-a-dict": ["+actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager=true"],
    "append-a-new-group": ["+my_group.note=x"],
    "append-into-trainer": ["+trainer.note=x"],
    "pair-with-dynamic-batch-sizes": [
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_micro_batch_size=16",
    ],
}
# A dict value for a group the program owns: what verl would run if the guard let it through.
GROUP_OVERRIDES = {
    "group-sets-nnodes": ("trainer={nnodes:4}", "nnodes", 4),
    "group-sets-checkpoint-dir": (
        "trainer={default_local_dir:/tmp/ckpt}",
        "default_local_dir",
        "/tmp/ckpt",
    ),
}


def _base() -> GrpoSpec:
    return _spec("a4", Mode.STANDARD)


def _extra_fix(release: str, extras: list[str]) -> tuple[str, list[str]]:
    """The preflight's one problem with the last of `extras`, and the extras its fix leaves."""
    spec = apply_overrides(_base(), {"extraOverrides": extras})
    problems = extra_override_problems(spec, REF_FOR_RELEASE[release])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"verl-gke:job.extraOverrides[{len(extras) - 1}] = ")
    use = re.search(r"(?:Use|Fix:) '([^']+)'", problems[0])
    return problems[0], [*extras[:-1], *([use[1]] if use else [])]


def _extra_override_cases(release: str) -> dict[str, list[str]]:
    cases = {}
    base = _overrides(_base())
    for name, (extras, _, _) in REFUSED_EXTRAS.items():
        cases[f"extra:{name}"] = [*base, *extras]
        cases[f"extra:{name}:fix"] = [*base, *_extra_fix(release, extras)[1]]
    for name, extras in ACCEPTED_EXTRAS.items():
        cases[f"extra:{name}"] = [*base, *extras]
    for name, (extra, _, _) in GROUP_OVERRIDES.items():
        cases[f"extra:{name}"] = [*base, extra]
    return cases


@pytest.mark.parametrize(("release", "name"), REFUSED_EXTRA_RUNS)
def test_an_extra_override_the_preflight_refuses_verl_refuses(release: str, name: str) -> None:
    extras, stage, error = REFUSED_EXTRAS[name]
    _, fixed = _extra_fix(release, extras)
    verdict = _verdict(release, f"extra:{name}")
    if stage is None:
        assert verdict["ok"], f"verl {release} now refuses it: {verdict['error']}"
        assert verdict["values"][extras[-1][1:].split("=")[0]]["composed"] == 1
    else:
        assert (verdict["ok"], verdict["stage"]) == (False, stage), verdict["error"]
        assert error in verdict["error"]
    # The fix: the preflight accepts it, and so does verl.
    spec = apply_overrides(_base(), {"extraOverrides": fixed})
    assert extra_override_problems(spec, REF_FOR_RELEASE[release]) == []
    fix = _verdict(release, f"extra:{name}:fix")
    assert fix["ok"], f"verl {release} refuses the fix {fixed}: {fix['error']}"


@pytest.mark.parametrize("release", ALL_RELEASES)
@pytest.mark.parametrize("name", sorted(ACCEPTED_EXTRAS))
def test_an_extra_override_the_preflight_accepts_verl_accepts(release: str, name: str) -> None:
    spec = apply_overrides(_base(), {"extraOverrides": ACCEPTED_EXTRAS[name]})
    assert extra_override_problems(spec, REF_FOR_RELEASE[release]) == []
    verdict = _verdict(release, f"extra:{name}")
    assert verdict["ok"], verdict["error"]


@pytest.mark.parametrize("release", ALL_RELEASES)
@pytest.mark.parametrize("name", sorted(GROUP_OVERRIDES))
def test_a_group_override_would_reach_an_owned_key_so_it_is_refused(
    release: str, name: str
) -> None:
    extra, key, value = GROUP_OVERRIDES[name]
    # Hydra merges the dict into the group: verl would run with the value behind the guard.
    verdict = _verdict(release, f"extra:{name}")
    assert verdict["ok"], verdict["error"]
    composed = verdict["values"]["trainer"]["composed"]
    assert composed[key] == value
    assert composed["project_name"] is not None  # merged, not replaced
    with pytest.raises(GrpoPreflightError, match="trainer is a group holding keys"):
        apply_overrides(_base(), {"extraOverrides": [extra]})


# --- the preflight's own rules, each run through verl's config checks ----------------------------


@dataclass(frozen=True)
class RuleCase:
    """A job the preflight refuses on `gpu_nodes` provisioned a4 nodes, naming `setting`."""

    job: dict[str, Any]
    setting: str
    # The stage at which verl's config checks refuse the job too; None where they accept it,
    # and `owner` says whose rule it is.
    verl_stage: str | None
    owner: str
    gpu_nodes: int = 2
    model: ModelArch = TUTORIAL_MODEL


_WORKER = (
    "verl's FSDP worker at start, after the model is built: it floors ppo_mini_batch_size x n / "
    "GPUs and asserts the result is a whole number of micro-batches (fsdp_workers.py, "
    "ActorRolloutRefWorker.__init__, v0.6.1); it needs torch.distributed and is not run here"
)
RULE_CASES = {
    "train-batch-does-not-split": RuleCase(
        {}, "trainBatchSize", "validate", "verl validate_config", gpu_nodes=3
    ),
    "mini-batch-above-train-batch": RuleCase(
        {"trainBatchSize": 128}, "ppoMiniBatchSize", "validate", "verl ActorConfig.validate"
    ),
    "mini-batch-does-not-split": RuleCase(
        {"ppoMiniBatchSize": 255}, "ppoMiniBatchSize", None, _WORKER
    ),
    "micro-batch-does-not-divide": RuleCase(
        {"ppoMicroBatchSizePerGpu": 24}, "ppoMicroBatchSizePerGpu", None, _WORKER
    ),
    "tp-does-not-divide-the-gpus": RuleCase(
        {"rolloutTensorParallelSize": 3},
        "rolloutTensorParallelSize",
        None,
        "verl's FSDP worker asserts world size % (TP x PP) == 0 when it builds the rollout "
        "(fsdp_workers.py _build_rollout, v0.6.1), after the model loads",
    ),
    "tp-does-not-divide-the-heads": RuleCase(
        {},
        "rolloutTensorParallelSize",
        None,
        "vLLM: the attention heads must divide by the tensor parallel size "
        "(ModelConfig.verify_with_parallel_config); verl does not read the heads",
        model=table_facts("Qwen/Qwen2.5-7B-Instruct").arch,  # 28 heads, 4 KV heads
    ),
    "gpu-memory-utilization-above-one": RuleCase(
        {"gpuMemoryUtilization": 1.2},
        "gpuMemoryUtilization",
        None,
        "vLLM's cache config, when the rollout engine starts",
    ),
    "no-checkpoints": RuleCase(
        {"saveFreq": 0},
        "saveFreq",
        None,
        "this program's: verl runs and saves only when save_freq > 0 (RayPPOTrainer.fit)",
    ),
    "checkpoint-dir-not-shared": RuleCase(
        {"defaultLocalDir": "ckpt"}, "defaultLocalDir", None, "the cluster's: pods share only /data"
    ),
}


def _rule_problems(case: RuleCase, spec: GrpoSpec) -> tuple[str, ...]:
    """Every problem the preflight lists; one of them names `case.setting`."""
    with pytest.raises(GrpoPreflightError) as caught:
        preflight(
            spec,
            gpus_per_node_provisioned=8,
            gpu_nodes_provisioned=case.gpu_nodes,
            model=case.model,
        )
    problems = caught.value.problems
    assert any(p.startswith(f"verl-gke:job.{case.setting} = ") for p in problems), problems
    return problems


def _fix_of(problem: str) -> dict[str, str]:
    """The change a problem's fix asks for, as `verl-gke:job` keys and values."""
    setting = re.match(r"verl-gke:job\.(\w+) = ", problem)
    assert setting, problem
    fix = problem.split("Fix: ", 1)[1]
    # The first command of the fix (training/grpo_spec.py set_command).
    command = re.match(r"pulumi config set --path verl-gke:job\.(\w+) ([^\s,;()]+)", fix)
    assert command, f"no fix to apply in {fix!r}"
    return {command[1]: command[2]}


def _rule_fix(case: RuleCase) -> GrpoSpec:
    """The job with every fix the preflight suggests applied."""
    spec = _spec("a4", Mode.STANDARD, case.gpu_nodes, **case.job)
    change: dict[str, str] = {}
    for problem in _rule_problems(case, spec):
        change.update(_fix_of(problem))
    return apply_overrides(spec, change)


def _rule_cases() -> dict[str, list[str]]:
    cases = {}
    for name, case in RULE_CASES.items():
        cases[f"rule:{name}"] = _overrides(_spec("a4", Mode.STANDARD, case.gpu_nodes, **case.job))
        cases[f"rule:{name}:fix"] = _overrides(_rule_fix(case))
    return cases


@pytest.mark.parametrize("release", ALL_RELEASES)
@pytest.mark.parametrize("name", sorted(RULE_CASES))
def test_each_preflight_rule_against_verls_own_checks(release: str, name: str) -> None:
    case = RULE_CASES[name]
    _rule_problems(case, _spec("a4", Mode.STANDARD, case.gpu_nodes, **case.job))
    verdict = _verdict(release, f"rule:{name}")
    if case.verl_stage is None:
        # Not one of verl's config checks (case.owner says whose rule it is): verl accepts it,
        # so no message of ours may say verl refuses it at start.
        assert verdict["ok"], f"verl {release} now refuses it: {verdict['error']}"
    else:
        assert (verdict["ok"], verdict["stage"]) == (False, case.verl_stage), verdict["error"]
    # The fix the preflight suggests: the preflight accepts it, and so do verl's checks.
    fixed = _rule_fix(case)
    preflight(
        fixed,
        gpus_per_node_provisioned=8,
        gpu_nodes_provisioned=case.gpu_nodes,
        model=case.model,
    )
    fix = _verdict(release, f"rule:{name}:fix")
    assert fix["ok"], f"verl {release} refuses the fix: {fix['error']}"

"""The start-up model (planning/startup_links.py, planning/startup_schedule.py) over the real
program's recorded graphs.

Structural properties only, no timing: every link has a source, levers never slow the start,
all levers together save at least 10 minutes on every stack/mode, the arm64 stack gets no
image-streaming saving (undocumented there), the durations follow what the recorded program
says and the run's own facts come from its settings and GRPO spec (validation before training,
init containers, the model), and the levers are recognised in a graph that implements them.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from config.profiles import PROFILES
from planning.offline_engine import PlanResult, RecordedResource
from planning.startup_links import (
    ALL_LEVERS,
    LEVER_SOURCES,
    NO_LEVERS,
    Lever,
    is_grpo,
    job_facts,
    levers_in_graph,
    links,
    model_weights,
    ray_jobs,
    startup_facts,
)
from planning.startup_schedule import Schedule, schedule
from tests.program import COMBINATIONS, REAL, plan, run_facts
from tools.plan import planned_settings
from training.assembly import training_job
from training.model_facts import model_facts, table_facts

MODEL = table_facts("Qwen/Qwen2.5-32B-Instruct")

REPO = Path(__file__).resolve().parent.parent
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
# With every lever on, at least this many minutes off today's figure.
TARGET_SAVING_MIN = 10.0
SUBSETS = [
    frozenset(combo)
    for size in range(len(Lever) + 1)
    for combo in itertools.combinations(Lever, size)
]


def modelled(stack: str, mode: str, levers: Iterable[Lever] = NO_LEVERS) -> Schedule:
    return schedule(plan(stack, mode), run_facts(stack, mode), levers)


def link_keys(result: Schedule) -> set[str]:
    return {link.key for link in result.links.all()}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_link_has_a_source_and_an_estimate_flag(stack: str, mode: str) -> None:
    for levers in SUBSETS:
        table = modelled(stack, mode, levers).links
        for link in table.all():
            assert link.source.strip(), f"{stack}/{mode} {levers}: {link.key} has no source"
            assert isinstance(link.estimate, bool)
            assert link.minutes >= 0
            # A value a lever set names that lever, and the lever is on.
            assert link.lever is None or link.lever in levers
    for lever in Lever:
        assert LEVER_SOURCES[lever].strip()


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_chain_is_split_into_its_real_links(stack: str, mode: str) -> None:
    keys = link_keys(modelled(stack, mode))
    assert {
        "cluster",
        "gpu-nodes",
        "gpu-driver",
        "image-pull",
        "ray-start",
        "job-submit",
        "fabric-check",
        "verl-import",
        "actor-load",
        "ref-load",
        "vllm-start",
        "first-step",
    } <= keys
    # The critical path ends with the GRPO job's links up to its first step.
    path = modelled(stack, mode).path
    assert path[-1].links[-1].key == "first-step"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_all_levers_save_at_least_ten_minutes(stack: str, mode: str) -> None:
    today = modelled(stack, mode).overlapped
    best = modelled(stack, mode, ALL_LEVERS).overlapped
    assert today - best >= TARGET_SAVING_MIN, (stack, mode, today, best)


# The critical path in minutes, today and with every lever, worked by hand from the links' sourced
# durations along the path the recorded graph takes (VPC, subnet, cluster, GPU nodes, workers,
# fabric check, GRPO job). Actor load: ~1,200 s untuned / ~40 s tuned for ~141 GB (Google's
# gcsfuse recipe) scaled to Qwen2.5-32B's 66 GB, + 0.5 min FSDP: 66/141 x 20 + 0.5 = 9.862,
# 66/141 x 0.667 + 0.5 = 0.812.
# Standard today: 0.5 + 0.5 + cluster 6 + default-pool delete 3 + GPU nodes 35 + driver 0.5 +
#   image pull 6 + wait for the NCCL installer 0.75 + verl copy 0.75 + ray start 0.3 + fabric
#   check (submit 0.5 + 1) + GRPO (submit 0.5 + verl import 1 + actor 9.862 + ref 0.7 + vLLM 1.5 +
#   first step 3) = 71.362 (each init container of the worker image counts 0.75).
# A4X adds the IMEX channel 0.5, the post-start pip 0.3 and validation before training 1.5:
#   73.662. Autopilot: 0.5 + 0.5 + cluster 10 + KubeRay release 1.5 + RayCluster object 0.1 +
#   GPU nodes 35 + driver 0.5 + pull 6 + gIB setup 0.75 + verl copy 0.75 + ray start 0.3 + 1.5 +
#   16.562 = 73.962.
# Every lever: no default pool (-3, Standard), pull 6 -> 0.5 with pre-pull and streaming
#   (Standard; A4X pre-pulls only, arm64 streaming undocumented: 5.5; Autopilot streams: 1.0),
#   verl import 1 -> 0.1 and actor load 9.862 -> 0.812 with the tuned mount.
CRITICAL_PATH_MIN = {
    ("a4x", "standard"): (73.662, 73.662 - 3 - 0.5 - 0.9 - 9.05),
    ("a4", "standard"): (71.362, 71.362 - 3 - 5.5 - 0.9 - 9.05),
    ("a3u", "standard"): (71.362, 71.362 - 3 - 5.5 - 0.9 - 9.05),
    ("a4", "autopilot"): (73.962, 73.962 - 5.0 - 0.9 - 9.05),
    ("a3u", "autopilot"): (73.962, 73.962 - 5.0 - 0.9 - 9.05),
}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_critical_path_minutes_match_the_hand_derivation(stack: str, mode: str) -> None:
    today, best = CRITICAL_PATH_MIN[(stack, mode)]
    assert modelled(stack, mode).overlapped == pytest.approx(today, abs=0.01)
    assert modelled(stack, mode, ALL_LEVERS).overlapped == pytest.approx(best, abs=0.01)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_no_lever_ever_makes_the_start_slower(stack: str, mode: str) -> None:
    figure = {levers: modelled(stack, mode, levers).overlapped for levers in SUBSETS}
    for levers in SUBSETS:
        for lever in Lever:
            assert figure[levers | {lever}] <= figure[levers] + 1e-9, (levers, lever)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_saving_is_traced_to_a_lever_link(stack: str, mode: str) -> None:
    today = modelled(stack, mode)
    for lever in Lever:
        alone = modelled(stack, mode, {lever})
        saving = today.overlapped - alone.overlapped
        changed = [link for link in alone.links.all() if link.lever is lever]
        if saving > 0:
            assert changed, f"{lever} saves {saving:.1f} min without a link that says so"
            assert lever not in alone.links.not_applied
        if lever in alone.links.not_applied:
            assert saving == 0 and not changed
            assert alone.links.not_applied[lever].strip()


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_overlap_is_modelled_not_summed(stack: str, mode: str) -> None:
    for levers in (NO_LEVERS, ALL_LEVERS):
        result = modelled(stack, mode, levers)
        assert result.chain <= result.overlapped + 1e-9
        assert result.overlapped < result.sequential
        assert 0 < result.estimated_minutes <= result.overlapped + 1e-9


def test_arm64_gets_no_image_streaming_saving_and_pre_pulls_instead() -> None:
    arm = [(s, m) for s, m in COMBINATIONS if PROFILES[s].arch == "arm64"]
    assert arm, "the profile table has an arm64 stack (a4x)"
    for stack, mode in arm:
        today = modelled(stack, mode)
        streaming = modelled(stack, mode, {Lever.IMAGE_STREAMING})
        assert streaming.overlapped == today.overlapped
        assert "arm64" in streaming.links.not_applied[Lever.IMAGE_STREAMING]
        assert modelled(stack, mode, {Lever.PREPULL}).overlapped < today.overlapped
    for stack, mode in COMBINATIONS:
        if PROFILES[stack].arch == "amd64":
            saving = (
                modelled(stack, mode).overlapped
                - modelled(stack, mode, {Lever.IMAGE_STREAMING}).overlapped
            )
            assert saving > 0, (stack, mode)


def test_mode_specific_levers() -> None:
    for stack, mode in COMBINATIONS:
        result = modelled(stack, mode, ALL_LEVERS)
        skipped = set(result.links.not_applied)
        if mode == "autopilot":
            assert {Lever.PREPULL, Lever.NO_DEFAULT_POOL} <= skipped
            assert "default-pool-delete" not in link_keys(result)
        else:
            assert not skipped & {Lever.PREPULL, Lever.NO_DEFAULT_POOL}
            assert "default-pool-delete" in link_keys(modelled(stack, mode))


# --- the durations follow the recorded program ------------------------------------------------


def with_inputs(result: PlanResult, type_: str, change: Any, name: str | None = None) -> PlanResult:
    """A copy of a recorded result whose one resource of `type_` has `change(inputs)` applied."""
    target = result.one(type_, name)
    inputs = copy.deepcopy(dict(target.inputs))
    change(inputs)
    resources = [
        dataclasses.replace(r, inputs=inputs) if r.urn == target.urn else r
        for r in result.resources
    ]
    return dataclasses.replace(result, resources=resources)


def grpo_job(result: PlanResult) -> RecordedResource:
    return next(
        r
        for r in result.resources
        if r.type.startswith("pulumi-python:dynamic")
        and "verl.trainer.main_ppo" in str(r.inputs.get("entrypoint", ""))
    )


def test_validation_before_training_follows_the_job() -> None:
    for stack, mode in COMBINATIONS:
        facts = startup_facts(plan(stack, mode), run_facts(stack, mode))
        # The fact from the spec agrees with the command verl runs.
        entrypoint = str(grpo_job(plan(stack, mode)).inputs["entrypoint"])
        assert facts.val_before_train == ("trainer.val_before_train=False" not in entrypoint)
        assert ("validation" in link_keys(modelled(stack, mode))) == facts.val_before_train
    # Turning it on in an x86 job adds the link and the minutes.
    recorded = plan("a3u", "standard")
    job = run_facts("a3u", "standard")
    before = schedule(recorded, job)
    after = schedule(recorded, dataclasses.replace(job, val_before_train=True))
    assert "validation" in link_keys(after) and "validation" not in link_keys(before)
    assert after.overlapped > before.overlapped


def test_the_run_facts_come_from_the_spec() -> None:
    settings = planned_settings("a3u", {**REAL, "verl-gke:mode": "standard"}, strict=True)
    spec = training_job(settings).spec
    # verl's trainer.val_before_train defaults to True; the reference policy is built for a KL
    # loss or a KL reward (verl trainer/main_ppo.py adds the RefPolicy role for either).
    unset = spec.model_copy(
        update={"val_before_train": None, "use_kl_loss": None, "use_kl_in_reward": None}
    )
    assert job_facts(settings, unset, MODEL).val_before_train is True
    assert job_facts(settings, unset, MODEL).reference_model is False
    kl_reward = unset.model_copy(update={"use_kl_in_reward": True})
    assert job_facts(settings, kl_reward, MODEL).reference_model is True
    off = unset.model_copy(update={"val_before_train": False})
    assert job_facts(settings, off, MODEL).val_before_train is False
    job_model = training_job(settings).model
    assert job_facts(settings, spec, job_model).weights == model_weights(MODEL)


def test_worker_start_links_follow_the_ray_cluster() -> None:
    for stack, mode in COMBINATIONS:
        recorded = plan(stack, mode)
        pod = recorded.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]
        keys = link_keys(modelled(stack, mode))
        for init in pod["spec"].get("initContainers", []):
            assert f"init-{init['name']}" in keys
        post_start = "postStart" in (pod["spec"]["containers"][0].get("lifecycle") or {})
        assert ("post-start-pip" in keys) == post_start
        assert ("imex" in keys) == PROFILES[stack].multi_node_nvlink


def test_model_size_scales_the_load_and_unknown_models_fail_clearly() -> None:
    # The seed (gke-verl-grpo-tutorial): the Qwen2.5-32B-Instruct download "needs about 66 GB".
    assert model_weights(table_facts("Qwen/Qwen2.5-32B-Instruct")).gigabytes == 66.0
    # huggingface.co/Qwen/Qwen2.5-7B-Instruct: 7.62 B parameters in bf16 safetensors, ~15 GB.
    small = model_weights(table_facts("Qwen/Qwen2.5-7B-Instruct"))
    assert small.estimate and small.gigabytes == 15.0
    settings = planned_settings("a3u", {"verl-gke:model": "acme/my-model"}, strict=False)
    with pytest.raises(ValueError, match="verl-gke:modelConfig"):
        model_facts(settings)
    facts = startup_facts(plan("a3u", "standard"), run_facts("a3u", "standard"))
    big = links(facts).grpo[1]
    smaller = links(dataclasses.replace(facts, weights=small)).grpo[1]
    assert big.key == smaller.key == "actor-load"
    assert smaller.minutes < big.minutes


def test_arch_is_checked() -> None:
    job = dataclasses.replace(run_facts("a3u", "standard"), arch="x86")
    with pytest.raises(ValueError, match="arch"):
        startup_facts(plan("a3u", "standard"), job)


# --- levers recognised in a graph that implements them ----------------------------------------


def _worker_template(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return inputs["spec"]["workerGroupSpecs"][0]["template"]


def test_levers_in_graph_recognises_each_lever() -> None:
    recorded = plan("a3u", "standard")
    base = levers_in_graph(recorded, "amd64")
    worker_image = _worker_template(recorded.one(RAY_CLUSTER).inputs)["spec"]["containers"][0][
        "image"
    ]

    # no_default_pool: the program creates its CPU pool inline; a cluster that removes a
    # default pool does not have the lever.
    assert Lever.NO_DEFAULT_POOL in base

    def remove_default(inputs: dict[str, Any]) -> None:
        inputs.pop("nodePools", None)
        inputs["removeDefaultNodePool"] = True
        inputs["initialNodeCount"] = 1

    cluster_type = "gcp:container/cluster:Cluster"
    found = levers_in_graph(with_inputs(recorded, cluster_type, remove_default), "amd64")
    assert Lever.NO_DEFAULT_POOL not in found

    # prepull: a DaemonSet whose pod uses the worker image.
    def preload(inputs: dict[str, Any]) -> None:
        inputs["spec"]["template"]["spec"].setdefault("initContainers", []).append(
            {"name": "preload", "image": worker_image, "command": ["true"]}
        )

    daemon_set = "kubernetes:apps/v1:DaemonSet"
    assert (
        Lever.PREPULL in levers_in_graph(with_inputs(recorded, daemon_set, preload), "amd64") - base
    )

    # image_streaming: Artifact Registry image and (Standard) gcfsConfig on the GPU pool - the
    # x86 program has both; either one alone is not the lever.
    assert Lever.IMAGE_STREAMING in base
    assert worker_image.startswith("us-central1-docker.pkg.dev/acme-ml-prod/")

    def docker_hub(inputs: dict[str, Any]) -> None:
        _worker_template(inputs)["spec"]["containers"][0]["image"] = "verlai/verl:vllm011.latest"

    def no_gcfs(inputs: dict[str, Any]) -> None:
        inputs["nodeConfig"].pop("gcfsConfig")

    pool = "gcp:container/nodePool:NodePool"
    unstreamed = with_inputs(recorded, pool, no_gcfs, "gpu-pool")
    assert Lever.IMAGE_STREAMING not in levers_in_graph(unstreamed, "amd64")
    hub = with_inputs(recorded, RAY_CLUSTER, docker_hub)
    assert Lever.IMAGE_STREAMING not in levers_in_graph(hub, "amd64")
    autopilot = plan("a3u", "autopilot")
    assert Lever.IMAGE_STREAMING in levers_in_graph(autopilot, "amd64")
    autopilot_hub = with_inputs(autopilot, RAY_CLUSTER, docker_hub)
    assert Lever.IMAGE_STREAMING not in levers_in_graph(autopilot_hub, "amd64")
    # A4X (no streaming on arm64): the program pre-pulls instead.
    assert Lever.PREPULL in levers_in_graph(plan("a4x", "standard"), "arm64")

    # fuse_tuned: node-local verl, sized sidecar, read-mostly cached mount - the program has all
    # three; undoing any one of them loses the lever.
    assert Lever.FUSE_TUNED in base

    def verl_on_fuse(inputs: dict[str, Any]) -> None:
        inputs["runtime_env"]["env_vars"]["PYTHONPATH"] = "/data/verl"

    def default_sidecar(inputs: dict[str, Any]) -> None:
        annotations = _worker_template(inputs)["metadata"]["annotations"]
        for key in [k for k in annotations if k.endswith(("-limit", "-request"))]:
            del annotations[key]

    def uncached(inputs: dict[str, Any]) -> None:
        options = inputs["spec"]["mountOptions"]
        inputs["spec"]["mountOptions"] = [
            "metadata-cache-ttl-secs=0" if o == "metadata-cache-ttl-secs=-1" else o for o in options
        ]

    job = grpo_job(recorded)
    pv = "kubernetes:core/v1:PersistentVolume"
    undo = [
        lambda r: with_inputs(r, job.type, verl_on_fuse, job.name),
        lambda r: with_inputs(r, RAY_CLUSTER, default_sidecar),
        lambda r: with_inputs(r, pv, uncached, "storage-pv"),
    ]
    for step in undo:
        assert Lever.FUSE_TUNED not in levers_in_graph(step(recorded), "amd64")


@pytest.mark.integration  # a fresh interpreter (subprocess) shows what the import pulls in
def test_the_model_imports_without_pulumi() -> None:
    # The offline plan imports the model; neither module may pull in Pulumi or the engine.
    code = (
        "import sys; import planning.startup_links, planning.startup_schedule, "
        "bench.critical_path; "
        "heavy = [m for m in ('pulumi', 'planning.offline_engine', 'ray') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_cli_prints_every_combination_and_its_sources(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import critical_path

    assert critical_path.main() == 0
    out = capsys.readouterr().out
    for stack, mode in COMBINATIONS:
        assert f"{stack}/{mode}:" in out
    for lever in Lever:
        assert LEVER_SOURCES[lever] in out
    assert "Sources:" in out


# --- the rehearsal on the way to the first step ---------------------------------------------

REHEARSAL_PARTS = ("rehearsal-job", "rehearsal-verdict")


def without_rehearsal(result: PlanResult) -> PlanResult:
    """The recorded program minus the rehearsal Job and its verdict: the graph before it."""
    gone = {r.urn for r in result.resources if r.name in REHEARSAL_PARTS}
    assert len(gone) == len(REHEARSAL_PARTS)
    kept = [r for r in result.resources if r.urn not in gone]
    return dataclasses.replace(result, resources=kept)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_on_a_reservation_the_rehearsal_adds_under_two_minutes(stack: str, mode: str) -> None:
    """Reserved GPU nodes bill anyway: they are created alongside data prep and the rehearsal,
    which keeps the time to the first step within 2 minutes of the program without it."""
    result = plan(stack, mode)
    levers = levers_in_graph(result, PROFILES[stack].arch)
    facts = run_facts(stack, mode)
    with_it = schedule(result, facts, levers).overlapped
    before = schedule(without_rehearsal(result), facts, levers).overlapped
    assert before <= with_it <= before + 2.0


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "autopilot")])
def test_outside_a_reservation_the_gpu_nodes_start_after_the_rehearsal(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode, unset=("verl-gke:reservation",), **{"verl-gke__capacity": "spot"})
    timed = schedule(result, run_facts(stack, mode), levers_in_graph(result, PROFILES[stack].arch))
    names = [step.name for step in timed.path]
    # data prep, then the rehearsal and its verdict, then the GPU nodes: all on the longest path.
    assert names.index("data-prep-job") < names.index("rehearsal-job")
    assert names.index("rehearsal-verdict") < names.index(
        "gpu-pool" if mode == "standard" else "ray-cluster"
    )


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "autopilot")])
def test_outside_a_reservation_the_weights_download_overlaps_the_gpu_nodes(
    stack: str, mode: str
) -> None:
    """The rehearsal waits for data prep's inputs Job, not its weights Job (it loads the
    tokenizer and config only), so the GPU nodes after its verdict overlap the download; the
    GRPO job still waits for the weights."""
    result = plan(stack, mode, unset=("verl-gke:reservation",), **{"verl-gke__capacity": "spot"})
    job = "kubernetes:batch/v1:Job"
    inputs, weights = result.one(job, "data-prep-job"), result.one(job, "model-weights-job")
    rehearsal = result.one(job, "rehearsal-job")
    grpo = next(r for r in ray_jobs(result) if is_grpo(r))
    assert result.depends_on(rehearsal, inputs) and not result.depends_on(rehearsal, weights)
    assert result.depends_on(weights, inputs) and result.depends_on(grpo, weights)
    timed = schedule(result, run_facts(stack, mode), levers_in_graph(result, PROFILES[stack].arch))
    names = [step.name for step in timed.path]
    assert "data-prep-job" in names and "model-weights-job" not in names

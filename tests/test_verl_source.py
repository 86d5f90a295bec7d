"""A change of what runs verl reaches the Ray pods, and a ref the image cannot run is refused.

Rules encoded, each with its source:
- KubeRay rolls a RayCluster's pods only with spec.upgradeStrategy.type Recreate, when the spec's
  hash (without replicas, tolerations, scheduling gates) changes
  (ray-operator/controllers/ray/raycluster_controller.go shouldRecreatePodsForUpgrade and
  utils/util.go GenerateHashWithoutReplicasAndWorkersToDelete, KubeRay v1.7.0); the field exists
  from v1.6.0 (ray-operator/apis/ray/v1/raycluster_types.go). So the verl ref must change that
  hash: it is in the verl copy's script of the pod template.
- data prep's marker records the repo and ref it checked out (payloads/data_prep/prep_verl.py
  verl_inputs, the marker's "inputs"); the copy takes only a tree of this job's ref.
- verl's vllm extra: 0.6.1 vllm>=0.8.5,<=0.11.0, 0.9.0 vllm>=0.18.0 (each wheel's METADATA).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from config import run_inputs, verl_source
from config.bucket_layout import verl_checkout_folder
from config.profiles import PROFILES, Mode
from config.settings import SettingsError, config_key, load_settings
from manifests import fuse_mounts
from payloads.data_prep import prep_verl
from tests.program import COMBINATIONS, REAL, plan
from tests.support.require import verl_installed
from training.grpo_spec import DRIVER_SET_ENV, default_grpo_spec, render_runtime_env

RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
V09 = {"verl-gke__verlRef": "v0.9.0", "verl-gke__verlImage": "verlai/verl:vllm024.latest"}
GOOD = {**REAL, "verl-gke:mode": "standard"}
SPOT = {"verl-gke__capacity": "spot"}


def _refusal(**config: str) -> str:
    values = {**GOOD, **{f"verl-gke:{k}": v for k, v in config.items()}}
    with pytest.raises(SettingsError) as error:
        load_settings("a3u", values, offline=False)
    return str(error.value)


def _pod_templates(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    return [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]


def test_a_new_verl_ref_changes_every_pod_template_and_the_job() -> None:
    old, new = plan("a3u", "standard"), plan("a3u", "standard", **V09)
    old_cluster = dict(old.one(RAY_CLUSTER).inputs)
    new_cluster = dict(new.one(RAY_CLUSTER).inputs)
    for cluster in (old_cluster, new_cluster):
        assert cluster["spec"]["upgradeStrategy"] == {"type": "Recreate"}
    for before, after in zip(_pod_templates(old_cluster), _pod_templates(new_cluster), strict=True):
        copy_before = before["spec"]["initContainers"]
        copy_after = after["spec"]["initContainers"]
        assert copy_before != copy_after
        assert any("v0.9.0" in c["args"][0] for c in copy_after)
    old_env = old.one(RAY_JOB, "grpo-job").inputs["runtime_env"]["env_vars"]
    new_env = new.one(RAY_JOB, "grpo-job").inputs["runtime_env"]["env_vars"]
    assert old_env[verl_source.VERL_SOURCE_ENV].endswith(" at v0.6.1")
    assert new_env[verl_source.VERL_SOURCE_ENV].endswith(" at v0.9.0")


# The RayCluster fields KubeRay leaves out of the hash whose change recreates every pod
# (ray-operator/controllers/ray/utils/util.go GenerateHashWithoutReplicasAndWorkersToDelete,
# KubeRay v1.7.0; ScaleStrategy holds only workersToDelete, apis/ray/v1/raycluster_types.go).
KUBERAY_UNHASHED = (
    "replicas",
    "minReplicas",
    "maxReplicas",
    "scaleStrategy",
    "tolerations",
    "schedulingGates",
    "upgradeStrategy",
)


@pytest.mark.parametrize(
    ("stack", "mode", "capacity"),
    [
        *((stack, mode, "stack's own") for stack, mode in COMBINATIONS),
        # Autoscaled workers (the ignored replica fields); A4X is reservation-bound.
        *((stack, mode, "spot") for stack, mode in COMBINATIONS if stack != "a4x"),
    ],
)
def test_every_change_kuberay_recreates_the_pods_for_resubmits_the_job(
    stack: str, mode: str, capacity: str
) -> None:
    # KubeRay's Recreate deletes the head, and with it the running Ray job, whenever the hashed
    # spec changes. Every such change must also resubmit the job: Pulumi replaces the RayCluster
    # on any change under `spec` (replaceOnChanges), except the paths it ignores, which must be
    # ones KubeRay leaves out of the hash, and the job is replaced with the cluster (replaceWith).
    if capacity == "spot":
        result = plan(stack, mode, unset=("verl-gke:reservation",), **SPOT)
    else:
        result = plan(stack, mode)
    cluster = result.one(RAY_CLUSTER)
    assert "spec" in cluster.replace_on_changes and cluster.delete_before_replace
    for path in cluster.ignore_changes:
        assert path.startswith("spec.") and path.rsplit(".", 1)[-1] in KUBERAY_UNHASHED, path
    if capacity == "spot":
        assert cluster.ignore_changes  # the autoscaler's fields: the case the rule is about
    assert cluster.urn in result.one(RAY_JOB, "grpo-job").replace_with


def test_a_ref_the_images_vllm_cannot_run_is_refused_naming_one_that_can() -> None:
    message = _refusal(verlRef="v0.9.0")
    assert "verl-gke:verlRef = 'v0.9.0' with verl-gke:verlImage = 'verlai/verl:vllm011.latest'" in (
        message
    )
    assert "needs vLLM >= 0.18" in message and "vLLM 0.11" in message
    assert "pulumi config set verl-gke:verlImage verlai/verl:vllm024.latest -s a3u" in message
    # The fix it offers is accepted.
    values = {
        **GOOD,
        "verl-gke:verlRef": "v0.9.0",
        "verl-gke:verlImage": V09["verl-gke__verlImage"],
    }
    assert load_settings("a3u", values, offline=False).settings.verl_ref == "v0.9.0"


def test_an_operator_without_upgrade_strategy_is_refused() -> None:
    message = _refusal(kuberayChartVersion="1.5.2")
    assert "exists from KubeRay 1.6.0" in message
    assert "pulumi config set verl-gke:kuberayChartVersion 1.7.0 -s a3u" in message
    assert verl_source.chart_rolls_pods("1.6.0") and not verl_source.chart_rolls_pods("1.5.2")


@pytest.mark.parametrize("version", ["1.5.3", "1.4.9", "1.0.1", "1.5.2", "1.6.5", "1.70.0"])
def test_every_chart_fix_offered_is_accepted(version: str) -> None:
    # Two rules judge the chart version: it must be published (config/known_values.py) and have
    # upgradeStrategy (KubeRay >= 1.6.0). The fix each offers must pass both.
    message = _refusal(kuberayChartVersion=version)
    fixes = re.findall(r"pulumi config set verl-gke:kuberayChartVersion (\S+) -s a3u", message)
    assert fixes, message
    for fix in fixes:
        values = {**GOOD, "verl-gke:kuberayChartVersion": fix}
        assert load_settings("a3u", values, offline=False).settings.kuberay_chart_version == fix


@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_the_vllm_table_is_verls_own_requirement(release: str) -> None:
    metadata = (verl_installed(release, "verl-*.dist-info") / "METADATA").read_text()
    line = next(row for row in metadata.splitlines() if row.startswith("Requires-Dist: vllm"))
    bounds = dict(re.findall(r"(>=|<=)0\.(\d+)", line))
    wanted = verl_source.VLLM_FOR_REF[f"v{release}"]
    assert wanted.lo == int(bounds[">="])
    assert wanted.hi == (int(bounds["<="]) if "<=" in bounds else None)
    assert wanted.accepts(verl_source.image_vllm_minor(wanted.image) or -1)


# -- the verl copy's script, run by bash against a marker --------------------------------------


STACK = "a4"


def _copy_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, markers: list[dict[str, Any]]
) -> tuple[str, Path]:
    """The copy script for v0.9.0 with data prep's marker of each of `markers` (its inputs) in
    place, and the node-local folder it copies into."""
    checkout, local, prep = tmp_path / "verl", tmp_path / "local", tmp_path / "markers"
    (checkout / "verl").mkdir(parents=True)
    (checkout / "verl" / "__init__.py").write_text("")
    local.mkdir()
    prep.mkdir()
    for given in markers:
        inputs = {"dir": verl_checkout_folder(STACK), **given}
        name = prep_verl.verl_marker_name(inputs["repo"], inputs["ref"], inputs["dir"])
        (prep / f"{name}.done").write_text(json.dumps({"step": name, "inputs": inputs}))
    monkeypatch.setattr(fuse_mounts, "PREP_MARKERS", str(prep))
    monkeypatch.setattr(fuse_mounts, "verl_checkout", lambda stack: str(checkout))
    monkeypatch.setattr(fuse_mounts, "VERL_NODE_LOCAL", str(local))
    return fuse_mounts.verl_copy_script(verl_source.VERL_REPO, "v0.9.0", STACK), local


def _copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, markers: list[dict[str, Any]]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the copy script to its end (the deadline only ends a hang: a slow machine passes)."""
    script, local = _copy_script(tmp_path, monkeypatch, markers)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    return done, local


@pytest.mark.integration
def test_the_copy_takes_only_a_tree_of_its_own_ref(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = verl_source.VERL_REPO
    done, local = _copy(tmp_path, monkeypatch, [{"repo": repo, "ref": "v0.9.0"}])
    out = done.stdout
    assert done.returncode == 0, out
    assert (local / "verl" / "__init__.py").is_file()
    assert f"{repo} at v0.9.0" in out


@pytest.mark.integration
@pytest.mark.parametrize(
    "markers",
    [
        [],
        [{"repo": verl_source.VERL_REPO, "ref": "v0.6.1"}],
        # The same ref, another stack's checkout in the same bucket.
        [{"repo": verl_source.VERL_REPO, "ref": "v0.9.0", "dir": "verl-src/other"}],
    ],
)
def test_the_copy_waits_while_the_marker_is_absent_or_of_another_ref(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, markers: list[dict[str, Any]]
) -> None:
    script, local = _copy_script(tmp_path, monkeypatch, markers)
    waiting = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout is not None
        # The script checks, says it waits, then sleeps: its first "waiting" line means the
        # first check found no marker of its own. The deadline only ends a hang.
        line = ""
        deadline = time.monotonic() + 300
        while "waiting for data prep" not in line and time.monotonic() < deadline:
            line = waiting.stdout.readline()
            assert line or waiting.poll() is None, "the copy ended instead of waiting"
        assert "waiting for data prep" in line and "at v0.9.0" in line
        assert waiting.poll() is None  # still waiting
        assert not any(local.iterdir())
    finally:
        waiting.kill()
        waiting.wait()


@pytest.mark.integration
def test_the_copy_of_a_new_ref_waits_for_a_marker_name_the_old_ref_never_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verlRef change: the old ref's marker is in place when the new pods start (a marker a
    pod has read stays in its mount's metadata cache, an absent one is looked up again: Cloud
    Storage FUSE "Stat caching"), so the new ref's copy must wait on another name, and run once
    data prep wrote it, the old one still there."""
    repo = verl_source.VERL_REPO
    old, new = {"repo": repo, "ref": "v0.6.1"}, {"repo": repo, "ref": "v0.9.0"}
    assert fuse_mounts.verl_prep_marker(repo, "v0.6.1", STACK) != fuse_mounts.verl_prep_marker(
        repo, "v0.9.0", STACK
    )
    # Alone, the old ref's marker keeps the copy waiting (the test above); beside the new
    # ref's, the copy runs.
    done, local = _copy(tmp_path, monkeypatch, [old, new])
    assert done.returncode == 0, done.stdout
    assert (local / "verl" / "__init__.py").is_file()
    assert Path(fuse_mounts.verl_prep_marker(repo, "v0.6.1", STACK)).is_file()  # _copy's folder


@pytest.mark.parametrize(
    ("ref", "key"),
    [
        # 0.9.0's main_ppo reads reward.custom_reward_function (reward/reward.yaml, 0.9.0 wheel);
        # a later release tag reads it there too.
        ("v0.9.0", "reward.custom_reward_function"),
        ("v0.9.1", "reward.custom_reward_function"),
        ("v0.10.0", "reward.custom_reward_function"),
        # v0.7.0 still reads the top-level key (verl/trainer/ppo/reward.py get_custom_reward_fn).
        ("v0.7.0", "custom_reward_function"),
    ],
)
def test_the_reward_goes_where_the_refs_main_ppo_reads_it(ref: str, key: str) -> None:
    assert run_inputs.reward_config_key(ref, "v0.6.1") == key


def test_the_env_clash_check_reads_the_stacks_ref() -> None:
    profile = PROFILES["a4"]  # pins v0.6.1, whose driver sets no env var of its own
    nccl = {**profile.nccl_env[Mode.STANDARD], "NCCL_ALGO": "Ring"}
    with_algo = dataclasses.replace(profile, nccl_env={Mode.STANDARD: nccl})
    spec = default_grpo_spec(profile, Mode.STANDARD, profile.default_gpu_nodes)
    assert render_runtime_env(spec, with_algo, Mode.STANDARD)["env_vars"]["NCCL_ALGO"] == "Ring"
    with pytest.raises(ValueError, match="NCCL_ALGO"):
        render_runtime_env(spec, with_algo, Mode.STANDARD, "v0.9.0")


def test_the_090_driver_env_is_verls() -> None:
    # verl/trainer/constants_ppo.py get_ppo_ray_runtime_env in the 0.9.0 wheel.
    source = (verl_installed("0.9.0", "verl/trainer") / "constants_ppo.py").read_text()
    body = source[source.index("def get_ppo_ray_runtime_env") :]
    for key in DRIVER_SET_ENV["v0.9.0"]:
        assert f'"{key}"' in body, key


def test_the_keys_verl_source_names_are_the_settings_keys() -> None:
    # config/verl_source.py imports nothing of config/settings.py (values flow one way).
    assert verl_source.VERL_IMAGE_KEY == config_key("verl_image")
    assert verl_source.KUBERAY_CHART_KEY == config_key("kuberay_chart_version")
    assert verl_source.VERL_REF_KEY == config_key("verl_ref")

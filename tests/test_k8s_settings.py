"""Settings and profile facts the Kubernetes layer adds: defaults, overrides and validation."""

from __future__ import annotations

from datetime import date

import pytest

from config import known_values
from config.profiles import PROFILES, Mode
from config.settings import SettingsError, load_settings

GOOD = {
    "gcp:project": "my-project-123",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-reservation",
    "verl-gke:hfToken": "hf_abc",
}


def load(stack: str = "a4x", **changes: str):
    return load_settings(stack, {**GOOD, **changes}, offline=False).settings


def error_of(stack: str = "a4x", **changes: str) -> str:
    with pytest.raises(SettingsError) as caught:
        load(stack, **changes)
    return str(caught.value)


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_kubernetes_layer_defaults(stack: str) -> None:
    settings = load(stack)
    assert settings.kuberay_chart_version == "1.7.0"
    # Not the seed's 25.3.1 (its DeviceClasses are resource.k8s.io/v1beta1 only); 25.12.0 for
    # the ComputeDomain daemon on GKE (docs/real-systems.md, "NVIDIA DRA driver version").
    assert settings.dra_driver_chart_version == "25.12.0"
    assert settings.nccl_installer_image == PROFILES[stack].nccl_installer_image
    # The data-prep Job runs on the x86 CPU pool, so its image is x86 for every profile.
    assert settings.data_prep_image == "verlai/verl:vllm011.latest"


def test_pinned_installer_images_per_architecture() -> None:
    assert PROFILES["a4x"].nccl_installer_image == (
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib-arm64:v1.1.0"
    )
    for stack in ("a4", "a3u"):
        assert PROFILES[stack].nccl_installer_image == (
            "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1"
        )


def test_ray_shapes_follow_seed_and_tutorial() -> None:
    a4x = PROFILES["a4x"]
    assert (a4x.ray_head.cpu, a4x.ray_head.memory, a4x.ray_head.ephemeral_storage) == (
        "12",
        "32Gi",
        "20Gi",
    )
    worker = a4x.ray_workers[Mode.STANDARD]
    assert (worker.cpu, worker.memory, worker.ephemeral_storage, worker.shared_memory) == (
        "120",
        "600Gi",
        "500Gi",
        "200Gi",
    )
    assert a4x.ray_head_on_gpu_nodes and a4x.multi_node_nvlink
    for stack in ("a4", "a3u"):
        profile = PROFILES[stack]
        assert not profile.ray_head_on_gpu_nodes and not profile.multi_node_nvlink
        standard = profile.ray_workers[Mode.STANDARD]
        assert (standard.cpu, standard.memory, standard.shared_memory) == ("220", "2800Gi", "250Gi")
        autopilot = profile.ray_workers[Mode.AUTOPILOT]
        assert (autopilot.cpu, autopilot.memory, autopilot.ephemeral_storage) == (
            "180",
            "2000Gi",
            "1000Gi",
        )
        # Every mode the profile supports has a worker shape.
        assert set(profile.ray_workers) == set(profile.modes)


def test_overrides_are_used() -> None:
    settings = load(
        "a4",
        **{
            "verl-gke:ncclInstallerImage": "example.com/gib:v2",
            "verl-gke:dataPrepImage": "example.com/prep@sha256:" + "0" * 64,
            "verl-gke:kuberayChartVersion": "1.6.1",
        },
    )
    assert settings.nccl_installer_image == "example.com/gib:v2"
    assert settings.data_prep_image.endswith("0" * 64)
    assert settings.kuberay_chart_version == "1.6.1"


@pytest.mark.parametrize(
    ("key", "value", "fix"),
    [
        ("verl-gke:ncclInstallerImage", "example.com/gib", "nccl-plugin-gib-arm64:v1.1.0"),
        ("verl-gke:dataPrepImage", "verlai/verl", "verlai/verl:vllm011.latest"),
        ("verl-gke:kuberayChartVersion", "latest", "kuberayChartVersion 1.7.0"),
        ("verl-gke:draDriverChartVersion", "25.3", "draDriverChartVersion 25.3.2"),
    ],
)
def test_bad_image_or_chart_version_rejected(key: str, value: str, fix: str) -> None:
    message = error_of("a4x", **{key: value})
    assert f"{key} = {value!r}" in message
    assert fix in message and "pulumi config set" in message


@pytest.mark.parametrize("version", ["25.3.1", "v25.3.0", "25.3.0-rc.5", "24.12.9"])
def test_dra_driver_charts_that_need_beta_apis_are_rejected_on_a4x(version: str) -> None:
    # They would fail `helm install` on the cluster, after four GPU nodes exist.
    message = error_of("a4x", **{"verl-gke:draDriverChartVersion": version})
    assert f"verl-gke:draDriverChartVersion = {version!r}" in message
    assert "resource.k8s.io/v1beta1" in message
    assert "pulumi config set verl-gke:draDriverChartVersion 25.3.2 -s a4x" in message


@pytest.mark.parametrize("version", ["25.3.2", "v25.3.2", "25.8.1", "25.12.0"])
def test_dra_driver_charts_from_25_3_2_are_accepted(version: str) -> None:
    assert load("a4x", **{"verl-gke:draDriverChartVersion": version}).dra_driver_chart_version == (
        version
    )


def test_dra_driver_chart_floor_applies_only_where_the_driver_is_installed() -> None:
    # x86 stacks install no DRA driver, so an old value there is harmless.
    assert load("a4", **{"verl-gke:draDriverChartVersion": "25.3.1"}).dra_driver_chart_version == (
        "25.3.1"
    )


def test_a_kuberay_chart_beyond_what_can_have_been_released_is_refused() -> None:
    # 1.70.0 (issue 25): 63 minors past 1.7.0; the table's rule, known_values.py.
    message = error_of("a4", **{"verl-gke:kuberayChartVersion": "1.70.0"})
    assert "verl-gke:kuberayChartVersion = '1.70.0': not a release of the chart" in message
    assert "pulumi config set verl-gke:kuberayChartVersion 1.7.0 -s a4" in message
    assert load("a4", **{"verl-gke:kuberayChartVersion": "1.7.0"}).kuberay_chart_version == "1.7.0"


@pytest.mark.parametrize(
    ("version", "today", "refused"),
    [
        ("1.8.0", date(2026, 8, 20), False),  # the next minor may follow at once
        ("1.9.0", date(2026, 8, 20), True),
        ("1.9.0", date(2026, 11, 19), False),  # three months on, one more
        ("1.7.3", date(2026, 8, 20), False),  # a patch of the newest minor
        ("2.0.0", date(2026, 8, 20), False),  # a new major may come at any time
        ("3.0.0", date(2026, 8, 20), True),
    ],
)
def test_the_kuberay_release_window_allows_one_minor_per_three_months(
    version: str, today: date, refused: bool
) -> None:
    # KubeRay tag dates (ray-project/kuberay v1.0.0 ... v1.7.0, 2023-11-05 ... 2026-08-19): no
    # two minors within four months, so one per three months is an upper bound.
    problem = known_values.chart_version_problem(
        version,
        known_values.KUBERAY_CHART_VERSIONS,
        known_values.KUBERAY_CHART_VERSIONS,
        known_values.KUBERAY_CHART_VERSIONS_READ,
        today,
    )
    assert (problem is not None) == refused, problem


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("gs://my-bucket", "my-bucket"),
        ("gs://my-bucket/runs", "my-bucket"),
        ("My-Bucket", "my-bucket"),
    ],
)
def test_a_bucket_name_is_fixed_to_the_bucket_the_user_meant(typed: str, meant: str) -> None:
    # Issue 30: the fix corrects the mistake, never substitutes another bucket.
    message = error_of("a4", **{"verl-gke:bucketName": typed})
    assert f"pulumi config set verl-gke:bucketName {meant} -s a4" in message
    assert load("a4", **{"verl-gke:bucketName": meant}).bucket_name == meant


def test_another_project_s_reservation_is_accepted_as_a_shared_one_with_how_to_check() -> None:
    # Compute Engine "Shared reservations": only a reservation the owner shares with this project
    # (shareSettings.projectMap) can be consumed by it.
    other = "projects/other-proj/reservations/r"
    loaded = load_settings("a4x", {**GOOD, "verl-gke:reservation": other}, offline=False)
    (notice,) = [n for n in loaded.notices if "belongs to project 'other-proj'" in n]
    project = GOOD["gcp:project"]
    assert f"only if other-proj shares it with {project}" in notice
    assert "gcloud compute reservations describe r --project=other-proj" in notice
    own = f"projects/{project}/reservations/r"
    loaded = load_settings("a4x", {**GOOD, "verl-gke:reservation": own}, offline=False)
    assert not [n for n in loaded.notices if "belongs to project" in n]

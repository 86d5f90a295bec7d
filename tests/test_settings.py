"""Every validation rule rejects bad input with the key, the value and the fix."""

from __future__ import annotations

import pytest

from config.profiles import PROFILES, Mode
from config.settings import SettingsError, load_settings, valid_keys

GOOD = {
    "gcp:project": "my-project-123",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-reservation",
    "verl-gke:hfToken": "hf_abc",
}


def load(stack: str = "a4x", offline: bool = False, **changes: str | None):
    config = {**GOOD, **changes}
    return load_settings(stack, {k: v for k, v in config.items() if v is not None}, offline=offline)


def error_of(stack: str = "a4x", offline: bool = False, **changes: str | None) -> str:
    with pytest.raises(SettingsError) as caught:
        load(stack, offline, **changes)
    return str(caught.value)


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_defaults_per_profile(stack: str) -> None:
    settings = load(stack).settings
    profile = PROFILES[stack]
    assert settings.profile is profile
    assert settings.gpu_nodes == profile.default_gpu_nodes
    assert settings.mode is profile.default_mode
    assert settings.verl_image == profile.verl_image
    assert settings.cluster_name == f"verl-{stack}"
    assert settings.bucket_name == f"my-project-123-verl-{stack}"
    assert settings.release_channel == ("RAPID" if settings.mode is Mode.AUTOPILOT else "REGULAR")


def test_profile_table_facts() -> None:
    a4x, a4, a3u = PROFILES["a4x"], PROFILES["a4"], PROFILES["a3u"]
    assert (a4x.machine_type, a4x.gpu_type, a4x.gpus_per_node) == (
        "a4x-highgpu-4g",
        "nvidia-gb200",
        4,
    )
    assert (a4.machine_type, a4.gpu_type, a4.gpus_per_node) == ("a4-highgpu-8g", "nvidia-b200", 8)
    assert (a3u.machine_type, a3u.gpu_type) == ("a3-ultragpu-8g", "nvidia-h200-141gb")
    assert a4x.modes == (Mode.STANDARD,)
    assert a4.default_mode is Mode.AUTOPILOT and a3u.default_mode is Mode.STANDARD
    assert (a4x.verl_image, a4x.verl_ref, a4x.ray_version) == (
        "verlai/verl:vllm023.aarch64.dev1",
        "ddbcdb7",
        "2.49.0",
    )
    assert (a4.verl_image, a4.verl_ref, a4.ray_version) == (
        "verlai/verl:vllm011.latest",
        "v0.6.1",
        "2.47.0",
    )
    assert a4.nccl_env[Mode.STANDARD]["NCCL_TUNER_CONFIG_PATH"].endswith("tuner_config_a4.txtpb")
    assert a3u.nccl_env[Mode.STANDARD]["NCCL_TUNER_CONFIG_PATH"].endswith("tuner_config_a3u.txtpb")
    assert a4.nccl_env[Mode.AUTOPILOT]["NCCL_CONF_FILE"].endswith("nccl.a4.conf")
    assert a3u.nccl_env[Mode.AUTOPILOT]["NCCL_CONF_FILE"].endswith("nccl.a3u.conf")
    assert a4x.nccl_env[Mode.STANDARD]["NCCL_ENV_PLUGIN"] == "gcp"


def test_a4x_autopilot_rejected() -> None:
    message = error_of(**{"verl-gke:mode": "autopilot"})
    assert "verl-gke:mode = 'autopilot'" in message
    assert "pulumi config set verl-gke:mode standard -s a4x" in message


def test_unknown_mode_rejected() -> None:
    message = error_of("a4", **{"verl-gke:mode": "auto"})
    assert "verl-gke:mode = 'auto'" in message and "standard" in message


def test_zone_outside_region() -> None:
    message = error_of(**{"verl-gke:zone": "europe-west4-b"})
    assert "verl-gke:zone = 'europe-west4-b' is not in gcp:region 'us-central1'" in message
    assert "pulumi config set gcp:region europe-west4 -s a4x" in message


def test_malformed_zone() -> None:
    message = error_of(**{"verl-gke:zone": "us-central1"})
    assert "verl-gke:zone = 'us-central1': not a zone name" in message
    assert "us-central1-b" in message


def test_a4x_requires_reservation() -> None:
    message = error_of(**{"verl-gke:reservation": None})
    assert "verl-gke:reservation is not set" in message
    assert "pulumi config set verl-gke:reservation" in message


def test_x86_runs_without_reservation() -> None:
    assert load("a3u", **{"verl-gke:reservation": None}).settings.reservation is None


@pytest.mark.parametrize(
    "value", ["my-res/reservationBlocks/block-1", "projects/other-proj/reservations/r1"]
)
def test_reservation_forms_accepted(value: str) -> None:
    assert load(**{"verl-gke:reservation": value}).settings.reservation == value


def test_bad_reservation_rejected() -> None:
    assert "verl-gke:reservation = 'My_Res'" in error_of(**{"verl-gke:reservation": "My_Res"})


@pytest.mark.parametrize(
    ("stack", "nodes", "fix"),
    [("a4x", "0", "1"), ("a4x", "19", "18"), ("a3u", "-2", "1"), ("a4", "65", "64")],
)
def test_gpu_node_bounds(stack: str, nodes: str, fix: str) -> None:
    message = error_of(stack, **{"verl-gke:gpuNodes": nodes})
    assert f"verl-gke:gpuNodes = {int(nodes)}" in message
    assert f"pulumi config set verl-gke:gpuNodes {fix} -s {stack}" in message


def test_a4x_max_is_one_nvl72_domain() -> None:
    assert load(**{"verl-gke:gpuNodes": "18"}).settings.total_gpus == 72
    assert "NVL72" in error_of(**{"verl-gke:gpuNodes": "19"})


def test_gpu_nodes_not_a_number() -> None:
    assert "verl-gke:gpuNodes = 'four'" in error_of(**{"verl-gke:gpuNodes": "four"})


def test_missing_hf_token_rejected_for_real_deploys() -> None:
    message = error_of(**{"verl-gke:hfToken": None})
    assert "verl-gke:hfToken is not set" in message
    assert "pulumi config set --secret verl-gke:hfToken" in message


def test_hf_token_never_printed() -> None:
    message = error_of(**{"verl-gke:hfToken": "hf_supersecret", "verl-gke:gpuNodes": "99"})
    assert "hf_supersecret" not in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verl-gke:clusterName", "Verl_Cluster"),
        ("verl-gke:clusterName", "v" * 41),
        ("verl-gke:clusterName", "1verl"),
        ("verl-gke:bucketName", "goog-checkpoints"),
        ("verl-gke:bucketName", "my-google-bucket"),
        ("verl-gke:bucketName", "ab"),
        ("verl-gke:bucketName", "b" * 64),
        ("verl-gke:bucketName", "Upper-Case"),
        ("verl-gke:namespace", "Training"),
        ("verl-gke:ksaName", "ray_sa"),
        ("gcp:project", "Bad_Project"),
    ],
)
def test_names_gke_and_gcs_reject(key: str, value: str) -> None:
    message = error_of(**{key: value})
    assert f"{key} = {value!r}" in message


def test_derived_bucket_name_too_long_names_the_setting() -> None:
    message = error_of(
        **{"gcp:project": "a-very-long-project-id-123456", "verl-gke:clusterName": "c" * 40}
    )
    assert "verl-gke:bucketName" in message and "pulumi config set verl-gke:bucketName" in message


def test_unknown_key_suggests_closest() -> None:
    message = error_of(**{"verl-gke:gpuNode": "4"})
    assert "verl-gke:gpuNode is not a setting" in message
    assert "did you mean verl-gke:gpuNodes?" in message


def test_unknown_key_without_close_match_lists_keys() -> None:
    message = error_of(**{"verl-gke:frobnicate": "1"})
    assert "verl-gke:zone" in message and "verl-gke:gpuNodes" in message


def test_other_namespaces_are_not_ours() -> None:
    assert load(
        **{"gcp:zone": "us-central1-c", "pulumi:disable-default-providers": '["kubernetes"]'}
    )


def test_every_problem_reported_at_once() -> None:
    message = error_of(
        **{
            "verl-gke:mode": "autopilot",
            "verl-gke:gpuNodes": "40",
            "verl-gke:zone": "europe-west4-a",
        }
    )
    assert message.count("\n  - ") == 3


def test_cpu_pool_needs_highmem_16() -> None:
    message = error_of(**{"verl-gke:cpuMachineType": "n2-standard-8"})
    assert "verl-gke:cpuMachineType = 'n2-standard-8'" in message
    # The fix keeps the family the user chose.
    assert "Fix: pulumi config set verl-gke:cpuMachineType n2-highmem-16 -s a4x" in message


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_kubernetes_version_is_a_floor_defaulting_to_the_profile_minimum(stack: str) -> None:
    settings = load(stack).settings
    floor = PROFILES[stack].kubernetes_floor(settings.mode)
    assert settings.kubernetes_version == floor
    # GKE managed DRANET: Standard 1.34.1-gke.1829001, Autopilot 1.35.2-gke.1842000.
    expected = {"a4x": "1.34.1-gke.1829001", "a4": "1.35.2-gke.1842000", "a3u": "1.34"}
    assert floor == expected[stack]


@pytest.mark.parametrize("version", ["1.35", "1.34.2", "1.34.1-gke.1829001", "1.37"])
def test_kubernetes_version_floor_accepts_the_dranet_floor_and_later(version: str) -> None:
    assert load(**{"verl-gke:kubernetesVersion": version}).settings.kubernetes_version == version


@pytest.mark.parametrize(
    "version", ["1.31", "1.33", "1.34", "1.34.1", "1.33.9-gke.100", "1.3", "2.0", "latest"]
)
def test_kubernetes_version_below_floor_or_malformed_rejected(version: str) -> None:
    message = error_of(**{"verl-gke:kubernetesVersion": version})
    assert f"verl-gke:kubernetesVersion = '{version}'" in message
    assert "1.34.1-gke.1829001 or later" in message
    assert "the release channel picks the actual version" in message
    assert "Fix: pulumi config set verl-gke:kubernetesVersion 1.34.1-gke.1829001 -s a4x" in message


def test_autopilot_floor_is_the_autopilot_dranet_version() -> None:
    message = error_of("a4", **{"verl-gke:kubernetesVersion": "1.35.1"})
    assert "1.35.2-gke.1842000 or later for a4 on autopilot" in message
    assert load("a4", **{"verl-gke:kubernetesVersion": "1.35.2-gke.1842000"})


def test_overlapping_ranges_rejected() -> None:
    message = error_of(**{"verl-gke:podsCidr": "192.168.64.0/18"})
    assert "verl-gke:podsCidr" in message and "overlaps" in message


def test_unknown_profile_for_custom_stack_name() -> None:
    message = error_of("prod")
    assert "verl-gke:profile = 'prod'" in message and "a4x|a4|a3u" in message
    assert load("prod", **{"verl-gke:profile": "a3u"}).settings.profile_name == "a3u"


@pytest.mark.parametrize("key", ["gcp:project", "verl-gke:zone", "verl-gke:reservation"])
def test_placeholder_rejected_for_real_deploy(key: str) -> None:
    message = error_of(**{key: "<set-me>"})
    assert f"{key} = '<set-me>' is still the placeholder from Pulumi.a4x.yaml" in message
    assert f"pulumi config set {key}" in message


def test_placeholders_planned_offline_with_notices() -> None:
    loaded = load(
        offline=True,
        **{
            "gcp:project": "<p>",
            "verl-gke:zone": "<z>",
            "verl-gke:reservation": "<r>",
            "verl-gke:hfToken": None,
        },
    )
    assert loaded.settings.project == "example-project"
    assert loaded.settings.zone == "us-central1-b"
    assert len(loaded.notices) == 4
    # Rules still apply offline.
    with pytest.raises(SettingsError):
        load(offline=True, **{"verl-gke:gpuNodes": "99"})


def test_valid_keys_are_camel_case_config_keys() -> None:
    keys = valid_keys()
    for key in (
        "verl-gke:zone",
        "verl-gke:mode",
        "verl-gke:reservation",
        "verl-gke:gpuNodes",
        "verl-gke:hfToken",
    ):
        assert key in keys
    assert "verl-gke:stack" not in keys and "verl-gke:project" not in keys


def test_x86_only_verl_image_on_arm64_nodes_is_flagged() -> None:
    loaded = load(**{"verl-gke:verlImage": "verlai/verl:vllm011.latest"})
    assert any(
        "verl-gke:verlImage = 'verlai/verl:vllm011.latest'" in n and "arm64" in n
        for n in loaded.notices
    )
    assert load().notices == ()  # the default A4X image is the aarch64 build
    assert load("a3u", **{"verl-gke:verlImage": "verlai/verl:custom"}).notices == ()

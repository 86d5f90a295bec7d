"""Issue 9: every class of bad input is refused before any resource, naming the key, the value
(never a secret's) and a fix that is itself accepted.

Each class is parametrised over its members; `test_every_suggested_fix_is_accepted` applies the
`pulumi config set KEY VALUE` a message suggests and validates again.
"""

from __future__ import annotations

import json
import re

import pytest

from config.profiles import PROFILES
from config.settings import (
    SettingsError,
    StackSettings,
    image_fields,
    load_settings,
    plain_secret_notices,
)
from training.assembly import TrainingJob, training_job
from training.grpo_spec import GrpoPreflightError

GOOD = {
    "gcp:project": "my-project-123",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-reservation",
    "verl-gke:hfToken": "hf_abcdefghijklmnopqrstuvwxyz0123456789",
}
IMAGE_KEYS = [f"verl-gke:{StackSettings.model_fields[name].alias}" for name in image_fields()]
_FIX = re.compile(r"Fix: pulumi config set (?P<key>\S+) (?P<value>\S+) -s (?P<stack>\S+)")


def error_of(stack: str, changes: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings(stack, {**GOOD, **changes}, offline=False)
    return str(caught.value)


def test_image_class_covers_every_image_setting() -> None:
    assert set(IMAGE_KEYS) >= {
        "verl-gke:verlImage",
        "verl-gke:dataPrepImage",
        "verl-gke:ncclInstallerImage",
    }


@pytest.mark.parametrize("key", IMAGE_KEYS)
@pytest.mark.parametrize(
    "value",
    ["verlai/verl", "verlai/verl:vllm 011", "Verlai/Verl:v1", "verlai/verl:", "img@sha256:abc"],
)
def test_bad_image_reference_refused_for_every_image_setting(key: str, value: str) -> None:
    message = error_of("a4", {key: value})
    assert f"{key} = {value!r}" in message and "Fix: pulumi config set " + key in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verl-gke:rayVersion", "latest"),
        ("verl-gke:rayVersion", ""),
        ("verl-gke:rayVersion", "2.47"),
        ("verl-gke:rayVersion", "2.47.0; curl x"),
        ("verl-gke:verlRef", "latest"),
        ("verl-gke:verlRef", "HEAD"),
        ("verl-gke:verlRef", " "),
        ("verl-gke:verlRef", "v0.6.1 && rm -rf /"),
        ("verl-gke:verlRef", "$(whoami)"),
        ("verl-gke:verlRef", "v0..6"),
    ],
)
def test_refs_that_cannot_be_what_they_claim_refused(key: str, value: str) -> None:
    message = error_of("a4", {key: value})
    assert f"{key} = {value!r}" in message


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("https://huggingface.co/Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        ("../etc/passwd", "Qwen/Qwen2.5-32B-Instruct"),
        ("Qwen/Qwen 7B", "Qwen/Qwen2.5-32B-Instruct"),
    ],
)
def test_model_ids_must_be_org_slash_name(value: str, fix: str) -> None:
    message = error_of("a4", {"verl-gke:model": value})
    assert f"verl-gke:model = {value!r}" in message
    assert f"Fix: pulumi config set verl-gke:model {fix} -s a4" in message


@pytest.mark.parametrize(
    "token", ["abc123", " hf_abcdef", "hf_abcdef\n", "hf_abc def", "Bearer hf_abc", "sk-abc"]
)
def test_token_that_cannot_be_one_refused_without_echoing_it(token: str) -> None:
    message = error_of("a4", {"verl-gke:hfToken": token})
    assert "verl-gke:hfToken = <secret>" in message
    assert token.strip() not in message


@pytest.mark.parametrize("value", ["inf", "nan", "901", "100000"])
def test_fabric_pass_mark_must_be_finite_and_reachable(value: str) -> None:
    message = error_of("a4x", {"verl-gke:fabricMinBusbwGbps": value})
    assert "verl-gke:fabricMinBusbwGbps" in message


def test_reachable_fabric_pass_mark_accepted() -> None:
    settings = load_settings(
        "a4x", {**GOOD, "verl-gke:fabricMinBusbwGbps": "400"}, offline=False
    ).settings
    assert settings.fabric_min_busbw_gbps == 400


@pytest.mark.parametrize("stack", ["a4", "a3u"])
def test_autopilot_refuses_a_channel_that_cannot_run_dranet(stack: str) -> None:
    message = error_of(stack, {"verl-gke:mode": "autopilot", "verl-gke:releaseChannel": "STABLE"})
    assert "verl-gke:releaseChannel = 'STABLE'" in message
    assert "1.35.2-gke.1842000" in message


def test_standard_keeps_the_stable_channel() -> None:
    changes = {"verl-gke:mode": "standard", "verl-gke:releaseChannel": "STABLE"}
    assert load_settings("a4", {**GOOD, **changes}, offline=False)


@pytest.mark.parametrize(
    "machine",
    ["n4-highmem-12", "n4-highmem-8", "n9-highmem-16", "n4-standard-16", "c4a-highmem-16"],
)
def test_machine_types_that_do_not_exist_or_do_not_fit_refused(machine: str) -> None:
    message = error_of("a4", {"verl-gke:cpuMachineType": machine})
    assert f"verl-gke:cpuMachineType = {machine!r}" in message


@pytest.mark.parametrize("machine", ["n4-highmem-16", "n2-highmem-32", "c3-highmem-22"])
def test_real_highmem_shapes_accepted(machine: str) -> None:
    changes = {"verl-gke:cpuMachineType": machine}
    assert load_settings("a4", {**GOOD, **changes}, offline=False)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("verl-gke:podsCidr", "fd00::/64"),
        ("verl-gke:servicesCidr", "fd00::/108"),
        ("verl-gke:hostSubnetCidr", "10.128.0.1/20"),
        ("verl-gke:podsCidr", "10.4.0.0/24"),
        ("verl-gke:hostSubnetCidr", "10.128.0.0/30"),
    ],
)
def test_cidr_not_ipv4_or_too_small_refused(key: str, value: str) -> None:
    message = error_of("a4", {key: value})
    assert f"{key} = " in message and value.split("/")[0] in message


def test_cidr_overlap_blames_the_changed_key_by_its_config_name() -> None:
    message = error_of("a4", {"verl-gke:podsCidr": "10.128.0.0/14"})
    assert message.count("  - ") == 1
    line = message.split("  - ")[1]
    assert line.startswith("verl-gke:podsCidr = 10.128.0.0/14 overlaps verl-gke:hostSubnetCidr")
    assert "pods_cidr" not in message


def test_project_number_is_named_as_such() -> None:
    message = error_of("a4", {"gcp:project": "123456789012"})
    assert "project number" in message and "gcloud projects describe 123456789012" in message


@pytest.mark.parametrize(
    "changes",
    [
        {"verl-gke:verlImage": "verlai/verl"},
        {"verl-gke:dataPrepImage": "python 3.12"},
        {"verl-gke:ncclInstallerImage": "us-docker.pkg.dev/x/y"},
        {"verl-gke:rayVersion": "latest"},
        {"verl-gke:verlRef": "latest"},
        {"verl-gke:model": "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct"},
        {"verl-gke:model": "Qwen2.5-7B-Instruct"},
        {"verl-gke:fabricMinBusbwGbps": "inf"},
        {"verl-gke:releaseChannel": "STABLE"},
        {"verl-gke:cpuMachineType": "n4-highmem-12"},
        {"verl-gke:cpuMachineType": "n2-standard-8"},
        {"verl-gke:podsCidr": "10.128.0.0/14"},
        {"verl-gke:servicesCidr": "10.4.0.0/20"},
        {"verl-gke:podsCidr": "10.4.0.0/24"},
        {"verl-gke:hostSubnetCidr": "10.128.0.0/30"},
        {"verl-gke:servicesCidr": "fd00::/108"},
        {"gcp:project": "My_Project"},
        {"verl-gke:kubernetesVersion": "1.34"},
    ],
    ids=lambda c: "-".join(f"{k.split(':')[1]}={v}" for k, v in c.items()),
)
@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_every_suggested_fix_is_accepted(stack: str, changes: dict[str, str]) -> None:
    config = {**GOOD, **changes}
    try:
        load_settings(stack, config, offline=False)
    except SettingsError as error:
        message = str(error)
    else:
        # Only where the profile has no such rule (e.g. STABLE on a Standard-only stack).
        assert stack == "a4x" or stack == "a3u", f"{changes} accepted on {stack}"
        return
    fixes = [m for m in _FIX.finditer(message) if m["key"] != "gcp:project"]
    assert fixes or "gcp:project" in changes, message
    for fix in fixes:
        config[fix["key"]] = fix["value"]
    if "gcp:project" in changes:
        config["gcp:project"] = "my-project-123"
    assert load_settings(stack, config, offline=False).settings


@pytest.mark.parametrize(
    "key", ["verl_gke:gpuNodes", "verlgke:gpuNodes", "Verl-Gke:gpuNodes", "verl-gke-:gpuNodes"]
)
def test_namespace_typo_refused_with_the_right_key(key: str) -> None:
    message = error_of("a4", {key: "4"})
    assert f"{key}: the namespace" in message
    assert "pulumi config set verl-gke:gpuNodes VALUE" in message


def test_other_namespaces_are_not_namespace_typos() -> None:
    assert load_settings("a4", {**GOOD, "kubernetes:context": "x"}, offline=False)


@pytest.mark.parametrize("placeholder", ["<hf_abcdefghijklmnopqrstuvwxyz012345>", "<hf_...>"])
def test_secret_placeholder_is_never_echoed(placeholder: str) -> None:
    message = error_of("a4", {"verl-gke:hfToken": placeholder})
    assert "verl-gke:hfToken = <secret> is still the placeholder" in message
    assert placeholder not in message and "hf_abcdefghij" not in message
    assert "pulumi config set --secret verl-gke:hfToken" in message


def test_token_set_without_secret_warns_loudly() -> None:
    config = {**GOOD}
    plain = plain_secret_notices(config, set(), "a4")
    assert plain == [
        "WARNING: verl-gke:hfToken is not a Pulumi secret: its value is stored in plain text in "
        "Pulumi.a4.yaml. Fix: pulumi config set --secret verl-gke:hfToken VALUE -s a4"
    ]
    assert GOOD["verl-gke:hfToken"] not in plain[0]
    assert plain_secret_notices(config, {"verl-gke:hfToken"}, "a4") == []


# --- GRPO job settings (training/), added by c2b ------------------------------------------------

TOKEN = "hf_abcdefghijklmnopqrstuvwxyz123456"


def job_error(stack: str, job: dict[str, object], **config: str) -> str:
    settings = load_settings(
        stack, {**GOOD, **config, "verl-gke:job": json.dumps(job)}, offline=False
    ).settings
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(settings)
    return str(caught.value)


def job_accepted(stack: str, job: dict[str, object], **config: str) -> TrainingJob:
    settings = load_settings(
        stack, {**GOOD, **config, "verl-gke:job": json.dumps(job)}, offline=False
    ).settings
    return training_job(settings)


@pytest.mark.parametrize(
    ("job", "key"),
    [
        ({"extraOverrides": [f"+foo.token={TOKEN}"]}, "verl-gke:job.extraOverrides[0]"),
        (
            {"extraOverrides": ["trainer.resume_mode=auto", f"+x.y=a{TOKEN}"]},
            "verl-gke:job.extraOverrides[1]",
        ),
        ({"experimentName": TOKEN}, "verl-gke:job.experimentName"),
        ({"trainFiles": f"/data/gsm8k/{TOKEN}.parquet"}, "verl-gke:job.trainFiles"),
        ({"valFiles": f"/data/{TOKEN}/test.parquet"}, "verl-gke:job.valFiles"),
        ({"defaultLocalDir": f"/checkpoints/{TOKEN}"}, "verl-gke:job.defaultLocalDir"),
    ],
)
def test_secret_in_any_job_setting_refused_before_any_resource(
    job: dict[str, object], key: str
) -> None:
    message = job_error("a4", job)
    assert f"  - {key} = " in message and "looks like a secret" in message
    assert TOKEN not in message and "abcdefghijklmnop" not in message
    setting = key.split("[")[0]
    assert f"Fix: remove {'it from ' if '[' in key else ''}{setting};" in message
    # The fix: the setting removed (the list without the secret-bearing item).
    fixed = dict(job)
    if "[" in key:
        index = int(key.split("[")[1].rstrip("]"))
        fixed["extraOverrides"] = [o for i, o in enumerate(job["extraOverrides"]) if i != index]  # type: ignore[arg-type]
    else:
        fixed.pop(setting.rsplit(".", 1)[1])
    assert job_accepted("a4", fixed).entrypoint


def test_the_stacks_own_secret_is_refused_and_shown_by_its_key() -> None:
    own = "hf_short_but_real_token"  # not the hf_ + 30 shape: found because it is the stack's
    message = job_error(
        "a4", {"extraOverrides": [f"+foo.x={own}"]}, **{"verl-gke:hfToken": own}
    )
    assert "'+foo.x=<redacted: verl-gke:hfToken>'" in message and own not in message


def test_the_preflight_and_the_provider_share_one_detector() -> None:
    from jobs import ray_job, secret_scan

    value = {"env_vars": {"HF_TOKEN": "x", "TOKENIZERS_PARALLELISM": "true"}, "a": [TOKEN]}
    assert [f.path for f in secret_scan.find_secrets("runtime_env", value)] == [
        "runtime_env.env_vars.HF_TOKEN",
        "runtime_env.a[0]",
    ]
    assert len(ray_job.secret_problems("runtime_env", value)) == 2
    assert ray_job.redact(f"x {TOKEN}") == "x hf_***"


_JOB_FIX = re.compile(r"Fix: (?:set it to (?P<value>\S+)|remove verl-gke:job\.(?P<removed>\w+))")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("defaultLocalDir", "/data/verl/checkpoints/../../gsm8k"),
        ("defaultLocalDir", "/checkpoints/../data/gsm8k"),
        ("defaultLocalDir", "/checkpoints/./exp"),
        ("trainFiles", "/data/gsm8k/../verl/train.parquet"),
        ("trainFiles", "/data//gsm8k/train.parquet"),
        ("valFiles", "/data/gsm8k/../../etc/test.parquet"),
        ("modelPath", "/data/x/../Qwen2.5-32B-Instruct"),
    ],
)
@pytest.mark.parametrize("stack", ["a4", "a4x"])
def test_paths_that_are_not_in_normal_form_refused_with_a_working_fix(
    stack: str, key: str, value: str
) -> None:
    message = job_error(stack, {key: value})
    line = next(p for p in message.split("\n  - ")[1:] if f"verl-gke:job.{key} = " in p)
    assert value in line
    fix = _JOB_FIX.search(line)
    assert fix, line
    job = {} if fix["removed"] else {key: fix["value"]}
    assert fix["removed"] in (None, key)
    assert job_accepted(stack, job).spec


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B"])
@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_unknown_model_is_reported_as_the_model_key_with_a_working_fix(
    stack: str, model: str
) -> None:
    message = job_error(stack, {}, **{"verl-gke:model": model})
    assert f"  - verl-gke:model = {model!r}: not in the known-model table" in message
    assert "verl-gke:job.modelPath" not in message
    fix = _FIX.search(message)
    assert fix and fix["key"] == "verl-gke:model" and fix["stack"] == stack
    assert job_accepted(stack, {}, **{"verl-gke:model": fix["value"]}).spec


def test_an_explicit_model_path_keeps_its_own_key() -> None:
    message = job_error("a4", {"modelPath": "/data/Llama-3.1-8B"})
    assert "verl-gke:job.modelPath = '/data/Llama-3.1-8B'" in message
    assert "verl-gke:model = " not in message


@pytest.mark.parametrize(("stack", "length"), [("a4", 65536), ("a4x", 262144), ("a3u", 40000)])
def test_memory_error_for_a_long_response_names_the_key_and_a_length_that_fits(
    stack: str, length: int
) -> None:
    message = job_error(stack, {"maxResponseLength": length})
    assert f"verl-gke:job.maxResponseLength={length} tokens" in message
    fix = re.search(r"shorter verl-gke:job\.maxResponseLength=(\d+)", message)
    assert fix, message
    fitting = int(fix[1])
    assert fitting < length and fitting & (fitting - 1) == 0  # a power of two
    assert job_accepted(stack, {"maxResponseLength": fitting}).spec.max_response_length == fitting

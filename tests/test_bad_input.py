"""Every class of bad input is refused before any resource, naming the key, the value
(never a secret's) and a fix that is itself accepted.

Each class is parametrised over its members; `test_every_suggested_fix_is_accepted` applies the
`pulumi config set KEY VALUE` a message suggests and validates again.
"""

from __future__ import annotations

import json
import re

import pytest

from config.profiles import PROFILES
from config.settings import SettingsError, StackSettings, load_settings, plain_secret_notices
from config.stack_values import image_fields
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
        ("verl-gke:rayVersion", " "),
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
    assert "pulumi config set verl-gke:gpuNodes 4 -s a4" in message


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
    message = job_error("a4", {"extraOverrides": [f"+foo.x={own}"]}, **{"verl-gke:hfToken": own})
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


_JOB_FIX = re.compile(
    r"Fix: pulumi config (?:set --path verl-gke:job\.\w+ (?P<value>\S+)"
    r"|rm --path verl-gke:job\.(?P<removed>\w+))"
)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("defaultLocalDir", "/data/verl/checkpoints/../../gsm8k"),
        ("defaultLocalDir", "/checkpoints/../data/gsm8k"),
        ("defaultLocalDir", "/checkpoints/./exp"),
        ("trainFiles", "/data/gsm8k/../verl/train.parquet"),
        ("trainFiles", "/data//gsm8k/train.parquet"),
        ("valFiles", "/data/gsm8k/../../etc/test.parquet"),
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


@pytest.mark.parametrize("model", ["my-org/my-finetune", "meta-llama/Llama-2-7b-hf"])
@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_model_outside_the_table_is_reported_as_the_model_key_with_a_working_fix(
    stack: str, model: str
) -> None:
    # Offline (no Hub), only the committed table or verl-gke:modelConfig can give its heads.
    message = job_error(stack, {}, **{"verl-gke:model": model})
    assert f"  - verl-gke:model = {model!r}: not in the committed table" in message
    fix = _FIX.search(message)
    assert fix and fix["key"] == "verl-gke:model" and fix["stack"] == stack
    assert job_accepted(stack, {}, **{"verl-gke:model": fix["value"]}).spec


@pytest.mark.parametrize(("key", "setting"), [("modelPath", "model"), ("nnodes", "gpuNodes")])
def test_a_derived_job_key_names_the_stack_setting_to_use(key: str, setting: str) -> None:
    message = job_error("a4", {key: "/data/Llama-3.1-8B" if key == "modelPath" else 3})
    assert f"verl-gke:job.{key} is not a setting" in message
    assert f"and set verl-gke:{setting} instead" in message


_MEMORY_FIXES = re.compile(r"Fixes, each enough on its own: (?P<fixes>.*?)\.\n")
_JOB_VALUE = re.compile(r"verl-gke:job\.(?P<key>\w+)=(?P<value>[^\s;,)']+)")
_GPU_NODES = re.compile(r"verl-gke:gpuNodes=(?P<nodes>\d+)")
_IN_EXTRA = re.compile(r"'(?P<override>[\w.]+=True)' in verl-gke:job\.extraOverrides")


def _applied(fix: str, job: dict[str, object]) -> tuple[dict[str, object], dict[str, str]]:
    """The job and stack config a user ends with after following one memory fix's text."""
    job = dict(job)
    for found in _JOB_VALUE.finditer(fix):
        value = found["value"]
        job[found["key"]] = (
            value == "True" if value in ("True", "False") else json.loads(value)
            if re.fullmatch(r"[0-9.]+", value) else value
        )  # fmt: skip
    if extra := _IN_EXTRA.search(fix):
        job["extraOverrides"] = [*job.get("extraOverrides", []), extra["override"]]  # type: ignore[list-item]
    nodes = _GPU_NODES.search(fix)
    return job, ({"verl-gke:gpuNodes": nodes["nodes"]} if nodes else {})


# Models x response lengths the default jobs cannot hold, each within the model's context
# (max_position_embeddings less the 512-token prompt; offline facts: the committed table),
# and rollouts that overflow one node (fixed by offload, a lower reservation or more nodes).
_TOO_BIG: list[tuple[str, dict[str, object], dict[str, str]]] = [
    *(
        (stack, {"maxResponseLength": length}, {"verl-gke:model": model})
        for stack, model, length in (
            ("a3u", "google/gemma-2-9b-it", 7680),
            ("a3u", "Qwen/Qwen2.5-32B-Instruct", 16384),
            ("a3u", "Qwen/Qwen3-14B", 16384),
            ("a4", "Qwen/Qwen3-32B", 16384),
            ("a4", "meta-llama/Llama-3.1-8B-Instruct", 32768),
            ("a4x", "Qwen/Qwen2.5-32B-Instruct", 32256),
        )
    ),
    ("a3u", {"gpuMemoryUtilization": 0.75}, {"verl-gke:gpuNodes": "1"}),
    ("a4", {"gpuMemoryUtilization": 0.8}, {"verl-gke:gpuNodes": "1"}),
]


@pytest.mark.parametrize(("stack", "job", "config"), _TOO_BIG)
def test_every_memory_fix_passes_the_whole_preflight(
    stack: str, job: dict[str, object], config: dict[str, str]
) -> None:
    """Each fix the memory fit offers, applied as its text says, is accepted by every rule (the
    stack rules, verl's batch split, the memory fit with its margin), as gpuNodes fixes are."""
    message = job_error(stack, job, **config)
    found = _MEMORY_FIXES.search(message)
    assert found, message
    fixes = found["fixes"].split("; ")
    assert fixes and "no single knob" not in fixes[0], message
    for fix in fixes:
        fixed_job, fixed_config = _applied(fix, job)
        assert fixed_job != job or fixed_config, fix
        try:
            job_accepted(stack, fixed_job, **{**config, **fixed_config})
        except (GrpoPreflightError, SettingsError) as refused:
            raise AssertionError(f"offered fix {fix!r} is refused: {refused}") from None


# Lengths within the default model's context (Qwen2.5-32B-Instruct: max_position_embeddings 32768,
# 512 of them for the prompt; tests/test_sequence_limits.py has the context rule).
@pytest.mark.parametrize(("stack", "length"), [("a4", 32256), ("a4x", 32000), ("a3u", 30000)])
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


# --- every refusal's fix, applied as typed, is accepted ------------------------------------------

from datetime import date  # noqa: E402

from config import known_values  # noqa: E402
from jobs.secret_scan import redact  # noqa: E402

# Every command a refusal offers: `pulumi config set [--secret] [--path] KEY VALUE -s STACK` and
# `pulumi config rm KEY -s STACK`.
_COMMAND = re.compile(
    r"pulumi config (?P<verb>set|rm)(?P<flags>(?: --secret| --path)*) (?P<key>\S+)"
    r"(?: (?P<value>(?!-s )\S+))? -s (?P<stack>\S+)"
)


# Values only the user has (their project, reservation, token): a fix names them by role.
USER_VALUES = {
    "PROJECT_ID": GOOD["gcp:project"],
    "RESERVATION_NAME": GOOD["verl-gke:reservation"],
    "RESERVATION_NAME[/reservationBlocks/BLOCK]": GOOD["verl-gke:reservation"],
    "RESERVATION_NAME[/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]]": GOOD[
        "verl-gke:reservation"
    ],
    "hf_...": GOOD["verl-gke:hfToken"],
}


def apply_fixes(config: dict[str, str], message: str, alternative: int = 0) -> dict[str, str]:
    """`config` after every command in the message's `Fix:` parts, as Pulumi would store it;
    where a fix offers alternatives (`A, or B`), the one numbered `alternative` (else the first)."""
    fixed = dict(config)
    lines = [part for part in message.split("\n") if "Fix: " in part]
    assert lines, message
    fixes = []
    for line in lines:
        choices = line.split("Fix: ", 1)[1].split(", or ")
        fixes.append(choices[alternative] if alternative < len(choices) else choices[0])
    for line, fix in zip(lines, fixes, strict=True):
        if _job_fix(fixed, line, fix):
            continue
        commands = list(_COMMAND.finditer(fix))
        assert commands, fix
        for command in commands:
            key, value = command["key"], command["value"]
            if command["verb"] == "rm":
                fixed.pop(key, None)
            elif "--path" in (command["flags"] or ""):
                base, _, field = key.partition(".")
                job = json.loads(fixed.get(base, "{}"))
                job[field] = (
                    json.loads(value) if re.fullmatch(r"-?[0-9.]+|true|false", value) else value
                )
                fixed[base] = json.dumps(job)
            else:
                fixed[key] = USER_VALUES.get(value, value)
    return fixed


def _job_fix(config: dict[str, str], line: str, fix: str) -> bool:
    """A GRPO job refusal's `pulumi config set --path verl-gke:job.F V` / `pulumi config rm
    --path verl-gke:job.F`, applied to verl-gke:job as Pulumi's --path stores it."""
    field = re.match(r"\s*- verl-gke:job\.(\w+) = ", line)
    command = re.match(r"pulumi config (set|rm) --path verl-gke:job\.(\w+)(?: (\S+))?", fix)
    if field is None or command is None:
        return False
    job = json.loads(config.get("verl-gke:job", "{}"))
    if command[1] == "set":
        # --path stores true/false as booleans, integers as numbers, the rest as strings.
        value = command[3]
        typed = re.fullmatch(r"-?[0-9]+|true|false", value)
        job[command[2]] = json.loads(value) if typed else value
    else:
        job.pop(command[2], None)
    config["verl-gke:job"] = json.dumps(job)
    return True


def full_preflight(stack: str, config: dict[str, str]) -> TrainingJob:
    """What `pulumi up` runs before the first resource: the settings, then the GRPO job."""
    settings = load_settings(
        stack, config, offline=False, job_check=training_job, redact=redact
    ).settings
    return training_job(settings)


def refused(stack: str, config: dict[str, str]) -> str:
    with pytest.raises((SettingsError, GrpoPreflightError)) as caught:
        full_preflight(stack, config)
    return str(caught.value)


# One member per class the issue names; each is refused naming key and value, and the fix as
# typed makes the stack (GRPO job included) accepted.
CLASSES = [
    # pydantic type, range and choice errors; name rules; a flat --path key
    ("a4x", {"verl-gke:gpuNodes": "two"}, "verl-gke:gpuNodes = 'two'"),
    ("a4x", {"verl-gke:capacityWaitMinutes": "9"}, "verl-gke:capacityWaitMinutes = '9'"),
    ("a4", {"verl-gke:jobWait": "first_step"}, "verl-gke:jobWait = 'first_step'"),
    ("a4", {"verl-gke:exportModel": "gs://bucket/model"}, "verl-gke:exportModel = 'gs://"),
    ("a4", {"verl-gke:mode": "autopylot"}, "verl-gke:mode = 'autopylot'"),
    ("a4x", {"verl-gke:capacity": "spott"}, "verl-gke:capacity = 'spott'"),
    ("a4", {"verl-gke:cpuNodes": "0"}, "verl-gke:cpuNodes = '0'"),
    ("a4", {"verl-gke:fabricMinBusbwGbps": "fast"}, "verl-gke:fabricMinBusbwGbps = 'fast'"),
    ("a4", {"verl-gke:imageStreaming": "sometimes"}, "verl-gke:imageStreaming = 'sometimes'"),
    ("a4", {"verl-gke:job": "not json"}, "verl-gke:job = 'not json'"),
    ("a4", {"verl-gke:namespace": "Verl_NS"}, "verl-gke:namespace = 'Verl_NS'"),
    ("a4", {"verl-gke:ksaName": "Verl_KSA"}, "verl-gke:ksaName = 'Verl_KSA'"),
    ("a4x", {"verl-gke:job.trainBatchSize": "64"}, "verl-gke:job.trainBatchSize = '64'"),
    # accepted before, failing later on paid hardware
    ("a4", {"verl-gke:namespace": "kube-system"}, "verl-gke:namespace = 'kube-system'"),
    ("a4", {"verl-gke:namespace": "gmp-public"}, "verl-gke:namespace = 'gmp-public'"),
    ("a4x", {"verl-gke:namespace": "nvidia-dra-driver-gpu"}, "'nvidia-dra-driver-gpu'"),
    ("a4", {"verl-gke:ksaName": "default"}, "verl-gke:ksaName = 'default'"),
    ("a4", {"gcp:region": "us_central1"}, "gcp:region = 'us_central1'"),
    ("a4", {"verl-gke:zone": "us-central1"}, "verl-gke:zone = 'us-central1'"),
    ("a4", {"verl-gke:bucketName": "my-g00gle-ckpts"}, "verl-gke:bucketName = 'my-g00gle"),
    ("a4", {"verl-gke:bucketName": "goog-ckpts"}, "verl-gke:bucketName = 'goog-ckpts'"),
    ("a4", {"verl-gke:kuberayChartVersion": "1.3.5"}, "verl-gke:kuberayChartVersion = '1.3.5'"),
    ("a4x", {"verl-gke:draDriverChartVersion": "25.3.9"}, "'25.3.9'"),
    ("a4", {"verl-gke:kubernetesVersion": "1.99"}, "verl-gke:kubernetesVersion = '1.99'"),
    (
        "a4x",
        {
            "verl-gke:ncclInstallerImage": "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/"
            "nccl-plugin-gib:v1.1.1"
        },
        "verl-gke:ncclInstallerImage = 'us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin",
    ),
    ("a4", {"verl-gke:job": '{"totalEpochs": true}'}, "verl-gke:job.totalEpochs = True"),
    ("a4", {"verl-gke:gpuNodes": "010"}, "verl-gke:gpuNodes = '010'"),
    ("a4", {"verl-gke:job": '{"trainBatchSize": "0256"}'}, "verl-gke:job.trainBatchSize = '0256'"),
    # fixes that used to be refused by the next rule, or pointed the wrong way
    ("a4x", {"verl-gke:gpuNodes": "19"}, "verl-gke:gpuNodes = 19"),
    ("a4", {"gcp:region": "us-central1-b"}, "gcp:region = 'us-central1-b'"),
    ("a4", {"verl-gke:region": "us-central1"}, "verl-gke:region"),
]


@pytest.mark.parametrize(
    ("stack", "changes", "named"),
    CLASSES,
    ids=[f"{stack}-{'-'.join(changes.values())[:40]}" for stack, changes, _ in CLASSES],
)
def test_every_class_is_refused_with_a_fix_that_is_accepted(
    stack: str, changes: dict[str, str], named: str
) -> None:
    config = {**GOOD, **changes}
    message = refused(stack, config)
    assert "nothing was created" in message and named in message, message
    assert full_preflight(stack, apply_fixes(config, message)).spec


# Locations the public "Regions and zones" table does not list but a project can use: AI zones
# ("AI zones", docs.cloud.google.com/compute/docs/regions-zones/ai-zones: us-central1-ai1a,
# us-south1-ai1b, where reserved GPU capacity lives) and regions outside the public table
# (us-east7, zones b-e, seen in GKE provisioning-request logs). A table cannot prove a name does
# not exist, so these are accepted (with a warning when the table lacks them), never refused.
@pytest.mark.parametrize(
    ("region", "zone"),
    [
        ("us-central1", "us-central1-ai1a"),
        ("us-south1", "us-south1-ai1b"),
        ("europe-west4", "europe-west4-ai1a"),
        ("us-east7", "us-east7-b"),
        # Names the table lacks, typos or not: warned, since the table cannot tell.
        ("us-central1", "us-central1-d"),
        ("us-central9", "us-central9-b"),
    ],
)
def test_a_location_missing_from_the_table_is_accepted_with_a_warning(
    region: str, zone: str
) -> None:
    config = {**GOOD, "gcp:region": region, "verl-gke:zone": zone}
    loaded = load_settings("a4", config, offline=False, job_check=training_job, redact=redact)
    assert loaded.settings.zone == zone
    if region not in known_values.REGION_ZONES or zone.endswith("-d"):
        assert any(zone in n or region in n for n in loaded.notices), loaded.notices


def test_every_zone_of_the_table_is_accepted_without_a_warning() -> None:
    for region, letters in known_values.REGION_ZONES.items():
        config = {**GOOD, "gcp:region": region, "verl-gke:zone": f"{region}-{letters[-1]}"}
        loaded = load_settings("a4", config, offline=False)
        assert not any("zone table" in n or "region table" in n for n in loaded.notices)


# A chart released after the table was read (KubeRay published 1.6.1 two months after 1.6.0) is
# accepted with a warning; a version inside the table's range that no release tag has is refused.
@pytest.mark.parametrize(
    ("stack", "key", "value"),
    [
        ("a4", "verl-gke:kuberayChartVersion", "1.7.1"),
        ("a4x", "verl-gke:draDriverChartVersion", "25.12.1"),
    ],
)
def test_a_chart_newer_than_the_table_is_accepted_with_a_warning(
    stack: str, key: str, value: str
) -> None:
    loaded = load_settings(stack, {**GOOD, key: value}, offline=False)
    assert any(key in n and "newer" in n for n in loaded.notices), loaded.notices


def test_kubernetes_minor_bound_moves_with_the_date() -> None:
    # Upstream ships three minors a year (KEP-2572): 1.38 must pass once it can exist, and a
    # minor that cannot exist yet is refused.
    assert known_values.kubernetes_minor_problem(38, date(2026, 12, 1)) is None
    assert known_values.kubernetes_minor_problem(40, date(2027, 6, 1)) is None
    assert known_values.kubernetes_minor_problem(41, date(2026, 12, 1)) is not None
    assert known_values.kubernetes_minor_problem(99, date(2030, 1, 1)) is not None


@pytest.mark.parametrize("name", ["dog-ogle-ckpts", "ego-glee-data", "big-ogg-le"])
def test_a_bucket_name_that_spells_no_google_is_accepted(name: str) -> None:
    # GCS naming rules refuse "google" and close misspellings ("g00gle"); words that only meet
    # across a separator are neither.
    assert load_settings("a4", {**GOOD, "verl-gke:bucketName": name}, offline=False).settings


def test_a_refused_switch_gets_its_default_never_a_destructive_guess() -> None:
    message = refused("a4", {**GOOD, "verl-gke:deleteBucketOnDestroy": "2"})
    assert "Fix: pulumi config set verl-gke:deleteBucketOnDestroy false -s a4" in message


def test_unrelated_keys_are_not_suggested() -> None:
    message = refused("a4", {**GOOD, "verl-gke:region": "us-central1"})
    assert "rayVersion" not in message and "gcp:region" in message
    message = refused("a4", {**GOOD, "verl-gke:gpuNode": "2"})
    assert "did you mean verl-gke:gpuNodes?" in message


def test_a_zone_given_as_region_offers_one_fix_only() -> None:
    message = refused("a4", {**GOOD, "gcp:region": "us-central1-b"})
    assert message.count("Fix: ") == 1, message
    assert "pulumi config set gcp:region us-central1 -s a4" in message


def test_gpu_nodes_fix_passes_the_batch_rules_that_the_nearest_count_breaks() -> None:
    # a4x: 18 nodes = 72 GPUs; trainBatchSize 256 x rolloutN 8 = 2048 does not split over 72.
    with pytest.raises(GrpoPreflightError):
        full_preflight("a4x", {**GOOD, "verl-gke:gpuNodes": "18"})
    message = refused("a4x", {**GOOD, "verl-gke:gpuNodes": "19"})
    assert "Fix: pulumi config set verl-gke:gpuNodes 18 " not in message
    assert full_preflight("a4x", apply_fixes({**GOOD, "verl-gke:gpuNodes": "19"}, message)).spec


def test_memory_fix_through_offload_policy_is_one_the_memory_check_reads() -> None:
    # verl 0.6.1 fsdp_workers.py: the actor's fsdp_config.offload_policy (FSDP2 CPUOffloadPolicy)
    # applies only with strategy fsdp2, and verl-gke models it only as an extraOverrides entry.
    job: dict[str, object] = {
        "maxResponseLength": 4096,
        "ppoMicroBatchSizePerGpu": 16,
        "actorStrategy": "fsdp2",
    }
    message = refused("a3u", {**GOOD, "verl-gke:job": json.dumps(job)})
    offered = (
        "verl-gke:job.actorStrategy=fsdp2 with "
        "'actor_rollout_ref.actor.fsdp_config.offload_policy=True' in verl-gke:job.extraOverrides"
    )
    assert offered in message, message
    job["extraOverrides"] = ["actor_rollout_ref.actor.fsdp_config.offload_policy=True"]
    assert full_preflight("a3u", {**GOOD, "verl-gke:job": json.dumps(job)}).spec
    # Under strategy fsdp verl ignores the key, and so does the memory check.
    job["actorStrategy"] = "fsdp"
    assert "memory-fit" in refused("a3u", {**GOOD, "verl-gke:job": json.dumps(job)})


SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789ab"


@pytest.mark.parametrize(
    "changes",
    [
        {"verl-gke:clusterName": SECRET},
        {"verl-gke:namespace": SECRET},
        {"verl-gke:bucketName": f"Bad-{SECRET}"},
        {"verl-gke:mode": SECRET},
        {"verl-gke:jobWait": SECRET},
        {"verl-gke:verlRef": f"v1 {SECRET}"},
        {"verl-gke:clusterName": GOOD["verl-gke:hfToken"]},  # the stack's own token
        {"verl-gke:job": json.dumps({"logger": [SECRET]})},
        {"verl-gke:job": json.dumps({SECRET: 1})},
        {"verl-gke:job": json.dumps({"experimentName": 7, "totalEpochs": SECRET})},
    ],
    ids=lambda c: next(iter(c)),
)
def test_no_error_echoes_a_secret_looking_value(changes: dict[str, str]) -> None:
    message = refused("a4", {**GOOD, **changes})
    assert "hf_abcdefghij" not in message and "nothing was created" in message
    assert next(iter(changes)) in message


# Every refusal class of the tests above, each member's fix applied as typed: the
# stack, GRPO job included, is then accepted. Each alternative a single fix offers is tried.
SWEEP = [
    *[(stack, {key: "verlai/verl"}) for key in IMAGE_KEYS for stack in ("a4", "a4x")],
    *[("a4", {"verl-gke:rayVersion": v}) for v in ("latest", "2.47", "2.47.0; curl x")],
    *[("a4", {"verl-gke:verlRef": v}) for v in ("latest", " ", "v0.6.1 && rm -rf /", "v0..6")],
    *[("a4", {"verl-gke:model": v}) for v in ("Qwen2.5-7B-Instruct", "Qwen/Qwen 7B")],
    *[("a4", {"verl-gke:hfToken": v}) for v in ("abc123", " hf_abcdef")],
    *[("a4x", {"verl-gke:fabricMinBusbwGbps": v}) for v in ("inf", "901")],
    ("a4", {"verl-gke:mode": "autopilot", "verl-gke:releaseChannel": "STABLE"}),
    ("a4", {"verl-gke:releaseChannel": "rapid"}),
    *[("a4", {"verl-gke:cpuMachineType": v}) for v in ("n4-highmem-12", "n9-highmem-16")],
    *[("a4", {"verl-gke:podsCidr": v}) for v in ("fd00::/64", "10.4.0.0/24", "10.128.0.0/14")],
    ("a4", {"verl-gke:hostSubnetCidr": "10.128.0.1/20"}),
    *[("a4", {"gcp:project": v}) for v in ("My_Project", "123456789012")],
    ("a4", {"verl-gke:reservation": "My Reservation"}),
    ("a4x", {"verl-gke:reservation": ""}),
    ("a4", {"verl-gke:capacity": "flexStart"}),
    ("a4", {"verl-gke:capacity": "reservation", "verl-gke:reservation": ""}),
    ("a4", {"verl-gke:clusterName": "Verl_Cluster"}),
    ("a4", {"verl-gke:cpuNodes": "6"}),
    ("a4", {"verl-gke:kubernetesVersion": "1.33"}),
    ("a4x", {"verl-gke:draDriverChartVersion": "25.3.1"}),
    ("a4x", {"verl-gke:imageStreaming": "true"}),
    ("a4", {"verl_gke:gpuNodes": "4"}),
    ("a4", {"verl-gke:gpuNode": "4"}),
    ("a4", {"verl-gke:zone": "us-east1-b"}),
]


@pytest.mark.parametrize(("stack", "changes"), SWEEP, ids=[str(c) for _, c in SWEEP])
def test_each_earlier_refusal_fix_is_accepted_with_the_job(
    stack: str, changes: dict[str, str]
) -> None:
    config = {k: v for k, v in {**GOOD, **changes}.items() if v != ""}
    message = refused(stack, config)
    lines = [part for part in message.split("\n") if "Fix: " in part]
    alternatives = lines[0].count(", or ") + 1 if len(lines) == 1 else 1
    for alternative in range(alternatives):
        assert full_preflight(stack, apply_fixes(config, message, alternative)).spec, alternative

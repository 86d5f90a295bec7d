"""The offline plan speaks the form the user typed: each fix of a refused configuration is a
`--set KEY=VALUE` the plan then accepts, job fields are set as `pulumi config set --path` sets
them (`--set verl-gke:job.FIELD=VALUE`), and several job --set merge field by field."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from planning.offline_engine import REPO_ROOT, StackConfigError, run_stack, stack_config
from planning.pulumi_config import ConfigSet
from tools import plan as plan_cli

# A fix in the plan's form; the first of alternatives (`A, or B`) is taken.
_SET = re.compile(r"(--set(?:-secret)?) ([\w-]+:[\w.-]+=\S+)")


def _fixes(err: str) -> list[str]:
    args: list[str] = []
    for line in err.splitlines():
        if "Fix: " not in line:
            continue
        first = line.split("Fix: ", 1)[1].split(", or ")[0]
        for flag, item in _SET.findall(first):
            args += [flag, item]
    return args


@pytest.mark.parametrize(
    "typed",
    [
        ["--set", "verl-gke:gpuNodes=x"],
        ["--set", "verl-gke:job.trainBatchSize=255"],
        ["--set", 'verl-gke:job={"ppoMicroBatchSizePerGpu": 7}'],
        ["--set", "verl-gke:job.saveFreq=0"],
        ["--set", "verl-gke:job.gpuMemoryUtilization=1"],
    ],
)
def test_each_offline_fix_is_a_set_the_plan_then_accepts(
    typed: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert plan_cli.main(["a3u", *typed]) == 2
    err = capsys.readouterr().err
    assert "pulumi config" not in err, err
    fixes = _fixes(err)
    assert fixes, err
    assert plan_cli.main(["a3u", *typed, *fixes]) == 0, capsys.readouterr().err


def test_a_key_the_user_typed_is_left_out_and_one_of_the_stack_file_removed_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a3u", "--set", "verl-gke:regoin=us-central1"]) == 2
    assert "leave out --set verl-gke:regoin=..." in capsys.readouterr().err
    message = plan_cli.offline_fixes("Fix: pulumi config rm verl-gke:x -s a3u", "a3u", set())
    assert message == "Fix: remove verl-gke:x from Pulumi.a3u.yaml"
    typed = "Fix: pulumi config set --secret verl-gke:hfToken hf_... -s a4"
    secret = plan_cli.offline_fixes(typed, "a4", set())
    assert secret == "Fix: --set-secret verl-gke:hfToken=hf_..."


def _sets(*items: str) -> list[ConfigSet]:
    parser = plan_cli.argument_parser()
    return plan_cli.config_sets(parser, parser.parse_args(["a3u", *items]))


def _overrides(*items: str) -> dict[str, str]:
    """The config the plan runs with these --set items: the stack file after them."""
    return stack_config("a3u", REPO_ROOT, _sets(*items))


def test_job_fields_given_as_paths_merge_and_a_whole_value_replaces_as_pulumi_does() -> None:
    # pulumi/pulumi sdk/go/common/resource/config/map.go Map.Set: a --path set walks into the
    # object and adjustObjectValue types its text; a top-level set stores the text as a string,
    # which a later --path set replaces by the object it builds.
    overrides = _overrides(
        "--set", "verl-gke:job.maxResponseLength=4096",
        "--set", "verl-gke:job.useKlLoss=true",
        "--set", "verl-gke:job.experimentName=run-7",
        "--set", "verl-gke:job.lr=0.5",
        "--set", "verl-gke:job.saveFreq=010",
    )  # fmt: skip
    assert json.loads(overrides["verl-gke:job"]) == {
        "maxResponseLength": 4096,
        "useKlLoss": True,
        "experimentName": "run-7",
        "lr": "0.5",
        "saveFreq": "010",
    }
    whole = _overrides(
        "--set", "verl-gke:job.maxResponseLength=4096",
        "--set", 'verl-gke:job={"trainBatchSize": 128}',
    )  # fmt: skip
    assert whole["verl-gke:job"] == '{"trainBatchSize": 128}'
    rebuilt = _overrides(
        "--set", 'verl-gke:job={"trainBatchSize": 128}',
        "--set", "verl-gke:job.rolloutN=8",
    )  # fmt: skip
    assert json.loads(rebuilt["verl-gke:job"]) == {"rolloutN": 8}


def test_a_list_item_past_the_end_is_refused_as_pulumi_refuses_it() -> None:
    with pytest.raises(
        StackConfigError, match=r"out of range.*the next is verl-gke:authorizedNetworks\[0\]"
    ):
        _overrides("--set", "verl-gke:authorizedNetworks[1]=203.0.113.7/32")
    listed = _overrides(
        "--set", "verl-gke:authorizedNetworks[0]=203.0.113.7/32",
        "--set", "verl-gke:authorizedNetworks[1]=198.51.100.0/24",
    )  # fmt: skip
    assert json.loads(listed["verl-gke:authorizedNetworks"]) == [
        "203.0.113.7/32",
        "198.51.100.0/24",
    ]


def test_a_path_set_job_field_reaches_the_job() -> None:
    result = run_stack("a3u", sets=_sets("--set", "verl-gke:job.maxResponseLength=4096"))
    jobs = result.of_type("pulumi-python:dynamic/jobs:RayJob")
    (job,) = [r for r in jobs if r.name == "grpo-job"]
    assert "data.max_response_length=4096" in job.inputs["entrypoint"]


def test_a_set_and_the_same_value_in_the_stack_file_meet_the_same_rule(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for typed in ("verl-gke:deleteBucketOnDestroy=yes", "verl-gke:hfToken=hf_plaintext"):
        assert plan_cli.main(["a3u", "--set", typed]) == 2
        from_set = capsys.readouterr().err.split(" Fix:")[0]
        key, value = typed.split("=")
        (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
        stack_file = (REPO_ROOT / "Pulumi.a3u.yaml").read_text()
        (tmp_path / "Pulumi.a3u.yaml").write_text(f"{stack_file}  {key}: {value}\n")
        with pytest.raises(StackConfigError) as refused:
            stack_config("a3u", tmp_path)
        assert from_set == f"error: {str(refused.value).split(' Fix:')[0]}"


README = (REPO_ROOT / "README.md").read_text()
OWN_RUN = (REPO_ROOT / "docs" / "own-run.md").read_text()
COUNTS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def test_the_readme_s_try_it_installs_the_locked_set_ci_tests() -> None:
    section = README.split("## Try it without a cloud account", 1)[1].split("\n## ", 1)[0]
    installs = [line.split("#")[0].strip() for line in re.findall(r"pip install [^\n]+", section)]
    # pip itself first: the pip `venv` brings on Python 3.11/3.12 refuses some hashed lines.
    assert installs == [
        "pip install --upgrade pip",
        "pip install --require-hashes -r requirements.lock",
    ], installs


def test_the_readme_shows_set_secret_and_the_path_form_the_plan_accepts() -> None:
    assert "(`--set-secret` is `pulumi config set --secret`, never printed)" in README
    # The README's path-form example, as a user would copy it, plans (every rule passes).
    example = re.search(r"tools\.plan (\w+) (--set [^\n]+\\\n\s+--set \S+)", README)
    assert example, "the README's path-form --set example is gone"
    items = example[2].replace("\\\n", " ").split()
    assert "verl-gke:job.maxResponseLength=4096" in items
    result = run_stack(example[1], sets=_sets(*items))
    jobs = result.of_type("pulumi-python:dynamic/jobs:RayJob")
    (job,) = [r for r in jobs if r.name == "grpo-job"]
    assert "data.max_response_length=4096" in job.inputs["entrypoint"]


def test_the_readme_own_run_md_and_its_table_agree_on_the_settings_of_an_own_run() -> None:
    table = [line for line in OWN_RUN.split("## Worked example", 1)[0].splitlines()
             if line.startswith("| `verl-gke:")]  # fmt: skip
    said_readme = re.search(r"default; (\w+) settings make it yours", README)
    said_doc = re.search(r"(\w+) settings change it", OWN_RUN)
    assert said_readme and said_doc
    assert COUNTS[said_readme[1].lower()] == COUNTS[said_doc[1].lower()] == len(table), table


# --- following each fix ends: accepted, or a different, final refusal --------------------------

_LEAVE_OUT = re.compile(r"leave out --set ([\w-]+:[\w.-]+)=\.\.\.")
# A dense causal LM (the table's Qwen3-8B facts) under an id the table lacks; a mixture-of-experts
# and an image-text config.json (the refusals of training/model_config.py).
_DENSE = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
}  # fmt: skip
_MOE = {**_DENSE, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "num_experts": 128, "moe_intermediate_size": 768}  # fmt: skip
_VISION = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
           "text_config": {"hidden_size": 2560}}  # fmt: skip


def _follow(typed: dict[str, str], err: str) -> dict[str, str] | None:
    """`typed` after the first alternative of every fix in `err`; None when `err` has no fix
    in the plan's form (a final message)."""
    changed = dict(typed)
    found = False
    for line in err.splitlines():
        if "Fix: " not in line:
            continue
        first = re.split(r"[,;] or |\(or", line.split("Fix: ", 1)[1])[0]
        for key in _LEAVE_OUT.findall(first):
            changed.pop(key, None)
            found = True
        for _flag, item in _SET.findall(_LEAVE_OUT.sub("", first)):
            key, _, value = item.partition("=")
            changed[key] = value.strip("'")  # as the shell reads --set KEY='VALUE'
            found = True
    return changed if found else None


def _plan_until_settled(
    typed: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[list[str], int]:
    """The refusals met while following each printed fix, and the last exit code."""
    seen: list[str] = []
    for _ in range(5):
        args = [arg for key, value in typed.items() for arg in ("--set", f"{key}={value}")]
        code = plan_cli.main(["a3u", *args])
        err = capsys.readouterr().err
        if code == 0:
            return seen, code
        assert err not in seen, f"the fix loops back to a refusal already met: {err}"
        seen.append(err)
        followed = _follow(typed, err)
        if followed is None:
            return seen, code
        typed = followed
    raise AssertionError(f"no end after 5 fixes: {seen}")


@pytest.mark.parametrize(
    ("model", "config"),
    [
        ("my-org/my-moe", _MOE),  # the loop: an MoE config.json, then a new id
        ("Qwen/Qwen3-8B", _MOE),  # a known id with another model's config.json
        ("my-org/my-vlm", _VISION),
        ("my-org/my-finetune", None),  # not in the table, no config.json
        ("my-org/my-finetune", _DENSE),  # accepted at once
    ],
)
def test_following_each_model_fix_ends_without_a_loop(
    model: str, config: dict | None, tmp_path: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    typed = {"verl-gke:model": model}
    if config is not None:
        path = tmp_path / "config.json"  # type: ignore[operator]
        path.write_text(json.dumps(config))
        typed["verl-gke:modelConfig"] = str(path)
    seen, code = _plan_until_settled(typed, capsys)
    assert code == 0, seen
    assert len(seen) <= 1 if config is not _DENSE else seen == []


@pytest.mark.parametrize(
    "dataset",
    [
        # A local file with a MATH-style mapping: the fix is the bucket folder, without the mapping.
        {"verl-gke:dataset": "./data/math.parquet",
         "verl-gke:datasetColumns": '{"prompt":"problem","answer":"answer"}'},
        # GSM8K has no `problem` column: the mapping is corrected, then verl's own preprocessing.
        {"verl-gke:dataset": "openai/gsm8k",
         "verl-gke:datasetColumns": '{"prompt":"problem","answer":"answer"}'},
        {"verl-gke:dataset": "gsm8k"},  # the bare name of a known id
    ],
)  # fmt: skip
def test_following_each_dataset_fix_ends_without_a_loop_or_the_tutorial_s_values(
    dataset: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    seen, code = _plan_until_settled(dataset, capsys)
    assert code == 0, seen
    assert seen, "the typed dataset was refused first"
    if dataset["verl-gke:dataset"].startswith("./"):
        assert "gs://example-project-verl-a3u/math" in seen[0]
        assert "openai/gsm8k" not in seen[0]


_COMMIT = "0123456789abcdef" * 2 + "01234567"


@pytest.mark.parametrize(
    "typed",
    [
        {"verl-gke:model": "Qwen/Qwen3-8B@main"},  # the branch: the id alone, unpinned
        {"verl-gke:model": f"Qwen/Qwen3-8B@{_COMMIT}"},  # the commit: its own setting
        {"verl-gke:model": "Qwen3-8B@main"},  # no organisation: the id model_problem suggests
        {"verl-gke:model": "Qwen/Qwen3-8B", "verl-gke:modelRevision": "main"},
        {"verl-gke:model": "Qwen/Qwen3-8B", "verl-gke:modelRevision": _COMMIT.upper()},
    ],
)
def test_following_each_revision_fix_keeps_the_user_s_model(
    typed: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    seen, code = _plan_until_settled(typed, capsys)
    assert code == 0 and len(seen) == 1, seen
    assert "Qwen/Qwen2.5-32B-Instruct" not in seen[0]  # never the tutorial's model


def test_a_pinned_revision_reaches_the_data_prep_job_the_job_and_the_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    typed = {"verl-gke:model": "Qwen/Qwen3-8B", "verl-gke:modelRevision": _COMMIT}
    result = run_stack("a3u", typed)
    (prep,) = [r for r in result.of_type("kubernetes:batch/v1:Job") if r.name == "data-prep-job"]
    command = prep.inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    folder = f"Qwen3-8B-{_COMMIT[:12]}"
    assert command[command.index("--model-revision") + 1] == _COMMIT
    assert command[command.index("--model-folder") + 1] == folder
    jobs = result.of_type("pulumi-python:dynamic/jobs:RayJob")
    (job,) = [r for r in jobs if r.name == "grpo-job"]
    assert f"actor_rollout_ref.model.path=/data/{folder}" in job.inputs["entrypoint"]
    assert plan_cli.main(["a3u", *(f"--set={k}={v}" for k, v in typed.items())]) == 0
    assert f"revision: {_COMMIT} (pinned)" in capsys.readouterr().out

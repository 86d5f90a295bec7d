"""A newcomer's mistakes: each refusal's fix keeps what the user meant and, applied exactly as
printed (the shell's reading of the `--set` words, after the user's own), is accepted by every
rule the plan runs before registering a resource: Pulumi's declared types
(planning/pulumi_config.py), the stack settings (config/settings.load_settings) and the GRPO job
(training/assembly.training_job, its memory fit included)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from config.run_inputs import reward_problems
from config.settings import load_settings
from planning.offline_engine import REPO_ROOT, stack_config
from tools import plan as plan_cli
from training.assembly import training_job

# A fix in the plan's form: the flag and one shell word.
_SET = re.compile(r"(--set(?:-secret)?) ('[^']*'|[^\s']*'[^']*'|\S+)")


_LEAVE_OUT = re.compile(r"leave out --set '?([\w-]+:[\w.\[\]-]+)=\.\.\.'?")


def _printed_fix(err: str) -> list[str]:
    """The first alternative of the (single) fix in `err`, as the words a shell passes on; a
    `leave out --set KEY=...` as LEAVE_OUT KEY."""
    (line,) = [line for line in err.splitlines() if "Fix: " in line]
    first = line.split("Fix: ", 1)[1].split(", or ")[0]
    first = re.sub(r"\s*\([^)]*\)", "", first)  # explanations in parentheses
    words: list[str] = []
    for key in _LEAVE_OUT.findall(first):
        words += ["LEAVE_OUT", key]
    for flag, word in _SET.findall(_LEAVE_OUT.sub("", first)):
        # A comma after an unquoted word is the prose's (", then --set ..."), not the value's.
        words += [flag, *shlex.split(word.removesuffix(","))]
    assert words, line
    return words


def _applied(typed: list[str], fix: list[str]) -> list[str]:
    """The user's words with the fix applied: a left-out --set dropped, the fix's appended."""
    dropped = {fix[i + 1] for i, word in enumerate(fix) if word == "LEAVE_OUT"}
    kept = [
        word
        for pair in zip(typed[::2], typed[1::2], strict=True)
        if pair[1].split("=", 1)[0] not in dropped
        for word in pair
    ]
    added = [
        word
        for pair in zip(fix[::2], fix[1::2], strict=True)
        if pair[0] != "LEAVE_OUT"
        for word in pair
    ]
    return [*kept, *added]


def _accepted(stack: str, words: list[str]) -> None:
    parser = plan_cli.argument_parser()
    sets = plan_cli.config_sets(parser, parser.parse_args([stack, *words]))
    config = stack_config(stack, REPO_ROOT, sets)
    training_job(load_settings(stack, config, offline=True).settings)


@pytest.mark.parametrize(
    ("stack", "typed", "meant"),
    [
        ("a4", ["--set", "verl-gke:gpuNodes=four"], "gpuNodes=4"),
        ("a3u", ["--set", "verl-gke:job.rolloutN=eight"], "job.rolloutN=8"),
        ("a4", ["--set", "verl-gke:region=us-east5"], "gcp:region=us-east5"),
        # Pulumi.yaml declares these boolean / integer / array<string>: Pulumi's own refusal.
        ("a4", ["--set", "verl-gke:deleteBucketOnDestroy=yes"], "deleteBucketOnDestroy=true"),
        ("a4", ["--set", "verl-gke:capacityWaitMinutes=2h"], "capacityWaitMinutes=120"),
        ("a4", ["--set", "verl-gke:hangMinutes=1h30m"], "hangMinutes=90"),
        (
            "a4x",
            ["--set", "verl-gke:authorizedNetworks=203.0.113.7/32,198.51.100.0/24"],
            "authorizedNetworks[1]=198.51.100.0/24",
        ),
        ("a4", ["--set", "verl-gke:hfToken=hf_plaintexttoken"], "--set-secret"),
        # The program's rules.
        ("a4", ["--set", "verl-gke:gpuNodeHourlyUsd=$41.50"], "gpuNodeHourlyUsd=41.5"),
        ("a3u", ["--set", "verl-gke:capacity=preemptible"], "capacity=spot"),
        (
            "a4",
            ["--set", "verl-gke:model=Qwen/Qwen2.5-32B-Instrct"],
            "model=Qwen/Qwen2.5-32B-Instruct",
        ),
        (
            "a3u",
            ["--set", "verl-gke:reward=docs/examples/exact_match.py"],
            "reward=docs/examples/exact_match.py:compute_score",
        ),
        (
            "a3u",
            ["--set", "verl-gke:job.extraOverrides=trainer.log_val_generations=4"],
            'extraOverrides=["trainer.log_val_generations=4"]',
        ),
        (
            "a3u",
            ["--set", 'verl-gke:job.logger=["console","wandb"]'],
            "wandbApiKey=<your-wandb-api-key>",
        ),
        # Found by a newcomer's 30 mistakes (issue 38, adv38): each fix kept the meaning.
        (
            "a4x",
            ["--set", 'verl-gke:authorizedNetworks=["203.0.113.7/32","198.51.100.0/24"]'],
            "authorizedNetworks[1]=198.51.100.0/24",
        ),
        # An address without /N: the item set as an item (a plain string fails array<string>).
        (
            "a4x",
            ["--set", "verl-gke:authorizedNetworks[0]=203.0.113.7"],
            "authorizedNetworks[0]=203.0.113.7/32",
        ),
        ("a4", ["--set", "verl-gke:mdoel=Qwen/Qwen3-8B"], "model=Qwen/Qwen3-8B"),
        # An IPv6 item typed as an item: that item left out, the IPv4 one kept (nc2).
        (
            "a4x",
            [
                "--set",
                "verl-gke:authorizedNetworks[0]=203.0.113.7/32",
                "--set",
                "verl-gke:authorizedNetworks[1]=2001:db8::/32",
            ],
            "verl-gke:authorizedNetworks[1]",
        ),
        # An optional switch (declared a string, so it may stay unset) read as Pulumi reads a
        # boolean: `on` refused, its meaning kept.
        ("a4", ["--set", "verl-gke:imageStreaming=on"], "imageStreaming=true"),
        ("a4", ["--set", "verl-gke:imageStreaming=off"], "imageStreaming=false"),
        # A zone typed as the region: the region it is in, the zone kept as the zone.
        ("a4", ["--set", "gcp:region=us-central1-b"], "verl-gke:zone=us-central1-b"),
        (
            "a3u",
            ["--set", "verl-gke:reward=exact_match.py:compute_score"],
            "reward=docs/examples/exact_match.py:compute_score",
        ),
        ("a4", ["--set", "verl-gke:job.logger=console,tensorboard"], '"tensorboard"'),
        ("a4", ["--set", "verl-gke:job.trainBatchSize=1k"], "trainBatchSize=1024"),
        ("a4", ["--set", "verl-gke:gpuNodeHourlyUsd=41,50"], "gpuNodeHourlyUsd=41.5"),
        ("a4", ["--set", "verl-gke:evaluation=false"], "evaluation.enabled=false"),
        ("a4", ["--set", "verl-gke:verlRef=0.6.1"], "verlRef=v0.6.1"),
        (
            "a4",
            ["--set", "verl-gke:reservation=projects/my-project/reservations/My-Res"],
            "reservation=projects/my-project/reservations/my-res",
        ),
        # One refusal: the stack file's reservation placeholder is not "not set".
        ("a4x", ["--set", "verl-gke:capacity=spot"], "capacity=reservation"),
        # The name in the allowed characters, not the default; one problem, not the bucket's too.
        ("a4", ["--set", "verl-gke:clusterName=My_Cluster"], "clusterName=my-cluster"),
        # The mapping typed without JSON, or lacking a role: the user's own columns kept (with a
        # reward, since my-org/math has no verl score).
        (
            "a3u",
            [
                "--set",
                "verl-gke:dataset=my-org/math",
                "--set",
                "verl-gke:reward=docs/examples/exact_match.py:compute_score",
                "--set",
                "verl-gke:datasetColumns=prompt:problem,answer:solution",
            ],
            '"prompt":"problem","answer":"solution"',
        ),
        (
            "a3u",
            [
                "--set",
                "verl-gke:dataset=my-org/math",
                "--set",
                "verl-gke:reward=docs/examples/exact_match.py:compute_score",
                "--set",
                'verl-gke:datasetColumns={"prompt":"problem"}',
            ],
            '"prompt":"problem"',
        ),
        # The longest response the context holds does not fit memory: a length that does.
        ("a4", ["--set", "verl-gke:job.maxResponseLength=32768"], "maxResponseLength="),
    ],
)
def test_each_printed_fix_keeps_the_meaning_and_is_accepted_as_printed(
    stack: str, typed: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plan_cli.main([stack, *typed]) == 2
    err = capsys.readouterr().err
    fix = _printed_fix(err)
    assert "pulumi config" not in " ".join(fix)
    assert any(meant in word for word in fix), (meant, fix)
    _accepted(stack, _applied(typed, fix))


def test_a_list_field_given_as_json_text_is_the_list_as_pulumi_stores_it() -> None:
    # `pulumi config set --path verl-gke:job.extraOverrides '["..."]'` stores the text
    # (pulumi/pulumi map.go adjustObjectValue); the job reads the list it spells.
    typed = ["--set", 'verl-gke:job.extraOverrides=["trainer.log_val_generations=4"]']
    parser = plan_cli.argument_parser()
    sets = plan_cli.config_sets(parser, parser.parse_args(["a3u", *typed]))
    config = stack_config("a3u", REPO_ROOT, sets)
    assert config["verl-gke:job"] == '{"extraOverrides": "[\\"trainer.log_val_generations=4\\"]"}'
    settings = load_settings("a3u", config, offline=True).settings
    spec = training_job(settings).spec
    assert spec.extra_overrides == ("trainer.log_val_generations=4",)


def test_the_context_length_fix_is_the_longest_length_every_rule_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a4", "--set", "verl-gke:job.maxResponseLength=32768"]) == 2
    fix = _printed_fix(capsys.readouterr().err)
    length = int(fix[-1].rsplit("=", 1)[1])
    assert length < 32768 - 512  # the context's own bound does not fit a4's memory
    doubled = ["--set", f"verl-gke:job.maxResponseLength={min(2 * length, 32768 - 512)}"]
    with pytest.raises(ValueError, match="memory"):
        _accepted("a4", doubled)


def test_a_modelled_key_in_extra_overrides_moves_with_its_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    typed = ["--set", 'verl-gke:job.extraOverrides=["actor_rollout_ref.actor.optim.lr=2e-6"]']
    assert plan_cli.main(["a4", *typed]) == 2
    fix = _printed_fix(capsys.readouterr().err)
    assert fix == ["--set", "verl-gke:job.lr=2e-6"]
    # "remove it from verl-gke:job.extraOverrides": the override leaves, the setting takes it.
    _accepted("a4", fix)


def test_a_reward_function_typo_gets_the_closest_function_verl_can_call(tmp_path: Path) -> None:
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "mine.py").write_text(
        "def extract(text):\n    return text.strip()\n\n\n"
        "def my_reward(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(extract(solution_str) == ground_truth)\n"
    )
    (problem,) = reward_problems("rewards/mine.py:my_rewards", "a3u", tmp_path)
    fixed = re.search(r"verl-gke:reward '([^']+)'", problem)
    assert fixed is not None and fixed[1] == "rewards/mine.py:my_reward", problem
    assert reward_problems(fixed[1], "a3u", tmp_path) == []


def test_a_missing_reward_file_keeps_its_path_and_function_in_the_fix(tmp_path: Path) -> None:
    (problem,) = reward_problems("rewards/mine.py:score", "a3u", tmp_path)
    assert "create rewards/mine.py there with `def score(data_source," in problem


def test_a_capacity_another_profile_offers_names_that_profile_as_a_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    typed = ["--set", "verl-gke:capacity=spot"]
    assert plan_cli.main(["a4x", *typed]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "Fix: " in line]
    other = line.split(", or ", 1)[1]
    assert "--set verl-gke:profile=a4" in other, line
    _accepted("a4x", [*typed, "--set", "verl-gke:profile=a4"])


def test_an_ipv6_item_fix_names_that_item_and_keeps_the_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    typed = [
        "--set",
        "verl-gke:authorizedNetworks[0]=203.0.113.7/32",
        "--set",
        "verl-gke:authorizedNetworks[1]=2001:db8::/32",
    ]
    assert plan_cli.main(["a4x", *typed]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "Fix: " in line]
    fix = line.split("Fix: ", 1)[1]
    assert fix.startswith("leave out --set 'verl-gke:authorizedNetworks[1]=...'"), line
    assert "IPv4 range" in fix and "authorizedNetworks=" not in fix, line
    assert _applied(typed, _printed_fix(line)) == typed[:2]


def test_a_zone_given_as_the_region_is_said_once_with_no_derived_zone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a4", "--set", "gcp:region=us-central1-b"]) == 2
    err = capsys.readouterr().err
    problems = [line for line in err.splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - gcp:region = 'us-central1-b': a zone, not a region. Fix: --set "
        "gcp:region=us-central1, then --set verl-gke:zone=us-central1-b"
    ]

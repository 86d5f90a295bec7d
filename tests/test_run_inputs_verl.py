"""An own run's inputs through verl's own code, in the isolated verl virtualenvs that .ci/setup
builds (VERL_GKE_VERL_VENVS/<release>), as tests/test_verl_config_compose.py does:

- the parquet payloads/data_prep/prep_dataset.py writes for a fixture dataset loads through the
  trainer's create_rl_dataset (RLHFDataset) and collates (verl_scripts/verl_run_inputs_check.py);
- the reward file is loaded by verl's get_custom_reward_fn from the overrides the program renders
  and scores the fixture rows (right answer 1, wrong 0), and the key of the other release is not
  what verl reads;
- the whole argv of an own run composes and passes verl's config checks
  (verl_scripts/verl_compose_check.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from config import run_inputs
from config.settings import StackSettings, load_settings
from manifests import data_prep
from tests.program import REAL
from tests.support.require import missing
from tests.support.verl_check import start_check
from training.assembly import reward_overrides, training_job
from training.grpo_preflight import dataset_limits

# Runs payloads and verl's code in subprocesses (the verl virtualenvs).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
RUN_INPUTS_CHECK = REPO / "verl_scripts" / "verl_run_inputs_check.py"
COMPOSE_CHECK = REPO / "verl_scripts" / "verl_compose_check.py"
VENVS_ENV = "VERL_GKE_VERL_VENVS"
# The stack whose profile pins each release's ref (tests/test_verl_config_compose.py
# RELEASE_FOR_REF: v0.6.1 -> 0.6.1, ddbcdb7 -> 0.9.0).
STACK_FOR_RELEASE = {"0.6.1": "a3u", "0.9.0": "a4x"}
# Releases whose virtualenv can read parquet through verl's dataset code.
# requirements-verl-0.6.1.txt has no datasets, pyarrow or pandas (verl 0.6.1 requires them), and
# no datasets release resolves against its pins (fsspec 2026.9.0, numpy 1.26.4, huggingface_hub
# 0.36.2), so at 0.6.1 the reward runs on the rows prep_dataset.hub_rows makes, without the
# parquet round trip.
DATASET_RELEASES = ("0.9.0",)
REWARD = run_inputs.REWARD_EXAMPLE
OWN_RUN = {
    "verl-gke:dataset": "example-org/arith",
    "verl-gke:datasetColumns": '{"prompt":"q","answer":"a","instruction":"Answer after ####."}',
    "verl-gke:reward": REWARD,
}
ROWS = {
    "train": [
        {"q": "What is 2 + 3?", "a": 5},
        {"q": "What is 10 * 12?", "a": 120},
        {"q": "Half of 9?", "a": 4.5},
        {"q": "How many thousands in 1,234,000?", "a": "1,234"},
    ],
    "test": [{"q": "What is 1 + 1?", "a": 2}],
}


# A stack whose profile pins v0.6.1 with verlRef set to v0.9.0 by hand (and an image whose vLLM
# that verl needs: config/verl_source.py): the job runs verl 0.9.0, so the reward must be under
# the key 0.9.0's main_ppo reads.
HAND_SET_REF = ("a3u", "v0.9.0", "0.9.0")
HAND_SET_IMAGE = "verlai/verl:vllm024.latest"


def _settings(release: str) -> StackSettings:
    return load_settings(STACK_FOR_RELEASE[release], {**REAL, **OWN_RUN}, offline=False).settings


def _hand_set_ref_settings() -> StackSettings:
    stack, ref, _ = HAND_SET_REF
    config = {**REAL, **OWN_RUN, "verl-gke:verlRef": ref, "verl-gke:verlImage": HAND_SET_IMAGE}
    return load_settings(stack, config, offline=False).settings


def _local(overrides: list[str]) -> list[str]:
    """The program's reward overrides with the path pointing at the file in this checkout."""
    file = str(REPO / REWARD.split(":")[0])
    return [
        f"{o.split('=')[0]}={file}" if o.split("=")[0].endswith(".path") else o for o in overrides
    ]


def _other_key(overrides: list[str]) -> list[str]:
    keys = set(run_inputs.REWARD_CONFIG_KEY.values())
    swapped = []
    for override in overrides:
        key, value = override.split("=", 1)
        prefix = key.rsplit(".", 1)[0]
        [other] = keys - {prefix}
        swapped.append(f"{other}.{key.rsplit('.', 1)[1]}={value}")
    return swapped


def _python(release: str) -> Path:
    root = os.environ.get(VENVS_ENV)
    if not root:
        missing(f"{VENVS_ENV} is unset: these checks need the verl virtualenvs .ci/setup builds")
    python = Path(root) / release / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{VENVS_ENV}={root} has no virtualenv for verl {release} ({python})")
    return python


def _requests() -> dict[tuple[str, str], tuple[Path, dict[str, Any]]]:
    requests = {}
    for release in STACK_FOR_RELEASE:
        rendered = _local(reward_overrides(_settings(release)))
        base = {
            "dataset": OWN_RUN["verl-gke:dataset"],
            "columns": json.loads(OWN_RUN["verl-gke:datasetColumns"]),
            "rows": ROWS,
        }
        requests[(release, "rendered")] = (
            _python(release),
            {**base, "reward_overrides": rendered, "with_dataset": release in DATASET_RELEASES},
        )
        requests[(release, "other-key")] = (
            _python(release),
            {**base, "reward_overrides": _other_key(rendered), "with_dataset": False},
        )
    hand_set = _local(reward_overrides(_hand_set_ref_settings()))
    requests[(HAND_SET_REF[2], "hand-set-ref")] = (
        _python(HAND_SET_REF[2]),
        {**base, "reward_overrides": hand_set, "with_dataset": False},
    )
    return requests


@cache
def _reports() -> dict[tuple[str, str], dict[str, Any]]:
    """All checks at once, one interpreter each (importing verl takes seconds)."""
    running = {}
    for case, (python, request) in _requests().items():
        request = {**request, "workdir": tempfile.mkdtemp(prefix="verl-run-inputs-")}
        running[case] = start_check(python, RUN_INPUTS_CHECK, request)
    reports = {}
    for case, process in running.items():
        stdout, stderr = process.communicate()
        assert process.returncode in (0, 1), f"{case}: exit {process.returncode}\n{stderr[-3000:]}"
        reports[case] = json.loads(stdout)
    return reports


@pytest.mark.parametrize("release", sorted(STACK_FOR_RELEASE))
def test_verl_loads_the_reward_the_program_renders_and_scores_the_rows(release: str) -> None:
    report = _reports()[(release, "rendered")]
    assert report["verl_version"] == release
    assert report["ok"], report.get("traceback") or report
    truths = [str(r["a"]) for r in ROWS["train"]]
    assert report["scores"] == [1.0] * len(truths)
    assert report["wrong_scores"] == [0.0] * len(truths)


@pytest.mark.parametrize("release", sorted(STACK_FOR_RELEASE))
def test_the_other_releases_reward_key_is_not_what_verl_reads(release: str) -> None:
    # v0.6.1 has no reward.custom_reward_function (compose refuses it); v0.9.0 keeps the top-level
    # key only for migrate_legacy_reward_impl, which main_ppo does not call (no function found).
    report = _reports()[(release, "other-key")]
    assert not report["ok"]
    assert report["stage"] in ("compose", "reward"), report


def test_a_verl_ref_set_by_hand_gets_the_reward_key_that_release_reads() -> None:
    # verl v0.9.0 reads reward.custom_reward_function (get_custom_reward_fn, RewardLoopWorker);
    # the top-level key of the profile's v0.6.1 would leave the function unloaded.
    report = _reports()[(HAND_SET_REF[2], "hand-set-ref")]
    assert report["verl_version"] == HAND_SET_REF[2]
    assert report["ok"], report.get("traceback") or report
    assert report["scores"] == [1.0] * len(ROWS["train"])


@pytest.mark.parametrize("release", DATASET_RELEASES)
def test_the_data_prep_parquet_loads_through_verls_rl_dataset(release: str) -> None:
    report = _reports()[(release, "rendered")]
    assert report["ok"], report.get("traceback") or report
    assert report["train_rows"] == len(ROWS["train"])
    instruction = json.loads(OWN_RUN["verl-gke:datasetColumns"])["instruction"]
    for item, row in zip(report["items"], ROWS["train"], strict=True):
        assert item["data_source"] == OWN_RUN["verl-gke:dataset"]
        assert item["ground_truth"] == str(row["a"]) and item["style"] == "rule"
        assert item["raw_prompt"] == [{"role": "user", "content": f"{row['q']} {instruction}"}]
    assert {"data_source", "reward_model", "extra_info", "raw_prompt"} <= set(report["batch_keys"])
    assert "reward_model" in report["check_refused"]


@pytest.mark.parametrize("release", sorted(STACK_FOR_RELEASE))
def test_an_own_runs_argv_composes_and_passes_verls_checks(release: str) -> None:
    job = training_job(_settings(release))
    argv = shlex.split(job.entrypoint.split(" -- ", 1)[1])
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    request = json.dumps({"cases": {"own-run": argv[3:]}})
    done = subprocess.run(
        [str(_python(release)), str(COMPOSE_CHECK)],
        input=request,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result = json.loads(done.stdout)["results"]["own-run"]
    assert result["ok"], result


# --- data_source values verl scores without verl-gke:reward ------------------------------------

SCORED_CHECK = REPO / "verl_scripts" / "verl_scored_check.py"
# Releases whose virtualenv has pyarrow to write fixture parquet (see DATASET_RELEASES).
PARQUET_RELEASES = DATASET_RELEASES
# Per Hub dataset: its raw answer column (the worked solution, as on the Hub), the answer verl's
# own preprocessing takes out of it (examples/data_preprocess/gsm8k.py extract_solution: the
# number after '#### '; math_dataset.py: remove_boxed(last_boxed_only_string(solution))), and a
# right response in the format verl's score reads.
GSM8K_RAW = "She sold 48/2 = <<48/2=24>>24 clips in May.\nIn all 48+24 = <<48+24=72>>72.\n#### 72"
MATH_RAW = "Since $x + 2 = \\frac{11}{2}$, we get $x = \\boxed{\\frac{7}{2}}$."
ANSWER_COLUMNS = {
    "openai/gsm8k": (GSM8K_RAW, "72", "48 + 24 = 72.\n#### 72"),
    "lighteval/MATH": (MATH_RAW, "\\frac{7}{2}", "So $x = \\boxed{\\frac{7}{2}}$."),
    "DigitalLearningGmbH/MATH-lighteval": (
        MATH_RAW, "\\frac{7}{2}", "So $x = \\boxed{\\frac{7}{2}}$."
    ),
}  # fmt: skip


def _answer_cases() -> list[list[str]]:
    """(data_source, response, ground truth): each raw column, then each extracted answer."""
    rows = sorted(ANSWER_COLUMNS.items())
    raw = [[source, response, column] for source, (column, _, response) in rows]
    return raw + [[source, response, answer] for source, (_, answer, response) in rows]


def _bucket_scored_flags() -> tuple[list[str], list[str]]:
    """--scored-sources and --scored-prefixes of a parquet folder's data-prep Job, no reward."""
    s = load_settings("a3u", dict(REAL), offline=False).settings
    dataset = {"verl-gke:dataset": f"gs://{s.bucket_name}/mine"}
    own = load_settings("a3u", {**REAL, **dataset}, offline=False).settings
    command = data_prep.command(own, dataset_limits(training_job(own).spec))
    sources = command[command.index("--scored-sources") + 1].split(",")
    return sources, command[command.index("--scored-prefixes") + 1].split(",")


@cache
def _scored_reports() -> dict[str, dict[str, Any]]:
    sources, prefixes = _bucket_scored_flags()
    running = {}
    for release in STACK_FOR_RELEASE:
        request = {
            "workdir": tempfile.mkdtemp(prefix="verl-scored-"),
            "sources": [*run_inputs.VERL_SCORED_SOURCES, "aime2024", "my_source"],
            "scored_sources": sources,
            "scored_prefixes": prefixes,
            "parquet": release in PARQUET_RELEASES,
            "answers": _answer_cases(),
        }
        running[release] = start_check(_python(release), SCORED_CHECK, request)
    reports = {}
    for release, process in running.items():
        stdout, stderr = process.communicate()
        assert process.returncode == 0, f"{release}: exit {process.returncode}\n{stderr[-3000:]}"
        reports[release] = json.loads(stdout)
    return reports


@pytest.mark.parametrize("release", sorted(STACK_FOR_RELEASE))
def test_verl_scores_every_data_source_of_the_table_and_no_other(release: str) -> None:
    # verl's default_compute_score raises NotImplementedError for a data_source it has no branch
    # for (verl/utils/reward_score/__init__.py); any other outcome means a branch matched.
    report = _scored_reports()[release]
    assert report["verl_version"] == release
    not_implemented = report["not_implemented"]
    assert [s for s in run_inputs.VERL_SCORED_SOURCES if not_implemented[s]] == []
    assert not not_implemented["aime2024"] and not_implemented["my_source"]
    # The names and prefixes verl's function compares data_source with are the table's.
    assert report["verl_sources"] == sorted(run_inputs.VERL_SCORED_SOURCES)
    assert report["verl_prefixes"] == sorted(run_inputs.VERL_SCORED_PREFIXES)


@pytest.mark.parametrize("release", PARQUET_RELEASES)
def test_data_prep_refuses_a_parquet_folder_verl_could_not_score_or_read(release: str) -> None:
    # Without verl-gke:reward the Job gets the table (--scored-sources/--scored-prefixes) and
    # refuses a data_source outside it; with a reward any data_source goes to the custom
    # function. verl's RLHFDataset reads prompt as chat messages (rl_dataset.py _build_messages).
    checks = _scored_reports()[release]["checks"]
    assert checks["known-scored"] is None and checks["unknown-reward-set"] is None
    refused = checks["unknown-scored"]
    assert "['my_source']" in refused and "NotImplementedError" in refused
    assert "verl-gke:reward" in refused and "docs/own-run.md" in refused
    assert "prompt is string" in checks["string-prompt-reward-set"]


@pytest.mark.parametrize("release", sorted(STACK_FOR_RELEASE))
def test_verl_scores_zero_against_a_raw_answer_column_refused_without_a_reward(
    release: str,
) -> None:
    # verl's gsm8k score compares the response's '#### N' with the ground truth as is
    # (verl/utils/reward_score/gsm8k.py) and its MATH score the last \boxed{} with it through
    # is_equiv (math_reward.py): neither takes an answer out of the ground truth, so a raw column
    # scores 0 on a right response and only the extracted answer scores 1. The datasets refused
    # with datasetColumns and no reward (run_inputs.EXTRACTED_ANSWER) are exactly these.
    assert sorted(ANSWER_COLUMNS) == sorted(run_inputs.EXTRACTED_ANSWER)
    scores = _scored_reports()[release]["answer_scores"]
    assert scores == [0.0] * len(ANSWER_COLUMNS) + [1.0] * len(ANSWER_COLUMNS)
    # The reward the refusal offers scores the same right response 1 against the raw column.
    file, function = run_inputs.REWARD_EXAMPLE.split(":")
    spec = importlib.util.spec_from_file_location("offered_reward", REPO / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reward = getattr(module, function)
    for source, (column, _, response) in ANSWER_COLUMNS.items():
        assert reward(data_source=source, solution_str=response, ground_truth=column) == 1.0

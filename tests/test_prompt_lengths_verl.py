"""Prompt lengths through verl's own code, in the verl virtualenvs .ci/setup builds
(VERL_GKE_VERL_VENVS/<release>; verl_scripts/verl_prompt_length_check.py):

- verl ships data.filter_overlong_prompts False and data.truncation error
  (verl/trainer/config/data/legacy_data.yaml, v0.6.1 and v0.9.0), so one prompt longer than
  data.max_prompt_length stops the run: RLHFDataset.__getitem__ raises at v0.6.1
  (verl/utils/dataset/rl_dataset.py, verl/utils/torch_functional.py postprocess_data);
- the overrides the program renders turn verl's filter on, and the filter keeps exactly the rows
  payloads/data_prep/prep_checks.py counts as at most the limit (rows at the limit kept, one
  over dropped);
- at v0.6.1 every kept row passes __getitem__ with truncation error; at 0.9.0 the agent loop
  measures each prompt as the data-prep Job does, the parquet goes through the trainer's
  create_rl_dataset, and the data-prep count refuses a train batch larger than the rows kept.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.require import verl_python
from tests.support.verl_check import start_check
from training.grpo_spec import FIXED_OVERRIDES

# Runs verl's code in subprocesses (the verl virtualenvs).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "verl_scripts" / "verl_prompt_length_check.py"
RELEASES = ("0.6.1", "0.9.0")
LIMIT = 16
# The template adds 9 tokens to a prompt of n words: 7 words is exactly the limit, 8 one over.
WORDS = [1, 5, 7, 8, 9, 12, 20, 3, 7]


def _python(release: str) -> Path:
    return verl_python(release)


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Both releases' verdicts; the two checks run at once."""
    overrides = [f"{key}={value}" for key, value in FIXED_OVERRIDES.items()]
    started = {}
    for release in RELEASES:
        work = tmp_path_factory.mktemp(f"lengths-{release}")
        ask = {"workdir": str(work), "overrides": overrides, "max_prompt_length": LIMIT}
        started[release] = start_check(_python(release), CHECK, {**ask, "words": WORDS})
    results = {}
    for release, proc in started.items():
        stdout, stderr = proc.communicate()
        result = json.loads(stdout)
        assert result["ok"], f"{release} {result['stage']}: {result['error']}\n{stderr[-3000:]}"
        assert result["verl_version"] == release
        results[release] = result
    return results


@pytest.fixture(params=RELEASES)
def verdict(request: pytest.FixtureRequest, verdicts: dict[str, dict]) -> dict:
    return verdicts[request.param]


def test_verl_raises_on_a_long_prompt_unless_told_to_filter(verdict: dict) -> None:
    assert verdict["defaults"] == {"filter_overlong_prompts": False, "truncation": "error"}
    assert verdict["rendered"] == {"filter_overlong_prompts": True, "truncation": "error"}


def test_verl_keeps_exactly_the_rows_data_prep_counts_as_short_enough(verdict: dict) -> None:
    ours = verdict["ours"]
    assert ours == [n + 9 for n in WORDS]  # the template's 9 tokens, nothing else
    kept = [row for row, n in enumerate(ours) if n <= LIMIT]
    assert LIMIT in ours and LIMIT + 1 in ours  # both sides of the boundary are exercised
    assert verdict["verl_kept"] == kept


def test_every_kept_row_is_read_without_the_truncation_error(verdict: dict) -> None:
    kept = sum(1 for n in verdict["ours"] if n <= LIMIT)
    if verdict["verl_version"] == "0.6.1":
        assert verdict["getitem_ok"] == kept
        first_over = next(n for n in verdict["ours"] if n > LIMIT)
        # The first over-long row fails __getitem__ when the filter is off.
        assert f"sequence_length={first_over} is larger than max_length={LIMIT}" in (
            verdict["over_error"]
        )
    else:  # 0.9.0: the agent loop tokenizes the prompt; it must measure as data prep does
        assert verdict["agent_loop"] == verdict["ours"]


def test_data_prep_counts_and_refuses_a_batch_larger_than_what_verl_keeps(
    verdicts: dict[str, dict],
) -> None:
    # verl 0.6.1's virtualenv has no parquet reader (requirements-verl-0.6.1.txt); 0.9.0's has.
    verdict = verdicts["0.9.0"]
    kept = sum(1 for n in verdict["ours"] if n <= LIMIT)
    train = {"rows": len(WORDS), "over": len(WORDS) - kept, "kept": kept, "longest": 29}
    assert verdict["counts"] == {"train": train, "test": train}
    assert verdict["summary"]["train"] == train
    assert verdict["summary"]["max_prompt_length"] == LIMIT
    refused = verdict["refused"]
    assert f"{kept} of {len(WORDS)} rows" in refused
    assert f"trainBatchSize = {kept + 3}" in refused
    assert "verl-gke:job.maxPromptLength 29" in refused
    assert f"verl-gke:job.trainBatchSize {kept}" in refused

"""The data-prep Job's verdict on prompt lengths (payloads/data_prep/prep_checks.py
length_problem), and the arguments the program gives it. The counting itself runs with a real
tokenizer and verl's own filter in tests/test_prompt_lengths_verl.py."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from config.settings import load_settings
from manifests import data_prep
from payloads.data_prep import prep_checks
from tests.program import REAL
from training.assembly import training_job
from training.grpo_preflight import dataset_limits, preflight
from training.grpo_spec import GrpoPreflightError, apply_overrides


def _limits(batch: int, step: int = 2, smallest: int = 64) -> argparse.Namespace:
    return argparse.Namespace(
        max_prompt_length=512,
        train_batch_size=batch,
        train_batch_step=step,
        min_train_batch=smallest,
    )


def _counts(train_kept: int, test_kept: int = 5) -> dict[str, dict[str, int]]:
    return {
        "train": {"rows": 1000, "over": 1000 - train_kept, "kept": train_kept, "longest": 900},
        "test": {"rows": 10, "over": 10 - test_kept, "kept": test_kept, "longest": 700},
    }


def test_enough_rows_pass() -> None:
    assert prep_checks.length_problem(_counts(256), _limits(256)) is None


def test_fewer_rows_than_one_batch_are_refused_with_both_fixes() -> None:
    problem = prep_checks.length_problem(_counts(201), _limits(256))
    assert problem is not None
    assert "201 of 1000 rows" in problem and "799 longer, the longest 900" in problem
    assert "trainBatchSize = 256" in problem
    # The longest prompt of either split keeps every row; the smaller batch is a multiple of the
    # step and at least the mini-batch.
    assert "verl-gke:job.maxPromptLength 900" in problem
    assert "verl-gke:job.trainBatchSize 200" in problem


def test_no_smaller_batch_is_offered_below_the_mini_batch() -> None:
    problem = prep_checks.length_problem(_counts(50), _limits(256))
    assert problem is not None and "trainBatchSize 2" not in problem
    assert problem.endswith("(keeps every row; the preview checks the memory fit again)")


def test_an_empty_validation_set_is_refused() -> None:
    problem = prep_checks.length_problem(_counts(256, test_kept=0), _limits(256))
    assert problem is not None and problem.startswith("test.parquet: none of its 10 rows")


@pytest.mark.parametrize("stack", ["a3u", "a4x"])
def test_the_offered_smaller_batch_passes_the_jobs_batch_rules(stack: str) -> None:
    """Every batch the Job may offer (a multiple of --train-batch-step, at least
    --min-train-batch) is accepted by the program's own batch rules."""
    settings = load_settings(stack, dict(REAL), offline=False).settings
    job = training_job(settings)
    command = data_prep.command(settings, dataset_limits(job.spec))
    flag = dict(zip(command, [*command[1:], ""], strict=True))
    step, smallest = int(flag["--train-batch-step"]), int(flag["--min-train-batch"])
    assert flag["--max-prompt-length"] == str(job.spec.max_prompt_length)
    assert prep_checks.smaller_batch(smallest - 1, step, smallest) is None
    for kept in range(smallest, job.spec.train_batch_size):
        batch = prep_checks.smaller_batch(kept, step, smallest)
        assert batch is not None and batch <= kept
        spec = apply_overrides(job.spec, {"trainBatchSize": batch})
        try:
            preflight(
                spec,
                gpus_per_node_provisioned=spec.n_gpus_per_node,
                gpu_nodes_provisioned=spec.nnodes,
                model=job.model.arch,
            )
        except GrpoPreflightError as error:
            pytest.fail(f"trainBatchSize {batch} offered for {kept} rows is refused: {error}")


@pytest.mark.parametrize("stack", ["a3u", "a4x"])
def test_a_train_batch_larger_than_gsm8k_is_refused_with_a_batch_that_runs(stack: str) -> None:
    """openai/gsm8k main has 7,473 training rows (its dataset card); verl's train dataloader drops
    the last partial batch and asserts it is not empty (verl/trainer/ppo/ray_trainer.py,
    drop_last=True and "Train dataloader is empty!", v0.6.1 and 0.9.0)."""
    config = {**REAL, "verl-gke:job": json.dumps({"trainBatchSize": 10000})}
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(load_settings(stack, config, offline=False).settings)
    (problem,) = caught.value.problems
    assert problem.startswith("verl-gke:job.trainBatchSize = 10000: openai/gsm8k has 7,473")
    fit = int(re.search(r"Fix: set it to (\d+)", problem)[1])  # type: ignore[index]
    assert fit <= 7473
    accepted = {**REAL, "verl-gke:job": json.dumps({"trainBatchSize": fit})}
    assert training_job(load_settings(stack, accepted, offline=False).settings).spec

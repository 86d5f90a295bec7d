"""bench/gpu_run.py's CPU path (`--device cpu`, bench/gpu_run_cpu.py), run as a user runs it.

- The two jobs the bench submits (training.assembly for 1 node x 1 GPU, the tiny model's
  modelConfig, sdpa through extraOverrides; the GSM8K job and the own dataset's) pass the
  provider's Check in the real `python -m pulumi.dynamic` host, and compose and validate in
  verl 0.6.1's config (verl_scripts/verl_compose_check.py), rollout.name vllm included.
- The data-prep Job's own command, run by payloads/data_prep/prepare_data.py's main on the
  bench's local rows (in verl 0.9.0's virtualenv: datasets, pyarrow, transformers), writes the
  rows and the model, and counts the own dataset's over-long prompts as verl's filter will.
- verl_scripts/gpu_standin meets verl 0.6.1's rollout contract (verl/workers/rollout/base.py:
  `get_rollout_class` reads `_ROLLOUT_REGISTRY`; fsdp_workers.py `_build_rollout` calls the class
  with config=, model_config=, device_mesh=; `BaseRollout` is abstract in resume,
  update_weights, release): registered only when switched on, no abstract method left, the
  constructor's parameters, and update_weights copying the actor's tensors by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_run_support as support
from tests.support.require import verl_python

# Starts verl's interpreters and the dynamic provider host.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One CPU run of the bench for every test here."""
    folder = tmp_path_factory.mktemp("gpu-run-cpu")
    out = folder / "report.json"
    command = [
        sys.executable, str(REPO / "bench" / "gpu_run.py"), "--device", "cpu",
        "--out", str(out), "--work", str(folder / "work"),
        "--verl-061", str(verl_python("0.6.1")), "--verl-090", str(verl_python("0.9.0")),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def _answer(report: dict[str, Any], stage: str) -> Any:
    answer = report[stage]
    assert "failed" not in answer, answer.get("failed")
    return answer


def test_both_jobs_pass_the_providers_check_and_compose_in_verl_061(
    report: dict[str, Any],
) -> None:
    for name in ("gsm8k", "own"):
        job = report["plan"][name]
        assert job["check_failures"] == []
        overrides = job["overrides"]
        assert "actor_rollout_ref.rollout.name=vllm" in overrides and support.SDPA in overrides
        assert "trainer.n_gpus_per_node=1" in overrides
    verdicts = _answer(report, "compose")["results"]
    assert sorted(verdicts) == ["gpu-run-gsm8k", "gpu-run-own"]
    assert all(v["ok"] for v in verdicts.values()), verdicts


def test_data_prep_writes_the_local_rows_and_counts_the_over_long_prompts(
    report: dict[str, Any],
) -> None:
    data = _answer(report, "data")
    gsm8k = data["gsm8k"]["markers"]["dataset"]
    assert gsm8k["inputs"]["dataset"] == "openai/gsm8k"
    assert gsm8k["outputs"]["rows"] == {"train.parquet": 64, "test.parquet": 16}
    own = data["own"]["markers"]["dataset"]
    assert own["inputs"]["dataset"] == support.OWN_DATASET
    assert own["outputs"]["rows"] == {"train.parquet": 48, "test.parquet": 12}
    model = data["own"]["markers"]["model-tiny-qwen2"]["outputs"]
    assert model["weight_files"] == 1 and Path(model["path"]).name == "tiny-qwen2"
    # support.own_rows makes every 6th prompt some 60 sentences long; the limit is 256 tokens.
    lengths = data["own"]["prompt_lengths"]
    long_rows = sum("Step 0:" in r["problem"] for r in support.own_rows(48, 6))
    assert lengths["max_prompt_length"] == report["plan"]["own"]["max_prompt_length"] == 256
    train = lengths["train"]
    assert (train["rows"], train["over"], train["kept"]) == (48, long_rows, 48 - long_rows)
    assert data["gsm8k"]["prompt_lengths"]["train"]["over"] == 0


def test_the_stand_in_meets_verl_061s_rollout_contract(report: dict[str, Any]) -> None:
    contract = _answer(report, "standin_on")
    assert contract["class"] == "standin_rollout.HfStandInRollout"
    assert contract["is_base_rollout"] and contract["abstract_left"] == []
    assert contract["init_params"] == contract["base_init_params"]
    assert contract["measured_phases"] == ["_optimizer_step", "compute_log_prob", "update_policy"]
    weights = contract["update_weights"]
    assert weights["all_copied"] and weights["tensors"] > 0
    assert weights["unknown_name"].startswith("KeyError")


def test_without_the_switch_verl_keeps_its_own_rollout(report: dict[str, Any]) -> None:
    assert _answer(report, "standin_off") == {
        "registry": "verl.workers.rollout.vllm_rollout.vLLMRollout"
    }

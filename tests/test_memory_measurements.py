"""The memory estimator against what real FSDP2 training steps allocated on two H200s.

The measurements (tests/data/memory_measurements.json: run, date, device and protocol in the
file; method in docs/memory-and-fabric.md) are peaks of torch.cuda.max_memory_allocated from
bench/memory_fit_gpu.py. Each is re-estimated here with the protocol's inputs, as that script's
`estimate_case` does, and must stay within the accuracy that was measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.memory_fit import ESTIMATE_MARGIN, GrpoMemoryInputs, estimate
from training.model_facts import table_facts

DATA = json.loads((Path(__file__).parent / "data" / "memory_measurements.json").read_text())
TOLERANCE_PCT = float(DATA["tolerance_pct"])


def _estimate(case: dict[str, Any]) -> tuple[float, float]:
    arch = table_facts(case["model"]).arch
    if case["layers"]:
        arch = arch.with_layers(case["layers"])
    response_len = case["seq_len"] // 2
    breakdown = estimate(
        GrpoMemoryInputs(
            model=arch,
            gpu_memory_gib=141.0,
            gpus_per_node=case.get("world_size", DATA["protocol"]["world_size"]),
            nodes=1,
            micro_batch_size_per_gpu=case["micro_batch"],
            max_prompt_length=case["seq_len"] - response_len,
            max_response_length=response_len,
            log_prob_micro_batch_size_per_gpu=case["micro_batch"],
            rollout_tp=1,
            gpu_memory_utilization=0.5,
            gradient_checkpointing=case["gradient_checkpointing"],
            use_reference=False,
            logprob_impl="fp32_log_softmax",
        )
    )
    return (
        breakdown.phase("actor_update").allocated_gib,
        breakdown.phase("optimizer_step").allocated_gib,
    )


def _id(case: dict[str, Any]) -> str:
    layers = f"[{case['layers']}L]" if case["layers"] else ""
    gc = "gc" if case["gradient_checkpointing"] else "nogc"
    shape = f"{case['seq_len']}x{case['micro_batch']}"
    return f"run{case['run']}-{case['model'].split('/')[-1]}{layers}-{gc}-{shape}"


@pytest.mark.parametrize("case", DATA["cases"], ids=_id)
def test_estimate_is_within_the_measured_accuracy(case: dict[str, Any]) -> None:
    fwd_bwd, step = _estimate(case)
    for phase, estimated, measured in (
        ("actor_update (forward+backward)", fwd_bwd, case["measured_fwd_bwd_gib"]),
        ("optimizer_step", step, case["measured_optimizer_step_gib"]),
    ):
        error = 100.0 * (estimated - measured) / measured
        assert abs(error) <= TOLERANCE_PCT, (
            f"{phase}: estimated {estimated:.2f} GiB, measured {measured:.2f} GiB ({error:+.1f} %)"
        )


def test_the_measurements_cover_held_out_cases_and_both_checkpointing_modes() -> None:
    cases = DATA["cases"]
    assert {c["run"] for c in cases} == {"1", "2", "4", "5"}
    assert {c["gradient_checkpointing"] for c in cases} == {True, False}
    assert len(cases) == 30
    # Families beyond Qwen2.5: Llama (tied 128k vocabulary), Gemma 2 (head_dim 256, 4 norms,
    # 256k vocabulary, softcapped logits), and the q/k-norm families Qwen3 and Gemma 3 (run 5).
    assert {c["model"].split("/")[0] for c in cases} == {"Qwen", "meta-llama", "google"}


def test_the_fit_margin_covers_the_measured_error() -> None:
    # The preflight adds ESTIMATE_MARGIN to every estimate before comparing it with the GPU; the
    # measured cases must lie within it, or a phase the plan accepts could run out of memory.
    worst = max(
        abs(100.0 * (estimated - measured) / measured)
        for case in DATA["cases"]
        for estimated, measured in zip(
            _estimate(case),
            (case["measured_fwd_bwd_gib"], case["measured_optimizer_step_gib"]),
            strict=True,
        )
    )
    assert worst <= TOLERANCE_PCT <= 100.0 * ESTIMATE_MARGIN, (worst, TOLERANCE_PCT)

"""Sequence lengths verl and vLLM refuse at rollout build (training/sequence_limits.py).

Rules, from verl's source:
- v0.6.1 vllm_rollout_spmd.py: with enable_chunked_prefill (default True) it raises when
  max_num_batched_tokens (default 8192, verl/trainer/config/rollout/rollout.yaml) is below
  max_model_len, which is prompt_length + response_length unless set;
- v0.6.1 vllm_rollout_spmd.py asserts max_position_embeddings >= prompt_length + response_length
  (no rope_scaling); 0.9.0 vllm_async_server.py caps each response at max_model_len (=
  max_position_embeddings) minus its prompt.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from config.settings import load_settings
from tests.program import REAL
from training.assembly import memory_fit_inputs, training_job
from training.grpo_spec import GrpoPreflightError
from training.model_table import MODEL_TABLE
from training.sequence_limits import BATCHED_TOKENS_KEY, VERL_BATCHED_TOKENS_DEFAULT
from training.verl_keys import KEY_FILE_FOR_REF, config_keys

QWEN3 = "Qwen/Qwen3-8B"  # max_position_embeddings 40960: 1024 + 8192 fits its context
GEMMA2 = "google/gemma-2-9b-it"  # max_position_embeddings 8192


def _settings(stack: str = "a3u", model: str = QWEN3, **job: Any) -> Any:
    config = {**REAL, "verl-gke:model": model, "verl-gke:job": json.dumps(job)}
    return load_settings(stack, config, offline=False).settings


def _args(entrypoint: str) -> dict[str, str]:
    args = shlex.split(entrypoint.split(" -- ", 1)[1])
    return dict(a.split("=", 1) for a in args if "=" in a)


def _problems(settings: Any) -> tuple[str, ...]:
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(settings)
    return caught.value.problems


@pytest.mark.parametrize("stack", ["a3u", "a4x"])
def test_a_long_response_gets_batched_tokens_verl_accepts(stack: str) -> None:
    settings = _settings(stack, maxPromptLength=1024, maxResponseLength=8192)
    job = training_job(settings)
    args = _args(job.entrypoint)
    # verl 0.6.1 needs max_num_batched_tokens >= max_model_len = prompt + response.
    assert int(args[BATCHED_TOKENS_KEY]) >= 1024 + 8192
    assert job.memory.inputs.rollout_max_num_batched_tokens == int(args[BATCHED_TOKENS_KEY])
    # The key is in verl's config at the stack's ref.
    assert BATCHED_TOKENS_KEY in config_keys(KEY_FILE_FOR_REF[settings.profile.verl_ref])


def test_the_memory_fit_counts_vllms_larger_profiling_batch() -> None:
    short = training_job(_settings(maxPromptLength=1024, maxResponseLength=7168))
    long = training_job(_settings(maxPromptLength=1024, maxResponseLength=8192))
    assert BATCHED_TOKENS_KEY not in _args(short.entrypoint)  # verl's 8192 serves 8192
    assert short.memory.inputs.rollout_max_num_batched_tokens == VERL_BATCHED_TOKENS_DEFAULT
    spec, profile = long.spec, _settings().profile
    inputs = memory_fit_inputs(spec, profile, long.model.arch)
    assert inputs.rollout_max_num_batched_tokens == 9216


def test_a_batched_token_override_below_the_sequence_is_refused() -> None:
    extra = [f"{BATCHED_TOKENS_KEY}=8192"]
    problems = _problems(
        _settings(maxPromptLength=1024, maxResponseLength=8192, extraOverrides=extra)
    )
    (problem,) = [p for p in problems if BATCHED_TOKENS_KEY in p]
    assert "below verl-gke:job.maxPromptLength + verl-gke:job.maxResponseLength = 9216" in problem
    assert "set it to at least 9216" in problem
    # With chunked prefill off vLLM refuses the same values itself: max_num_batched_tokens below
    # max_model_len raises in SchedulerConfig._verify_args (vllm/config/scheduler.py).
    off = [*extra, "actor_rollout_ref.rollout.enable_chunked_prefill=False"]
    problems = _problems(
        _settings(maxPromptLength=1024, maxResponseLength=8192, extraOverrides=off)
    )
    (problem,) = [p for p in problems if BATCHED_TOKENS_KEY in p]
    assert "with chunked prefill off, vLLM's scheduler config raises" in problem
    # An override at least the sum is the user's: the job adds none of its own.
    given = [f"{BATCHED_TOKENS_KEY}=12288", off[1]]
    job = training_job(
        _settings(maxPromptLength=1024, maxResponseLength=8192, extraOverrides=given)
    )
    assert _args(job.entrypoint)[BATCHED_TOKENS_KEY] == "12288"


def test_more_than_the_models_context_is_refused_with_a_fix_the_rule_accepts() -> None:
    assert MODEL_TABLE[GEMMA2].config["max_position_embeddings"] == 8192
    problems = _problems(_settings(model=GEMMA2, maxResponseLength=8192))
    (problem,) = problems
    assert "512 + 8192 = 8704 tokens" in problem and "max_position_embeddings = 8192" in problem
    command = r"Fix: pulumi config set --path verl-gke:job\.maxResponseLength (\d+)$"
    fix = re.search(command, problem)
    assert fix, problem
    # The longest length the context holds (8192 - 512) unless another rule (the memory fit)
    # refuses it; the one offered passes every rule.
    length = int(fix[1])
    assert length <= 7680
    assert _problems_or_none(_settings(model=GEMMA2, maxResponseLength=length)) == ()
    if length < 7680:
        assert _problems_or_none(_settings(model=GEMMA2, maxResponseLength=7680))


def _problems_or_none(settings: Any) -> tuple[str, ...]:
    try:
        training_job(settings)
    except GrpoPreflightError as error:
        return error.problems
    return ()


def test_the_context_comes_from_the_models_own_config_json(tmp_path: Path) -> None:
    config = {**MODEL_TABLE[QWEN3].config, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    settings = load_settings(
        "a3u",
        {
            **REAL,
            "verl-gke:model": "my-org/short-context",
            "verl-gke:modelConfig": str(path),
            "verl-gke:job": json.dumps({"maxResponseLength": 4096}),
        },
        offline=False,
    ).settings
    (problem,) = _problems(settings)
    assert "my-org/short-context's context, max_position_embeddings = 4096" in problem
    assert "pulumi config set --path verl-gke:job.maxResponseLength 3584" in problem

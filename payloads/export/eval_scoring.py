"""One model's part of the evaluation (payloads/export/evaluate.py --generate, a child process):
the held-out rows verl's RLHFDataset keeps, the prompts as it renders them, the answers of a
generation backend (eval_backends.py), each scored by the reward verl would load. verl, hydra,
omegaconf and transformers are imported inside the functions that use them."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # imported as payloads.export.eval_scoring (the program, tests)
    from . import eval_backends, eval_report
except ImportError:  # run as a script: this folder is sys.path[0]
    import eval_backends
    import eval_report


# verl's data config (verl/trainer/config/data/legacy_data.yaml, v0.6.1): prompt_key,
# reward_fn_key.
PROMPT_KEY = "prompt"
REWARD_FN_KEY = "data_source"


def verl_data_config(settings: eval_report.EvalSettings) -> Any:
    """verl's `data` config as the job's main_ppo composes it (Hydra, verl's ppo_trainer,
    as main_ppo's @hydra.main) for what decides the held-out prompts: data.max_prompt_length
    and the job's data.apply_chat_template_kwargs overrides. filter_overlong_prompts is off
    here: held_out_rows runs verl's filter itself, keeping each row's index."""
    import importlib.util

    from hydra import compose, initialize_config_dir

    spec = importlib.util.find_spec("verl.trainer.main_ppo")
    if spec is None or spec.origin is None:
        raise eval_report.EvaluationError(
            "verl.trainer.main_ppo is not importable in this interpreter"
        )
    overrides = [
        f"data.max_prompt_length={settings.max_prompt_length}",
        "data.filter_overlong_prompts=False",
        *settings.chat_template_overrides,
    ]
    config_dir = str(Path(spec.origin).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides).data


@dataclass(frozen=True)
class HeldOut:
    """The rows verl's validation dataset keeps, in file order, and what it dropped."""

    rows: list[dict[str, Any]]
    indices: list[int]  # each kept row's index in the file
    total: int  # rows in the file
    dropped: int  # rows over max_prompt_length, among the first `indices[-1] + 1`
    chat_template_kwargs: dict[str, Any]


INDEX_COLUMN = "__verl_gke_row_index"


def held_out_rows(settings: eval_report.EvalSettings, tokenizer: Any, data_config: Any) -> HeldOut:
    """The first settings.prompts rows that verl's RLHFDataset keeps for validation: it drops
    every prompt longer than data.max_prompt_length, rendered with the chat template and
    data.apply_chat_template_kwargs (rl_dataset.py maybe_filter_out_long_prompts, run by every
    job: training/grpo_spec.py FIXED_OVERRIDES data.filter_overlong_prompts=True)."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    dataset = RLHFDataset(data_files=settings.data, tokenizer=tokenizer, config=data_config)
    frame = dataset.dataframe
    indexed = frame.add_column(INDEX_COLUMN, list(range(len(frame))))
    dataset.filter_overlong_prompts = True  # the job's data.filter_overlong_prompts=True
    kept = list(dataset.maybe_filter_out_long_prompts(indexed)[INDEX_COLUMN])
    chosen = kept[: settings.prompts] if settings.prompts is not None else kept
    scanned = chosen[-1] + 1 if chosen else len(frame)
    kwargs = OmegaConf.to_container(
        data_config.get("apply_chat_template_kwargs") or OmegaConf.create({}), resolve=True
    )
    return HeldOut(
        rows=frame.select(chosen).to_list(),
        indices=chosen,
        total=len(frame),
        dropped=scanned - len(chosen),
        chat_template_kwargs=dict(kwargs or {}),
    )


def render_prompts(
    tokenizer: Any, rows: list[dict[str, Any]], chat_template_kwargs: dict[str, Any] | None = None
) -> list[list[int]]:
    """verl's RLHFDataset.__getitem__ (rl_dataset.py, v0.6.1), text-only rows: the chat
    template with data.apply_chat_template_kwargs (e.g. Qwen3's enable_thinking), passed as
    **kwargs as __getitem__ and 0.9.0's agent loop (agent_loop.py) pass them."""
    kwargs = chat_template_kwargs or {}
    ids = []
    for row in rows:
        raw = tokenizer.apply_chat_template(
            list(row[PROMPT_KEY]), add_generation_prompt=True, tokenize=False, **kwargs
        )
        ids.append(tokenizer(raw, add_special_tokens=False)["input_ids"])
    return ids


def load_reward(
    reward_file: str | None, reward_name: str, reward_kwargs: dict[str, Any]
) -> Callable[..., Any]:
    """The compute_score verl's load_reward_manager would use (verl/trainer/ppo/reward.py)."""
    if reward_file:
        from omegaconf import OmegaConf
        from verl.trainer.ppo.reward import get_custom_reward_fn

        section = {"path": reward_file, "name": reward_name, "reward_kwargs": reward_kwargs}
        # v0.6.1 reads config.custom_reward_function, v0.9.0 config.reward.custom_reward_function
        # (get_custom_reward_fn in each release's verl/trainer/ppo/reward.py).
        config = OmegaConf.create(
            {"custom_reward_function": section, "reward": {"custom_reward_function": section}}
        )
        function = get_custom_reward_fn(config)
        if function is None:
            raise eval_report.EvaluationError(f"verl loaded no reward function from {reward_file}")
        return function
    from verl.utils.reward_score import default_compute_score

    return default_compute_score


def score(compute_score: Callable[..., Any], row: dict[str, Any], text: str) -> float:
    """As NaiveRewardManager.__call__ (verl/workers/reward_manager/naive.py, v0.6.1) calls it."""
    extra_info = dict(row.get("extra_info") or {})
    extra_info["num_turns"] = None
    extra_info["rollout_reward_scores"] = {}
    value = compute_score(
        data_source=row[REWARD_FN_KEY],
        solution_str=text,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info=extra_info,
    )
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    if isinstance(value, dict):
        value = value["score"]
    return float(value)


async def _awaited(value: Any) -> Any:
    return await value


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except TypeError:
        return str(value)
    return value


def generate_and_score(
    models: dict[str, str],
    settings: eval_report.EvalSettings,
    tensor_parallel: int,
    parts_dir: Path,
) -> None:
    """Each model (role -> folder) answers the rows; one scored part per role in parts_dir."""
    import gc

    compute_score = load_reward(settings.reward_file, settings.reward_name, settings.reward_kwargs)
    data_config = verl_data_config(settings)
    from transformers import AutoTokenizer

    backend = os.environ.get(eval_backends.BACKEND_ENV, eval_backends.DEFAULT_BACKEND)
    for role, model_dir in models.items():
        started = time.monotonic()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        held_out = held_out_rows(settings, tokenizer, data_config)
        rows = held_out.rows
        if not rows:
            raise eval_report.EvaluationError(
                f"{settings.data}: none of its {held_out.total} rows has a prompt of at most "
                f"max_prompt_length {settings.max_prompt_length} tokens (verl drops longer ones)"
            )
        request = eval_backends.GenerationRequest(
            prompt_ids=render_prompts(tokenizer, rows, held_out.chat_template_kwargs),
            samples=settings.samples,
            temperature=settings.temperature,
            max_new_tokens=settings.max_new_tokens,
            seed=settings.seed,
            tensor_parallel=tensor_parallel,
            top_p=settings.top_p,
            top_k=settings.top_k,
        )
        print(f"evaluate: {role}: {len(rows)} prompts, {backend} on {model_dir}", flush=True)
        generator = eval_backends.backend_factory(backend)(model_dir, tokenizer, request)
        answers = generator.generate(request)
        del generator
        gc.collect()
        _release_gpu_cache()
        if len(answers) != len(rows):
            raise eval_report.EvaluationError(
                f"{backend} answered {len(answers)} of {len(rows)} prompts"
            )
        prompts = scored_prompts(compute_score, held_out.indices, rows, answers)
        part = {
            "role": role,
            "model": model_dir,
            "backend": backend,
            "held_out": {
                "rows": held_out.total,
                "dropped_over_max_prompt_length": held_out.dropped,
                "max_prompt_length": settings.max_prompt_length,
                "chat_template_kwargs": held_out.chat_template_kwargs,
            },
            "seconds": round(time.monotonic() - started, 1),
            "prompts": prompts,
        }
        eval_report.write_json(parts_dir / f"{role}.json", part)


def scored_prompts(
    compute_score: Callable[..., Any], indices: Sequence[int], rows: Sequence[Any], answers: Any
) -> list[dict[str, Any]]:
    """Each held-out row's greedy and sampled answers scored by the run's reward."""
    return [
        {
            "index": index,
            "data_source": row[REWARD_FN_KEY],
            "ground_truth": _jsonable(row["reward_model"]["ground_truth"]),
            "greedy_score": score(compute_score, row, answer.greedy),
            "sample_scores": [score(compute_score, row, text) for text in answer.samples],
            "greedy_answer": answer.greedy,
        }
        for index, row, answer in zip(indices, rows, answers, strict=True)
    ]


def _release_gpu_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()

"""Score the exported model against its base model on a held-out set, with the run's own reward.

    python evaluate.py --base /data/Qwen2.5-0.5B-Instruct --trained /data/models/<experiment> \
        --data /data/gsm8k/test.parquet [--reward-file /data/rewards/<sha>/reward.py \
        --reward-name compute_score] [--prompts 200] [--samples 4] [--temperature 1.0] \
        --max-new-tokens 1024 --max-prompt-length 512 [--top-p 1] [--top-k -1] \
        [--chat-template-overrides '["+data.apply_chat_template_kwargs.enable_thinking=False"]'] \
        [--tensor-parallel 1] [--seed 0] [--out /data/models/<experiment>/.verl-gke-eval.json] \
        [--on-node GPU]

    # one GPU without vLLM (transformers generates), e.g. a small model and an own dataset:
    VERL_GKE_EVAL_BACKEND=hf python payloads/export/evaluate.py --base base/ --trained export/ \
        --data test.parquet --reward-file reward.py --reward-name compute_score --prompts 200 \
        --samples 4 --max-new-tokens 256 --max-prompt-length 512 --out report.json

Exit status 0 with a report, 1 when the evaluation failed (the report and the last line say
why), 2 for bad arguments. The GRPO job's runner (run_grpo.py) runs it after the export with
--trained <export folder> --on-node GPU and the flags training/model_evaluation.py renders.

Both models answer the first --prompts rows (all when left out) of --data, a parquet in verl's
format (`prompt`: chat messages, `data_source`, `reward_model.ground_truth`, `extra_info`), that
verl's validation dataset keeps: verl's own RLHFDataset (verl/utils/dataset/rl_dataset.py) with
the `data` config composed from verl's ppo_trainer and data.max_prompt_length =
--max-prompt-length and the job's data.apply_chat_template_kwargs overrides
(--chat-template-overrides), its maybe_filter_out_long_prompts dropping every prompt longer than
max_prompt_length as every job does (data.filter_overlong_prompts=True). The report keeps each
row's index in the file and says how many rows were dropped. Each prompt is rendered as
RLHFDataset renders it (__getitem__, v0.6.1: tokenizer.apply_chat_template(messages,
add_generation_prompt=True, tokenize=False, **apply_chat_template_kwargs), then tokenized with
add_special_tokens=False), and answered once greedily and --samples times at --temperature,
--top-p and --top-k (the rollout's; -1: off), at most --max-new-tokens tokens each (the job's
data.max_response_length). Each answer's token ids, decoded with skip_special_tokens=True as
verl's reward manager decodes them, are scored as verl's NaiveRewardManager scores
it (verl/workers/reward_manager/naive.py: compute_score(data_source=, solution_str=,
ground_truth=, extra_info=); a dict's "score"), by the function verl would load: with
--reward-file, verl.trainer.ppo.reward.get_custom_reward_fn (custom_reward_function.path/name,
--reward-kwargs as its reward_kwargs); without, verl.utils.reward_score.default_compute_score,
which picks the scorer by data_source.

Metrics, per model: greedy pass@1 (the mean over prompts of the greedy answer's score) and
mean@k (the mean over prompts of the mean score of the k sampled answers), and trained - base
for both. Interval: 95 % Student's t interval over prompts, mean +- t(0.975, n - 1) * s / sqrt(n),
with s the sample standard deviation (n - 1) of the per-prompt values (t's quantile from the
series of Abramowitz & Stegun 26.7.3-4, by bisection); for the difference, of the paired
per-prompt differences trained_i - base_i (which removes the prompts' own difficulty from the
spread). The evaluation is flagged `regressed` when the primary metric's difference interval
lies wholly below 0 (mean@k; greedy pass@1 when --samples is 0).

The report (--out; default <trained>/.verl-gke-eval.json) holds the summary and every prompt's
scores and greedy answers. A report whose export marker (<trained>/.verl-gke-export.json, written
by export_model.py) and settings match is reused, not recomputed; a failed evaluation writes a
report with status "failed" and its reason, and exits 1; the exported model is never touched (a
LoRA export, whose weights are the base model's, is refused). The last line printed is the
summary (the report without its per-prompt rows) as one JSON object with "check":
"verl-gke-eval"; children write their results to <out>.parts/ and it is removed after.

Where generation runs: with --on-node RESOURCE (the GRPO job's runner passes GPU) the evaluation
runs as a Ray task asking for --tensor-parallel units of RESOURCE (like export_model.py's merge:
resource demand brings a scaled-down worker back); without it, here. Generation runs in child
processes (this file with --generate ROLE=FOLDER): with vLLM one per model, so the first
engine's GPU memory is returned before the second loads; the parent is standard library only.

Generation backend (VERL_GKE_EVAL_BACKEND): "vllm" (default; vllm.LLM with tensor parallel
--tensor-parallel, SamplingParams(n=k)), "hf" (transformers generate: where vLLM is not
installed; VERL_GKE_EVAL_HF_BATCH prompts per batch, default 16, each with its k samples), or
"<module>:<factory>" (a factory with the same signature as the two built in: tests use a
scripted one). --seed seeds the sampling (vLLM's per-request seed; torch's for hf). Stdlib at
module level: vllm, transformers, torch, hydra, datasets and verl are imported only in the child
that generates.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import importlib
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

REPORT_NAME = ".verl-gke-eval.json"
# export_model.MARKER (tests/test_evaluate.py checks they agree).
EXPORT_MARKER = ".verl-gke-export.json"
RESULT_TAG = "verl-gke-eval"
# export_model.LORA_DIR: where a LoRA export keeps the trained adapter.
LORA_DIR = "lora_adapter"
BACKEND_ENV = "VERL_GKE_EVAL_BACKEND"
# Tests only: the python a Ray worker runs the evaluation with (default: the worker's own).
WORKER_PYTHON_ENV = "VERL_GKE_EVAL_WORKER_PYTHON"
DEFAULT_BACKEND = "vllm"
ROLES = ("base", "trained")
# 95 % two-sided interval: the 0.975 quantile of Student's t with n - 1 degrees of freedom.
CONFIDENCE = 0.95
# verl's data config (verl/trainer/config/data/legacy_data.yaml, v0.6.1): prompt_key,
# reward_fn_key.
PROMPT_KEY = "prompt"
REWARD_FN_KEY = "data_source"
TAIL_LINES = 40
WAIT_REPORT_S = float(os.environ.get("VERL_GKE_EVAL_WAIT_REPORT_S", "60"))
HF_BATCH = int(os.environ.get("VERL_GKE_EVAL_HF_BATCH", "16"))


class EvaluationError(RuntimeError):
    """The evaluation cannot run or failed; the message says what and where."""


# --- settings and the report ---------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSettings:
    """What decides the result: a report with other settings is not reused."""

    data: str
    prompts: int | None
    samples: int
    temperature: float
    max_new_tokens: int
    max_prompt_length: int
    reward_file: str | None
    reward_name: str
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    top_p: float = 1.0
    top_k: int = -1
    # The job's Hydra overrides of data.apply_chat_template_kwargs (from extraOverrides).
    chat_template_overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float | None
    high: float | None
    n: int


def student_t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` degrees of freedom (t >= 0): the finite series of
    Abramowitz & Stegun, Handbook of Mathematical Functions, 26.7.3 (df odd) and 26.7.4 (df
    even), with theta = arctan(t / sqrt(df))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        # 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... up to cos^(df-3)))
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= 2 * k / (2 * k + 1) * c2
        series = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + series)
    # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    total, term = 0.0, 1.0
    for k in range(1, df // 2 + 1):
        total += term
        term *= (2 * k - 1) / (2 * k) * c2
    return math.sin(theta) * total


@functools.cache
def student_t_quantile(p: float, df: int) -> float:
    """The p quantile (p > 0.5) of Student's t with `df` degrees of freedom: bisection on
    student_t_central, to double precision."""
    if df < 1 or not 0.5 < p < 1:
        raise ValueError(f"student_t_quantile({p}, {df}): needs df >= 1 and 0.5 < p < 1")
    central = 2 * p - 1
    low, high = 0.0, 1.0
    while student_t_central(high, df) < central:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if student_t_central(middle, df) < central:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def t_interval(values: Sequence[float]) -> Interval:
    """mean +- t(0.975, n - 1) * s / sqrt(n), s the sample standard deviation; no bounds for
    n < 2."""
    n = len(values)
    if n == 0:
        raise EvaluationError("no prompts were scored")
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, None, None, n)
    quantile = student_t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1)
    half = quantile * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def _rounded(interval: Interval) -> dict[str, Any]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return {"mean": r(interval.mean), "low": r(interval.low), "high": r(interval.high)}


def summarize(parts: dict[str, dict[str, Any]], samples: int) -> dict[str, Any]:
    """Per-model metrics and the paired difference from the two models' per-prompt scores."""
    base, trained = parts["base"]["prompts"], parts["trained"]["prompts"]
    if len(base) != len(trained):
        raise EvaluationError(f"base answered {len(base)} prompts, trained {len(trained)}")
    metrics = ["greedy"] + (["mean_at_k"] if samples > 0 else [])

    def value(row: dict[str, Any], metric: str) -> float:
        if metric == "greedy":
            return float(row["greedy_score"])
        return statistics.fmean(row["sample_scores"])

    out: dict[str, Any] = {"prompts": len(base), "primary": metrics[-1]}
    for role, rows in (("base", base), ("trained", trained)):
        out[role] = {m: _rounded(t_interval([value(r, m) for r in rows])) for m in metrics}
    out["difference"] = {
        m: _rounded(
            t_interval([value(t, m) - value(b, m) for b, t in zip(base, trained, strict=True)])
        )
        for m in metrics
    }
    high = out["difference"][out["primary"]]["high"]
    out["regressed"] = high is not None and high < 0
    return out


INTERVAL_TEXT = (
    "95 % Student's t interval over prompts: mean +- t(0.975, n - 1) s / sqrt(n) of the "
    "per-prompt scores "
    "(greedy: the greedy answer's score; mean_at_k: the mean of the k samples' scores); for the "
    "difference, of the paired per-prompt differences trained - base"
)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def marker_key(marker: dict[str, Any] | None) -> dict[str, Any] | None:
    """What names one export: the step and checkpoint it was merged from, and when."""
    if marker is None:
        return None
    return {k: marker.get(k) for k in ("step", "source", "finished_at")}


def reusable(
    out: Path, marker: dict[str, Any] | None, settings: EvalSettings, base: str, trained: str
) -> dict[str, Any] | None:
    """The report at `out` when it was computed for this export, these models and settings."""
    report = read_json(out)
    if report is None or report.get("status") != "ok" or marker is None:
        return None
    same = (
        report.get("export") == marker_key(marker)
        and report.get("settings") == asdict(settings)
        and report.get("models") == {"base": base, "trained": trained}
    )
    return report if same else None


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its per-prompt rows: the printed result line."""
    return {"check": RESULT_TAG, **{k: v for k, v in report.items() if k != "per_prompt"}}


def write_json(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    temporary.replace(path)


# --- generation backends -------------------------------------------------------------------------


@dataclass(frozen=True)
class Answers:
    """One prompt's answers: the greedy one and the k sampled ones (decoded text)."""

    greedy: str
    samples: list[str]


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: list[list[int]]
    samples: int
    temperature: float
    max_new_tokens: int
    seed: int
    tensor_parallel: int
    # verl's rollout.top_p / top_k (rollout.yaml, v0.6.1 and 0.9.0: 1 and -1, both off).
    top_p: float = 1.0
    top_k: int = -1


class Generator(Protocol):
    def generate(self, request: GenerationRequest) -> list[Answers]: ...


# A backend: (model folder, tokenizer, request) -> a Generator for that model.
BackendFactory = Callable[[str, Any, GenerationRequest], Generator]


class VllmGenerator:
    """vllm.LLM over the model folder; prompts as token ids (TokensPrompt), as verl's vLLM
    rollout passes them (no second BOS from vLLM's own tokenization)."""

    def __init__(self, model_dir: str, tokenizer: Any, request: GenerationRequest) -> None:
        from vllm import LLM

        self.tokenizer = tokenizer
        longest = max(len(ids) for ids in request.prompt_ids)
        self.llm = LLM(
            model=model_dir,
            tensor_parallel_size=request.tensor_parallel,
            max_model_len=longest + request.max_new_tokens,
            seed=request.seed,
            dtype="bfloat16",
        )

    def generate(self, request: GenerationRequest) -> list[Answers]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in request.prompt_ids]
        greedy = self.llm.generate(
            prompts,
            SamplingParams(n=1, temperature=0.0, max_tokens=request.max_new_tokens),
            use_tqdm=False,
        )
        sampled: list[Any] = [None] * len(prompts)
        if request.samples > 0:
            # The rollout's top_p and top_k as verl's vLLM rollout passes them to SamplingParams
            # (verl's -1 top_k is vLLM's "off" too).
            params = SamplingParams(
                n=request.samples,
                temperature=request.temperature,
                top_p=request.top_p,
                top_k=request.top_k,
                max_tokens=request.max_new_tokens,
                seed=request.seed,
            )
            sampled = self.llm.generate(prompts, params, use_tqdm=False)
        return [
            Answers(
                self._text(g.outputs[0]),
                [self._text(o) for o in s.outputs] if s is not None else [],
            )
            for g, s in zip(greedy, sampled, strict=True)
        ]

    def _text(self, output: Any) -> str:
        """The answer's token ids decoded as verl's reward manager decodes the response
        (verl/workers/reward_manager/naive.py __call__: tokenizer.decode(valid_response_ids,
        skip_special_tokens=True)), not vLLM's own detokenized text."""
        return self.tokenizer.decode(list(output.token_ids), skip_special_tokens=True)


class HfGenerator:
    """transformers generate, batched with left padding; answers cut at the first EOS."""

    def __init__(self, model_dir: str, tokenizer: Any, request: GenerationRequest) -> None:
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.torch = torch
        self.GenerationConfig = GenerationConfig
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, attn_implementation="sdpa"
        ).to(self.device)
        self.model.eval()
        self.tokenizer = tokenizer
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos)
        takes = inspect.signature(self.model.generate).parameters
        self.own_config_only = (
            {"use_model_defaults": False} if "use_model_defaults" in takes else {}
        )

    def _batch(self, ids: list[list[int]], n: int, sample: bool, request: GenerationRequest):
        torch = self.torch
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([[self.pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        # A config of its own: the model's generation_config.json (an instruct model's do_sample,
        # temperature, top_k, top_p, repetition_penalty) must not change the answers; sampled
        # with the rollout's top_p and top_k (verl's top_k -1, off, is transformers' 0), greedy
        # for the greedy answer. transformers 4.50-4.x replace every field left at
        # GenerationConfig()'s default by the model's unless use_model_defaults=False
        # (generation/utils.py _prepare_generation_config, 4.57.1); 5.x keeps explicit values
        # and has no such flag.
        config = self.GenerationConfig(
            max_new_tokens=request.max_new_tokens,
            num_return_sequences=n,
            do_sample=sample,
            temperature=request.temperature if sample else 1.0,
            top_p=request.top_p if sample else 1.0,
            top_k=max(request.top_k, 0) if sample else 0,
            num_beams=1,
            repetition_penalty=1.0,
            pad_token_id=self.pad,
            eos_token_id=sorted(self.eos),
        )
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=config,
                **self.own_config_only,
            )
        texts = []
        for row in out[:, width:].tolist():
            end = next((i for i, t in enumerate(row) if t in self.eos), len(row))
            texts.append(self.tokenizer.decode(row[:end], skip_special_tokens=True))
        return [texts[i * n : (i + 1) * n] for i in range(len(ids))]

    def generate(self, request: GenerationRequest) -> list[Answers]:
        self.torch.manual_seed(request.seed)
        answers: list[Answers] = []
        ids = request.prompt_ids
        for start in range(0, len(ids), HF_BATCH):
            chunk = ids[start : start + HF_BATCH]
            greedy = self._batch(chunk, 1, False, request)
            sampled = (
                self._batch(chunk, request.samples, True, request)
                if request.samples > 0
                else [[] for _ in chunk]
            )
            answers += [Answers(g[0], s) for g, s in zip(greedy, sampled, strict=True)]
            print(f"evaluate: hf: {start + len(chunk)}/{len(ids)} prompts", flush=True)
        return answers


BACKENDS: dict[str, BackendFactory] = {"vllm": VllmGenerator, "hf": HfGenerator}


def backend_factory(name: str) -> BackendFactory:
    """A built-in backend by name, or "<module>:<attribute>" (imported)."""
    if name in BACKENDS:
        return BACKENDS[name]
    module, _, attribute = name.partition(":")
    if not attribute:
        raise EvaluationError(
            f"{BACKEND_ENV}={name!r}: not one of {sorted(BACKENDS)} and not <module>:<factory>"
        )
    return getattr(importlib.import_module(module), attribute)


# --- one model: rows, prompts, reward (a child process; imports verl and the backend) -----------


def verl_data_config(settings: EvalSettings) -> Any:
    """verl's `data` config as the job's main_ppo composes it (Hydra, verl's ppo_trainer,
    as main_ppo's @hydra.main) for what decides the held-out prompts: data.max_prompt_length
    and the job's data.apply_chat_template_kwargs overrides. filter_overlong_prompts is off
    here: held_out_rows runs verl's filter itself, keeping each row's index."""
    import importlib.util

    from hydra import compose, initialize_config_dir

    spec = importlib.util.find_spec("verl.trainer.main_ppo")
    if spec is None or spec.origin is None:
        raise EvaluationError("verl.trainer.main_ppo is not importable in this interpreter")
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


def held_out_rows(settings: EvalSettings, tokenizer: Any, data_config: Any) -> HeldOut:
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
            raise EvaluationError(f"verl loaded no reward function from {reward_file}")
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
    models: dict[str, str], settings: EvalSettings, tensor_parallel: int, parts_dir: Path
) -> None:
    """Each model (role -> folder) answers the rows; one scored part per role in parts_dir."""
    import gc

    compute_score = load_reward(settings.reward_file, settings.reward_name, settings.reward_kwargs)
    data_config = verl_data_config(settings)
    from transformers import AutoTokenizer

    backend = os.environ.get(BACKEND_ENV, DEFAULT_BACKEND)
    for role, model_dir in models.items():
        started = time.monotonic()
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        held_out = held_out_rows(settings, tokenizer, data_config)
        rows = held_out.rows
        if not rows:
            raise EvaluationError(
                f"{settings.data}: none of its {held_out.total} rows has a prompt of at most "
                f"max_prompt_length {settings.max_prompt_length} tokens (verl drops longer ones)"
            )
        request = GenerationRequest(
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
        generator = backend_factory(backend)(model_dir, tokenizer, request)
        answers = generator.generate(request)
        del generator
        gc.collect()
        _release_gpu_cache()
        if len(answers) != len(rows):
            raise EvaluationError(f"{backend} answered {len(answers)} of {len(rows)} prompts")
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
        write_json(parts_dir / f"{role}.json", part)


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


# --- the evaluation (standard library only) -------------------------------------------------------


def child_groups(backend: str) -> list[tuple[str, ...]]:
    """The roles each child process generates: vLLM one model per process (the process's exit
    returns all of the engine's GPU memory before the next model loads), others both in one."""
    return [(role,) for role in ROLES] if backend == "vllm" else [ROLES]


def child_argv(args: argparse.Namespace, roles: tuple[str, ...], parts_dir: Path) -> list[str]:
    models = [f"{role}={args.base if role == 'base' else args.trained}" for role in roles]
    argv = [sys.executable, str(Path(__file__).resolve()), "--parts-dir", str(parts_dir)]
    for model in models:
        argv += ["--generate", model]
    return [*argv, *settings_argv(args)]


def settings_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "--data", args.data, "--samples", str(args.samples),
        "--temperature", str(args.temperature), "--max-new-tokens", str(args.max_new_tokens),
        "--max-prompt-length", str(args.max_prompt_length),
        "--top-p", str(args.top_p), "--top-k", str(args.top_k),
        "--chat-template-overrides", json.dumps(args.chat_template_overrides),
        "--reward-name", args.reward_name, "--reward-kwargs", json.dumps(args.reward_kwargs),
        "--seed", str(args.seed), "--tensor-parallel", str(args.tensor_parallel),
    ]  # fmt: skip
    if args.prompts is not None:
        argv += ["--prompts", str(args.prompts)]
    if args.reward_file:
        argv += ["--reward-file", args.reward_file]
    return argv


def settings_of(args: argparse.Namespace) -> EvalSettings:
    return EvalSettings(
        data=args.data,
        prompts=args.prompts,
        samples=args.samples,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        max_prompt_length=args.max_prompt_length,
        reward_file=args.reward_file,
        reward_name=args.reward_name,
        reward_kwargs=args.reward_kwargs,
        seed=args.seed,
        top_p=args.top_p,
        top_k=args.top_k,
        chat_template_overrides=list(args.chat_template_overrides),
    )


def run_streaming(argv: list[str]) -> tuple[int, list[str], dict[str, Any] | None]:
    """Run `argv`, printing its output (stdout and stderr) as it comes: (exit status, its last
    TAIL_LINES lines, its summary line if it printed one)."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    summary = None
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
            summary = find_summary(line) or summary
    return proc.returncode, list(tail), summary


def run_child(roles: tuple[str, ...], argv: list[str]) -> None:
    returncode, tail, _ = run_streaming(argv)
    if returncode != 0:
        lines = "\n".join(tail)
        raise EvaluationError(
            f"the generation of {' and '.join(roles)} exited {returncode}; its last lines:\n{lines}"
        )


def evaluate_here(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Both models, one child process each, then the report at `out`."""
    started = time.monotonic()
    settings = settings_of(args)
    parts_dir = out.with_name(f"{out.name}.parts")
    for role in ROLES:
        (parts_dir / f"{role}.json").unlink(missing_ok=True)
    for roles in child_groups(os.environ.get(BACKEND_ENV, DEFAULT_BACKEND)):
        run_child(roles, child_argv(args, roles, parts_dir))
    parts: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        loaded = read_json(parts_dir / f"{role}.json")
        if loaded is None:
            raise EvaluationError(f"the {role} model's generation wrote no results to {parts_dir}")
        parts[role] = loaded
    indices = {role: [row["index"] for row in parts[role]["prompts"]] for role in ROLES}
    if indices["base"] != indices["trained"]:
        raise EvaluationError(
            "the two models' tokenizers kept different rows under max_prompt_length "
            f"{args.max_prompt_length} (base: {len(indices['base'])}, trained: "
            f"{len(indices['trained'])}); the trained model's tokenizer is not its base model's"
        )
    summary = summarize(parts, args.samples)
    per_prompt = [
        {
            "index": b["index"],
            "data_source": b["data_source"],
            "ground_truth": b["ground_truth"],
            **{
                role: {k: row[k] for k in ("greedy_score", "sample_scores", "greedy_answer")}
                for role, row in (("base", b), ("trained", t))
            },
        }
        for b, t in zip(parts["base"]["prompts"], parts["trained"]["prompts"], strict=True)
    ]
    report = {
        "status": "ok",
        "export": marker_key(read_json(Path(args.trained) / EXPORT_MARKER)),
        "models": {"base": args.base, "trained": args.trained},
        "settings": asdict(settings),
        "backend": parts["trained"]["backend"],
        "interval": INTERVAL_TEXT,
        "held_out": parts["base"]["held_out"],
        **summary,
        "seconds": {
            "base": parts["base"]["seconds"],
            "trained": parts["trained"]["seconds"],
            "total": round(time.monotonic() - started, 1),
        },
        "report": str(out),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "per_prompt": per_prompt,
    }
    write_json(out, report)
    for role in ROLES:
        (parts_dir / f"{role}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        parts_dir.rmdir()
    return report


def task_options(resource: str, count: int) -> dict[str, Any]:
    """One CPU and `count` units of `resource` (export_model.task_options with a count)."""
    if resource == "CPU":
        return {"num_cpus": count}
    if resource == "GPU":
        return {"num_cpus": 1, "num_gpus": count}
    return {"num_cpus": 1, "resources": {resource: count}}


def _run_on_worker(script: str, argv: list[str]) -> dict[str, Any]:
    """The Ray task: this file's CLI, run here (the job's working_dir is the task's cwd)."""
    here = Path("evaluate.py")
    path = str(here.resolve()) if here.is_file() else script
    python = os.environ.get(WORKER_PYTHON_ENV) or sys.executable
    returncode, tail, summary = run_streaming([python, path, *argv])
    return {
        "returncode": returncode,
        "tail": tail,
        "node": os.uname().nodename,
        "summary": summary,
    }


def find_summary(output: str) -> dict[str, Any] | None:
    """The last printed line that is this CLI's summary (see main)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and value.get("check") == RESULT_TAG:
                return value
    return None


def evaluate_on_node(argv: list[str], resource: str, count: int) -> dict[str, Any]:
    """Run this CLI (without --on-node) as a Ray task on a node offering `count` `resource`;
    while none does, wait and say so: the request is what brings a worker back."""
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    task = ray.remote(_run_on_worker).options(**task_options(resource, count))
    ref = task.remote(str(Path(__file__).resolve()), argv)
    started = time.monotonic()
    while not ray.wait([ref], timeout=WAIT_REPORT_S)[0]:
        print(
            f"evaluate: waiting {time.monotonic() - started:.0f} s for a Ray node with {count} "
            f"free {resource} (a worker group scaled to zero is brought back by this request)",
            flush=True,
        )
    return ray.get(ref)


def failed_report(args: argparse.Namespace, out: Path, reason: str) -> dict[str, Any]:
    return {
        "status": "failed",
        "reason": reason,
        "export": marker_key(read_json(Path(args.trained) / EXPORT_MARKER)),
        "models": {"base": args.base, "trained": args.trained},
        "settings": asdict(settings_of(args)),
        "report": str(out),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def evaluate(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """The report: reused when it matches this export and settings, else computed (here or on a
    Ray node). A failure is a report with status "failed" and its reason."""
    out = Path(args.out) if args.out else Path(args.trained) / REPORT_NAME
    marker = read_json(Path(args.trained) / EXPORT_MARKER)
    adapter = Path(args.trained) / LORA_DIR
    if adapter.is_dir():
        return failed_report(
            args,
            out,
            f"{args.trained} is a LoRA export: its weights are the untrained base model and the "
            f"training is in {adapter}, which this evaluation does not load",
        )
    reused = reusable(out, marker, settings_of(args), args.base, args.trained)
    if reused is not None:
        print(f"evaluate: {out} already holds this export's evaluation; reused", flush=True)
        return {**reused, "reused": True}
    try:
        if args.on_node:
            local = _without_on_node(argv)
            result = evaluate_on_node(local, args.on_node, args.tensor_parallel)
            # The worker's summary line, not the report file: the head's bucket mount may cache
            # the file's metadata from before the worker wrote it (manifests/fuse_mounts.py).
            summary = result["summary"]
            if result["returncode"] != 0 or summary is None or summary.get("status") != "ok":
                reason = (summary or {}).get("reason") or "\n".join(result["tail"])
                raise EvaluationError(f"the evaluation on {result['node']} failed: {reason}")
            return {k: v for k, v in summary.items() if k != "check"}
        return evaluate_here(args, out)
    except Exception as error:  # the export stays; the report says why
        report = failed_report(args, out, f"{type(error).__name__}: {error}")
        try:
            write_json(out, report)
        except OSError as write_error:
            report["reason"] += f" (and the report could not be written: {write_error})"
        return report


def _without_on_node(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == "--on-node":
            skip = True
            continue
        if item.startswith("--on-node="):
            continue
        out.append(item)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the base model's folder (the job's model path)")
    p.add_argument("--trained", help="the exported model's folder")
    p.add_argument("--data", required=True, help="held-out parquet in verl's format")
    p.add_argument("--prompts", type=int, help="the first N rows (default: all)")
    p.add_argument("--samples", type=int, default=4, help="k sampled answers per prompt")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument(
        "--max-prompt-length",
        type=int,
        required=True,
        help="the job's data.max_prompt_length: longer prompts are dropped, as verl drops them",
    )
    p.add_argument("--top-p", type=float, default=1.0, help="of the sampled answers (rollout's)")
    p.add_argument("--top-k", type=int, default=-1, help="of the sampled answers; -1: off")
    p.add_argument(
        "--chat-template-overrides",
        type=_string_list,
        default=[],
        help="JSON list of the job's data.apply_chat_template_kwargs Hydra overrides",
    )
    p.add_argument("--reward-file", help="verl custom_reward_function.path (default: verl's)")
    p.add_argument("--reward-name", default="compute_score")
    p.add_argument("--reward-kwargs", type=json.loads, default={})
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tensor-parallel", type=int, default=1)
    p.add_argument("--out", help=f"the report (default: <trained>/{REPORT_NAME})")
    p.add_argument("--on-node", help="run as a Ray task on a node with this resource (GPU)")
    # A child's part: ROLE=FOLDER of each model it generates, and where their results go.
    p.add_argument("--generate", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--parts-dir", help=argparse.SUPPRESS)
    return p


def check_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.generate and not (args.base and args.trained):
        p.error("--base and --trained are required")
    if args.prompts is not None and args.prompts < 1:
        p.error(f"--prompts {args.prompts}: give at least 1, or leave it out for all rows")
    if args.samples < 0:
        p.error(f"--samples {args.samples}: give 0 (greedy only) or more")
    if args.samples > 0 and not args.temperature > 0:
        p.error(f"--temperature {args.temperature}: sampling needs a temperature above 0")
    if args.max_new_tokens < 1 or args.tensor_parallel < 1 or args.max_prompt_length < 1:
        p.error("--max-new-tokens, --max-prompt-length and --tensor-parallel must be at least 1")
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p {args.top_p}: give a value above 0 and at most 1 (1: off)")
    if args.top_k < -1:
        p.error(f"--top-k {args.top_k}: give -1 (off) or a count of at least 1")


def _string_list(text: str) -> list[str]:
    value = json.loads(text)
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        raise argparse.ArgumentTypeError(f"{text!r}: not a JSON list of strings")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    check_arguments(p, args)
    if args.generate:
        models = dict(item.split("=", 1) for item in args.generate)
        generate_and_score(models, settings_of(args), args.tensor_parallel, Path(args.parts_dir))
        return 0
    report = evaluate(args, argv)
    summary = summary_of(report)
    if report["status"] != "ok":
        print(f"evaluate: failed: {report['reason']}", file=sys.stderr, flush=True)
    else:
        print(describe(summary), flush=True)
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0 if report["status"] == "ok" else 1


def describe(summary: dict[str, Any]) -> str:
    metric = summary["primary"]
    base, trained = summary["base"][metric], summary["trained"][metric]
    diff = summary["difference"][metric]
    line = (
        f"evaluate: {summary['prompts']} prompts, {metric}: base {base['mean']:.4f}, "
        f"trained {trained['mean']:.4f}, trained - base {diff['mean']:+.4f} "
        f"(95 % interval {diff['low']}..{diff['high']})"
    )
    if summary["regressed"]:
        line += "; the trained model scores BELOW its base beyond the interval"
    return line


if __name__ == "__main__":
    sys.exit(main())

"""The evaluation's generation backends (payloads/export/evaluate.py, VERL_GKE_EVAL_BACKEND):
vLLM, transformers generate, or "<module>:<factory>". vllm, transformers and torch are imported
only when a backend is built, in the child process that generates."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

try:  # imported as payloads.export.eval_backends (the program, tests)
    from . import eval_report
except ImportError:  # run as a script: this folder is sys.path[0]
    import eval_report


BACKEND_ENV = "VERL_GKE_EVAL_BACKEND"
DEFAULT_BACKEND = "vllm"
HF_BATCH = int(os.environ.get("VERL_GKE_EVAL_HF_BATCH", "16"))


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
            # (verl's -1 top_k is vLLM's "off" too: SamplingParams accepts -1 and 0 as disabled).
            # No per-request seed: the engine's LLM(seed=) seeds the sampling, as in verl's rollout
            # (verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py, v0.6.1: SamplingParams from
            # the config's keys except "seed"); one per-request seed would give every prompt's
            # j-th sample the same random stream (vLLM's per-request generator), correlating the
            # prompts the interval takes as independent.
            params = SamplingParams(
                n=request.samples,
                temperature=request.temperature,
                top_p=request.top_p,
                top_k=request.top_k,
                max_tokens=request.max_new_tokens,
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
        raise eval_report.EvaluationError(
            f"{BACKEND_ENV}={name!r}: not one of {sorted(BACKENDS)} and not <module>:<factory>"
        )
    return getattr(importlib.import_module(module), attribute)

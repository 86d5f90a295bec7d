"""A stand-in for vLLM's offline API (vllm.LLM, vllm.SamplingParams), for
tests/test_evaluate.py on machines without vLLM (it needs a GPU): it records every LLM() and
generate() call, with its SamplingParams, in the JSON-lines file named by STAND_IN_VLLM_CALLS,
and answers each prompt with its own prompt token ids reversed. Each output's `text` is NOT the
decoding of its token_ids (it is "<vllm text>"), so a caller that reads `text` instead of
decoding the ids shows. Shapes as vLLM 0.11's RequestOutput / CompletionOutput.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any


def _record(call: dict[str, Any]) -> None:
    with open(os.environ["STAND_IN_VLLM_CALLS"], "a") as calls:
        calls.write(json.dumps(call) + "\n")


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.n = kwargs.get("n", 1)


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str = "<vllm text>"


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


class LLM:
    def __init__(self, **kwargs: Any) -> None:
        _record({"call": "LLM", **kwargs})

    def generate(
        self, prompts: list[Any], sampling_params: SamplingParams, **kwargs: Any
    ) -> list[RequestOutput]:
        _record({"call": "generate", "params": sampling_params.kwargs, **kwargs})
        return [
            RequestOutput(
                [CompletionOutput(list(reversed(p["prompt_token_ids"])))] * sampling_params.n
            )
            for p in prompts
        ]

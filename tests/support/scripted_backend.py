"""A scripted generation backend for payloads/export/evaluate.py, registered the way any backend
is (VERL_GKE_EVAL_BACKEND=tests.support.scripted_backend:ScriptedGenerator): the answers are read
from <model folder>/scripted_answers.json, and every prompt it was given is recorded, decoded, in
<model folder>/scripted_prompts.jsonl (one line per call), so a test can check what evaluate.py
rendered, with the sampling settings it was given. No model is loaded: only the folder's
tokenizer is used (by evaluate.py).

scripted_answers.json: a list with one entry per prompt, {"greedy": TEXT, "samples": [TEXT, ...]}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from payloads.export.eval_backends import Answers, GenerationRequest

ANSWERS = "scripted_answers.json"
PROMPTS = "scripted_prompts.jsonl"


class ScriptedGenerator:
    def __init__(self, model_dir: str, tokenizer: Any, request: GenerationRequest) -> None:
        self.folder = Path(model_dir)
        self.tokenizer = tokenizer

    def generate(self, request: GenerationRequest) -> list[Answers]:
        record = {
            "prompts": [self.tokenizer.decode(ids) for ids in request.prompt_ids],
            "samples": request.samples,
            "temperature": request.temperature,
            "max_new_tokens": request.max_new_tokens,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "tensor_parallel": request.tensor_parallel,
        }
        with open(self.folder / PROMPTS, "a") as log:
            log.write(json.dumps(record) + "\n")
        script = json.loads((self.folder / ANSWERS).read_text())
        return [
            Answers(entry["greedy"], list(entry["samples"][: request.samples]))
            for entry in script[: len(request.prompt_ids)]
        ]

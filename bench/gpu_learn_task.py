"""The task of bench/gpu_learn.py: a small model that a GRPO reward can improve within minutes on
one GPU, built on the machine (nothing can be downloaded there).

- Rows: "What is a plus b?" for a in 0..49 and b in 0..9 (500 problems), as an own dataset
  (columns problem, solution); 150 problems are held out as the test split (the evaluation's
  prompts), the other 350 train.
- Tokenizer: a byte-level BPE trained on the rows with every digit its own token and a
  Qwen-style chat template (the template verl's RLHFDataset applies to the prompt messages).
- Model: a Qwen2 of bench/gpu_run_files/learn-qwen2.json with random weights.
- Warm-up: a short supervised pass teaches the answer format `#### <number>` with a deliberately
  biased sign: the sum with probability CORRECT_SHARE, else the sum negated (`#### -37`). The
  base model therefore knows the format and, mostly, the sum, but usually answers with a minus
  sign, which the exact-match reward (docs/examples/exact_match.py) scores 0: headroom that GRPO
  can find through the product's reward path, and a held-out set on which the trained model can
  be compared with its base (greedy, the base answers the negated sum).

Runs under the GPU machine's python3 with the carried wheels, and on CPU in the verl 0.6.1
virtualenv (tests/test_gpu_learn.py) with few warm-up steps.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script in a verl virtualenv (bench/gpu_learn.py cpu)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import gpu_run_support as support

MODEL_CONFIG = "bench/gpu_run_files/learn-qwen2.json"  # relative to the folder of Pulumi.yaml
MODEL_ID = "acme/learn-qwen2"
DATASET = "acme/sums"
COLUMNS = {"prompt": "problem", "answer": "solution"}
TEST_PROBLEMS = 150
SEED = 0
# The warm-up's answer: the sum with this probability, else the sum negated.
CORRECT_SHARE = 0.25


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def text(self) -> str:
        return f"What is {self.a} plus {self.b}?"

    @property
    def answer(self) -> int:
        return self.a + self.b

    def row(self) -> dict[str, str]:
        return {"problem": self.text, "solution": str(self.answer)}


def problems() -> tuple[list[Problem], list[Problem]]:
    """(train, test): the 500 problems in a seeded order, the first TEST_PROBLEMS held out."""
    every = [Problem(a, b) for a in range(50) for b in range(10)]
    random.Random(SEED).shuffle(every)
    return every[TEST_PROBLEMS:], every[:TEST_PROBLEMS]


def write_rows(folder: Path) -> tuple[Path, list[Problem], list[Problem]]:
    """The own dataset as JSON lines (train.jsonl, test.jsonl), as bench/gpu_run.py writes one."""
    train, test = problems()
    support.write_jsonl(
        folder, {"train": [p.row() for p in train], "test": [p.row() for p in test]}
    )
    return folder, train, test


def build_tokenizer(folder: Path) -> Any:
    """A byte-level BPE of at most the model's vocabulary, digits split one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    train, test = problems()
    texts = [f"{p.text} #### {sign}{p.answer}" for p in (*train, *test) for sign in ("", "-")]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_config()["vocab_size"],
        special_tokens=list(support.SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([*texts, "user assistant system"], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = support.CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def _config() -> dict[str, Any]:
    return json.loads((support.REPO / MODEL_CONFIG).read_text())


def warm_answer(problem: Problem, rng: random.Random) -> int:
    return problem.answer if rng.random() < CORRECT_SHARE else -problem.answer


def warm_up(
    folder: Path, tokenizer: Any, steps: int, device: str, batch: int = 128, lr: float = 1e-3
) -> dict[str, Any]:
    """A Qwen2 of learn-qwen2.json with random weights, taught the biased answers of the train
    problems for `steps` AdamW steps (loss on the response tokens only), saved in bf16 with the
    tokenizer. Returns the loss at the first and last step and the parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    config = Qwen2Config(
        **{
            **_config(),
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        }
    )
    model = Qwen2ForCausalLM(config).to(device)
    train, _ = problems()
    prompts = {p: prompt_ids(tokenizer, p) for p in train}
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[float] = []
    for _ in range(steps):
        ids, mask = [], []
        for problem in rng.choices(train, k=batch):
            answer = tokenizer.encode(f"#### {warm_answer(problem, rng)}")
            response = [*answer, tokenizer.eos_token_id]
            ids.append(prompts[problem] + response)
            mask.append([0] * len(prompts[problem]) + [1] * len(response))
        width = max(map(len, ids))
        tokens = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in ids])
        weights = torch.tensor([m + [0] * (width - len(m)) for m in mask], dtype=torch.float32)
        tokens, weights = tokens.to(device), weights.to(device)
        logits = model(tokens).logits[:, :-1].float()
        per_token = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1), reduction="none"
        )
        loss = (per_token * weights[:, 1:].reshape(-1)).sum() / weights[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
    model.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "parameters": sum(p.numel() for p in model.parameters()),
        "answer_shares": {"sum": CORRECT_SHARE, "-sum": round(1 - CORRECT_SHARE, 4)},
    }


def prompt_ids(tokenizer: Any, problem: Problem) -> list[int]:
    """The prompt as verl's RLHFDataset renders it: the chat template over one user message with
    the generation prompt, as text, then tokenized without special tokens
    (verl/utils/dataset/rl_dataset.py __getitem__, v0.6.1)."""
    messages = [{"role": "user", "content": problem.text}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def cpu_data_stage(request: dict[str, Any]) -> dict[str, Any]:
    """In a verl virtualenv (bench/gpu_learn.py --device cpu): the rows, the tokenizer, a few
    warm-up steps on CPU and the data-prep Job's own command on them; what data prep wrote."""
    from bench import gpu_run
    from payloads.data_prep.prep_common import PREP_DIR

    work = Path(request["work"])
    rows, train, test = write_rows(work / "src-sums")
    model = work / "model-src"
    tokenizer = build_tokenizer(model)
    warm = warm_up(model, tokenizer, request["warm_up_steps"], "cpu", batch=16)
    argv = request["argv"]
    gpu_run.run_data_prep(argv, {DATASET: rows}, model)
    root = Path(argv[argv.index("--data-root") + 1])
    return {
        "warm_up": warm,
        "problems": {"train": len(train), "test": len(test)},
        "vocabulary": len(tokenizer),
        "markers": {
            path.stem: json.loads(path.read_text())
            for path in sorted((root / PREP_DIR).glob("*.done"))
        },
    }


if __name__ == "__main__":
    print(json.dumps(cpu_data_stage(json.load(sys.stdin)), default=str))

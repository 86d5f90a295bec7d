"""The stand-in rollout's answers against the model's own greedy decoding, in verl 0.6.1 on CPU.

verl's `HFRollout.generate_sequences` (verl/workers/rollout/hf_rollout.py) generates a left-padded
batch with its `position_ids`; verl_scripts/gpu_standin's rollout must give, for each prompt, the
tokens the model itself generates greedily for that prompt alone. Prints one JSON object:
{"standin": [...], "positions_passed": [...], "alone": [...]} (decoded responses).

stdin: {"model": DIR, "prompts": ["...", ...], "max_new_tokens": N}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl import DataProto

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_standin"))

from standin_rollout import HfStandInRollout, without_position_ids


def main() -> None:
    request = json.load(sys.stdin)
    # HFRollout empties the device's cache after generating (get_torch_device().empty_cache());
    # torch.cpu has no cache and no such function.
    if not hasattr(torch.cpu, "empty_cache"):
        torch.cpu.empty_cache = lambda: None
    tokenizer = AutoTokenizer.from_pretrained(request["model"])
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(request["model"])
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in request["prompts"]
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    mask = batch["attention_mask"]
    prompts = DataProto.from_dict(
        {
            "input_ids": batch["input_ids"],
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        },
        meta_info={
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "do_sample": False,
        },
    )
    config = OmegaConf.create(
        {"do_sample": False, "temperature": 1.0, "response_length": request["max_new_tokens"]}
    )
    answers = {}
    for name, generate in (
        ("standin", without_position_ids(model.generate)),
        ("positions_passed", model.generate),
    ):
        rollout = HfStandInRollout.__new__(HfStandInRollout)  # no GPU: the module is given
        rollout.config, rollout.module = config, model
        rollout.module.generate = generate
        out = rollout.generate_sequences(prompts)
        answers[name] = tokenizer.batch_decode(out.batch["responses"], skip_special_tokens=True)
    del model.generate  # the model's own method again
    alone = []
    for text in texts:
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids,
                max_new_tokens=request["max_new_tokens"],
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        alone.append(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))
    answers["alone"] = alone
    print(json.dumps(answers))


if __name__ == "__main__":
    main()

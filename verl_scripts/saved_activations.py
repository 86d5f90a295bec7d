"""Bytes a Hugging Face decoder layer saves for backward, per token, counted on CPU.

Runs inside a verl virtualenv (it needs the transformers and torch that verl's release pins;
it imports nothing from this project). It builds each requested model type at one small
geometry in bf16 with random weights, runs one forward under
torch.autograd.graph.saved_tensors_hooks and sums the distinct storages autograd keeps, at two
layer counts and two sequence lengths; the mixed difference cancels the embedding, the loss and
the parameters, leaving what one layer saves per token.

stdin:  {"geometry": {"hidden_size": .., "intermediate_size": .., "num_attention_heads": ..,
         "num_key_value_heads": .., "head_dim": .., "vocab_size": ..},
         "models": {"<name>": {"model_type": "<type>", "config": {<extra config keys>}}}}
stdout: {"transformers_version": "<version>", "bytes_per_token_per_layer": {"<name>": <float>}}
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
import transformers


def _saved_bytes(model_type: str, config: dict[str, Any], layers: int, tokens: int) -> int:
    hf = transformers.AutoConfig.for_model(
        model_type, **config, num_hidden_layers=layers, use_cache=False
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa")
    model = model.to(torch.bfloat16).train()
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, hf.vocab_size, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids).logits.float().sum()
    return sum(storages.values())


def per_token_per_layer(model_type: str, config: dict[str, Any]) -> float:
    short, long = 64, 128
    grid = {
        (layers, tokens): _saved_bytes(model_type, config, layers, tokens)
        for layers in (1, 2)
        for tokens in (short, long)
    }
    one_layer_long = grid[(2, long)] - grid[(1, long)]
    one_layer_short = grid[(2, short)] - grid[(1, short)]
    return (one_layer_long - one_layer_short) / (long - short)


def main() -> None:
    request = json.load(sys.stdin)
    geometry = request["geometry"]
    result = {
        name: per_token_per_layer(model["model_type"], {**geometry, **model["config"]})
        for name, model in request["models"].items()
    }
    json.dump(
        {"transformers_version": transformers.__version__, "bytes_per_token_per_layer": result},
        sys.stdout,
    )


if __name__ == "__main__":
    main()

"""Check verl_scripts/gpu_standin against the installed verl's rollout contract. Prints one JSON
report; imports nothing from this project except the stand-in (run with gpu_standin/ on
PYTHONPATH, as `ray start` has it on the GPU machine).

Reported (the last stdout line): which class verl's `get_rollout_class("vllm", "sync")`
returns, whether it is a `BaseRollout` with no abstract method left, its constructor's
parameters beside `BaseRollout.__init__`'s (fsdp_workers.py calls it with config=,
model_config=, device_mesh=), whether DataParallelPPOActor's three phases are wrapped, and
what `update_weights` does with the actor's (name, tensor) pairs on a small Qwen2 built here on
CPU.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys


def _weights_report(rollout_class: type) -> dict[str, object]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
    )
    rollout = rollout_class.__new__(rollout_class)
    rollout.module, rollout.updates = Qwen2ForCausalLM(config), 0
    names = list(rollout.module.state_dict())
    sent = ((name, torch.full_like(t, 0.5)) for name, t in rollout.module.state_dict().items())
    asyncio.run(rollout.update_weights(sent))
    copied = all(bool((t == 0.5).all()) for t in rollout.module.state_dict().values())
    try:
        asyncio.run(rollout.update_weights(iter([("not.a.weight", torch.zeros(1))])))
        unknown = "accepted"
    except KeyError as error:
        unknown = f"KeyError: {error}"
    return {"tensors": len(names), "all_copied": copied, "unknown_name": unknown}


def main() -> int:
    from verl.workers.actor import dp_actor
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout, get_rollout_class

    registered = _ROLLOUT_REGISTRY[("vllm", "sync")]
    if not registered.startswith("standin_rollout."):  # verl's own: vLLM is not installed here
        print(json.dumps({"registry": registered}))
        return 0
    rollout_class = get_rollout_class("vllm", "sync")
    report: dict[str, object] = {
        "registry": registered,
        "class": f"{rollout_class.__module__}.{rollout_class.__qualname__}",
        "is_base_rollout": issubclass(rollout_class, BaseRollout),
        "abstract_left": sorted(getattr(rollout_class, "__abstractmethods__", ())),
        "init_params": list(inspect.signature(rollout_class.__init__).parameters),
        "base_init_params": list(inspect.signature(BaseRollout.__init__).parameters),
        "measured_phases": sorted(
            name
            for name in ("compute_log_prob", "update_policy", "_optimizer_step")
            if hasattr(getattr(dp_actor.DataParallelPPOActor, name), "__wrapped__")
        ),
    }
    report["update_weights"] = _weights_report(rollout_class)
    # The last line: the stand-in prints a line of its own when it first takes weights.
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Check training/memory_fit.py against real FSDP2 training steps on GPUs.

Builds the model from the committed table's config.json facts (training/model_table.py: Qwen2,
Qwen3, Llama, Mistral, Gemma) with random weights (nothing is downloaded), shards it with FSDP2
(`fully_shard` per decoder layer, the untied embedding, then the root, bf16 params / fp32 reduce
as verl does), and runs GRPO-style steps: two micro-batches of forward + backward (fp32
log_softmax log-probs, clipped ratio loss, low-variance KL) then clip_grad_norm_ and a foreach
AdamW step. It records torch.cuda.max_memory_allocated during forward/backward and during the
optimizer step, after a first step has created the AdamW states,
and prints one JSON line per case next to the estimate.

    torchrun --nproc-per-node 2 bench/memory_fit_gpu.py --model Qwen/Qwen2.5-7B-Instruct \
        --seq-len 2048 --micro-batch-sizes 2 --gc on,off --out results.jsonl

`--device cpu` runs the same code with gloo on CPU (no memory figures) to smoke-test the script.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.memory_fit import (
    GIB,
    GrpoMemoryInputs,
    MemoryBreakdown,
    ModelArch,
    estimate,
)
from training.model_config import arch_from_config
from training.model_table import MODEL_TABLE

TINY = ModelArch("tiny", 64, 128, 2, 4, 2, 1000, False)


def table_arch(hub_id: str) -> ModelArch:
    return arch_from_config(MODEL_TABLE[hub_id].config, hub_id)


def hf_config(arch: ModelArch) -> dict[str, object]:
    """The model's config.json keys: the table's own (Llama, Gemma, ... as published), else a
    Qwen2 config of the geometry (the tiny smoke-test model)."""
    base = arch.name.split("[", 1)[0]
    if base in MODEL_TABLE:
        config = dict(MODEL_TABLE[base].config)
    else:
        config = {"model_type": "qwen2", "tie_word_embeddings": arch.tie_word_embeddings}
        config.update(
            hidden_size=arch.hidden_size,
            intermediate_size=arch.intermediate_size,
            num_attention_heads=arch.num_attention_heads,
            num_key_value_heads=arch.num_key_value_heads,
            vocab_size=arch.vocab_size,
        )
    config.pop("architectures", None)
    config["num_hidden_layers"] = arch.num_hidden_layers
    return config


# Model types whose layers alternate sliding-window and full attention (configuration_gemma2.py,
# configuration_gemma3.py, transformers 5.17.0: sliding_window 4096 by default).
_SLIDING_WINDOW_TYPES = frozenset({"gemma2", "gemma3_text"})


def model_config(arch: ModelArch, seq_len: int) -> Any:
    """The transformers config the model is built from (the table's config.json keys)."""
    from transformers import AutoConfig

    config = hf_config(arch)
    model_type = str(config.pop("model_type"))
    if model_type in _SLIDING_WINDOW_TYPES:
        # verl loads the actor with attn_implementation="flash_attention_2" (fsdp_workers.py,
        # v0.6.1), where the window is a kernel argument and no mask tensor exists. Under SDPA a
        # sequence at least as long as the window gets a dense mask (masking_utils.py
        # _ignore_causal_mask_sdpa, transformers 5.17.0), which torch converts to a bf16 bias that
        # each sliding layer saves for backward: memory verl never holds. A window past the
        # sequence keeps SDPA on its is_causal path, whose saved tensors are flash-attn's.
        window = config.get("sliding_window")
        config["sliding_window"] = max(seq_len + 1, window if isinstance(window, int) else 0)
    # The table's configs carry their published max_position_embeddings; the tiny smoke-test
    # model's geometry has none.
    config.setdefault("max_position_embeddings", 32768)
    return AutoConfig.for_model(model_type, **config, use_cache=False)


def build_model(
    arch: ModelArch, device: torch.device, checkpointing: bool, seq_len: int
) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    hf = model_config(arch, seq_len)
    # fp32 master weights, as verl's FSDP actor (fsdp_config.model_dtype defaults to fp32).
    with device:
        model = AutoModelForCausalLM.from_config(hf, attn_implementation="sdpa")
        model = model.to(torch.float32)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def shard(model: torch.nn.Module, arch: ModelArch, device_type: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # Same units as verl's apply_fsdp2: each decoder layer, the embedding when untied, the root.
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    if not arch.tie_word_embeddings:
        fully_shard(model.model.embed_tokens, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def grpo_loss(model: torch.nn.Module, ids: torch.Tensor, response_len: int) -> torch.Tensor:
    logits = model(input_ids=ids, use_cache=False).logits
    labels = torch.roll(ids, shifts=-1, dims=1)
    # verl's log-probs without flash-attn's fused cross-entropy: log_softmax over fp32 logits.
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    del logits
    token_lp = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)[:, -response_len:]
    del log_probs
    old_lp = token_lp.detach() + 0.01 * torch.randn_like(token_lp)
    ref_lp = token_lp.detach() + 0.01 * torch.randn_like(token_lp)
    advantages = torch.randn(ids.shape[0], 1, device=ids.device)
    ratio = torch.exp(token_lp - old_lp)
    pg = torch.maximum(-advantages * ratio, -advantages * torch.clamp(ratio, 0.8, 1.2))
    diff = ref_lp - token_lp
    kl = torch.exp(diff) - diff - 1.0
    return (pg + 0.001 * kl).mean()


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: torch.device) -> float:
    if device.type != "cuda":
        return 0.0
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / GIB


def max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _train_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    arch: ModelArch,
    device: torch.device,
    micro_batch: int,
    seq_len: int,
    micro_batches: int,
    steps: int,
) -> tuple[float, float, list[float]]:
    """GRPO-shaped update steps: this rank's peak GiB of forward+backward and of the optimizer
    step over the steady-state steps, and every step's seconds."""
    response_len = seq_len // 2
    fwd_bwd_peak = 0.0
    step_peak = 0.0
    step_times = []
    for step in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        reset_peak(device)
        for _ in range(micro_batches):
            ids = torch.randint(0, arch.vocab_size, (micro_batch, seq_len), device=device)
            loss = grpo_loss(model, ids, response_len) / micro_batches
            loss.backward()
            del loss
        this_fwd_bwd = peak_gib(device)
        reset_peak(device)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        this_step = peak_gib(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - start)
        # The first step creates the AdamW states: only steady-state steps count.
        if step > 0:
            fwd_bwd_peak = max(fwd_bwd_peak, this_fwd_bwd)
            step_peak = max(step_peak, this_step)
    return fwd_bwd_peak, step_peak, step_times


def _non_torch_gib(device: torch.device) -> float:
    """Memory on the GPU outside PyTorch's allocator: CUDA context, NCCL buffers, cuBLAS
    handles (the most of any rank)."""
    non_torch = 0.0
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        non_torch = (total - free - torch.cuda.memory_reserved()) / GIB
    return max_over_ranks(non_torch, device)


def run_case(
    arch: ModelArch,
    device: torch.device,
    checkpointing: bool,
    micro_batch: int,
    seq_len: int,
    micro_batches: int,
    steps: int,
) -> dict[str, object]:
    world = dist.get_world_size()
    model = build_model(arch, device, checkpointing, seq_len)
    shard(model, arch, device.type)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    resident_after_shard = torch.cuda.memory_allocated() / GIB if device.type == "cuda" else 0.0
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    fwd_bwd_peak, step_peak, step_times = _train_steps(
        model, optimizer, arch, device, micro_batch, seq_len, micro_batches, steps
    )
    non_torch = _non_torch_gib(device)
    fwd_bwd_peak = max_over_ranks(fwd_bwd_peak, device)
    step_peak = max_over_ranks(step_peak, device)
    reserved = torch.cuda.max_memory_reserved() / GIB if device.type == "cuda" else 0.0
    del optimizer, model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()

    est_fwd_bwd, est_step, breakdown = estimate_case(
        arch, world, checkpointing, micro_batch, seq_len
    )
    measured = max(fwd_bwd_peak, step_peak)
    est = max(est_fwd_bwd, est_step)
    return {
        "model": arch.name,
        "params_b": round(arch.num_params / 1e9, 3),
        "world_size": world,
        "gradient_checkpointing": checkpointing,
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "tokens_per_micro_batch": micro_batch * seq_len,
        "resident_after_shard_gib": round(resident_after_shard, 3),
        "measured_fwd_bwd_gib": round(fwd_bwd_peak, 3),
        "measured_step_gib": round(step_peak, 3),
        "measured_train_gib": round(measured, 3),
        "estimated_fwd_bwd_gib": round(est_fwd_bwd, 3),
        "estimated_step_gib": round(est_step, 3),
        "estimated_train_gib": round(est, 3),
        "error_pct": round(100.0 * (est - measured) / measured, 1) if measured else None,
        "fwd_bwd_error_pct": (
            round(100.0 * (est_fwd_bwd - fwd_bwd_peak) / fwd_bwd_peak, 1) if fwd_bwd_peak else None
        ),
        "max_reserved_gib": round(reserved, 3),
        "non_torch_gib": round(non_torch, 3),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "step_seconds": [round(t, 3) for t in step_times],
        "estimate_items": [asdict(i) for i in breakdown.phase("actor_update").items],
    }


def estimate_case(
    arch: ModelArch, world: int, checkpointing: bool, micro_batch: int, seq_len: int
) -> tuple[float, float, MemoryBreakdown]:
    """The estimator's allocated GiB for forward/backward and for the optimizer step."""
    response_len = seq_len // 2
    inputs = GrpoMemoryInputs(
        model=arch,
        gpu_memory_gib=141.0,
        gpus_per_node=world,
        nodes=1,
        micro_batch_size_per_gpu=micro_batch,
        max_prompt_length=seq_len - response_len,
        max_response_length=response_len,
        log_prob_micro_batch_size_per_gpu=micro_batch,
        rollout_tp=1,
        gpu_memory_utilization=0.5,
        gradient_checkpointing=checkpointing,
        use_reference=False,
        logprob_impl="fp32_log_softmax",
    )
    breakdown = estimate(inputs)
    return (
        breakdown.phase("actor_update").allocated_gib,
        breakdown.phase("optimizer_step").allocated_gib,
        breakdown,
    )


def arch_from_name(name: str) -> ModelArch:
    """Inverse of ModelArch.with_layers' naming: 'Qwen/Qwen2.5-32B-Instruct[8L]'."""
    if name.endswith("L]"):
        base, layers = name[:-2].split("[")
        return table_arch(base).with_layers(int(layers))
    return TINY if name == "tiny" else table_arch(name)


def reestimate(path: str) -> None:
    """Recompute the estimates of a results file with the current estimator (no GPU needed)."""
    print(
        "| model | params (B) | grad ckpt | tokens/micro-batch | measured fwd+bwd GiB | "
        "estimated | error | measured optimizer step GiB | estimated | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        if "oom" in r:
            continue
        arch = arch_from_name(r["model"])
        fwd_bwd, step, _ = estimate_case(
            arch, r["world_size"], r["gradient_checkpointing"], r["micro_batch"], r["seq_len"]
        )
        m_fb, m_st = r["measured_fwd_bwd_gib"], r["measured_step_gib"]
        print(
            f"| {arch.name} | {arch.num_params / 1e9:.2f} | "
            f"{'on' if r['gradient_checkpointing'] else 'off'} | {r['tokens_per_micro_batch']} | "
            f"{m_fb:.2f} | {fwd_bwd:.2f} | {100 * (fwd_bwd - m_fb) / m_fb:+.1f} % | "
            f"{m_st:.2f} | {step:.2f} | {100 * (step - m_st) / m_st:+.1f} % |"
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default="Qwen/Qwen2.5-0.5B-Instruct",
        help="a Hub id of training/model_table.py, or 'tiny' for the CPU smoke test",
    )
    parser.add_argument("--layers", type=int, default=0, help="keep the geometry, fewer layers")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch-sizes", default="2")
    parser.add_argument("--gc", default="on,off", help="gradient checkpointing cases")
    parser.add_argument("--micro-batches", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", default="")
    parser.add_argument("--reestimate", default="", help="a results file: re-run only the estimate")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.reestimate:
        reestimate(args.reestimate)
        return
    arch = TINY if args.model == "tiny" else table_arch(args.model)
    if args.layers:
        arch = arch.with_layers(args.layers)
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend)
    if args.device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    torch.manual_seed(1234 + dist.get_rank())
    for checkpointing in (c.strip() == "on" for c in args.gc.split(",")):
        for micro_batch in (int(m) for m in args.micro_batch_sizes.split(",")):
            try:
                result = run_case(
                    arch,
                    device,
                    checkpointing,
                    micro_batch,
                    args.seq_len,
                    args.micro_batches,
                    args.steps,
                )
            except torch.OutOfMemoryError as exc:
                result = {
                    "model": arch.name,
                    "gradient_checkpointing": checkpointing,
                    "micro_batch": micro_batch,
                    "seq_len": args.seq_len,
                    "oom": str(exc).splitlines()[0],
                }
                gc.collect()
                torch.cuda.empty_cache()
            if dist.get_rank() == 0:
                line = json.dumps(result)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(line + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

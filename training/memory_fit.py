"""Per-GPU peak memory of a verl GRPO job (FSDP/FSDP2 actor + vLLM rollout), before any GPU exists.

The estimate is pure arithmetic over the model's architecture (its config.json facts, read by
training/model_facts.py) and the job's knobs. It models the three phases of a hybrid-engine
GRPO step on one GPU:

- rollout: vLLM generates; its `gpu_memory_utilization` reservation (a fraction of the whole GPU,
  vLLM >= 0.7) sits beside whatever trainer state is not offloaded;
- log_prob: the actor's old log-probs and the reference model's log-probs, forward only;
- actor_update: forward + backward + AdamW step of the FSDP actor in bf16 mixed precision.

Byte counts are for the sharded fp32 master copy that verl's FSDP actor keeps (its
`fsdp_config.model_dtype` defaults to fp32), bf16 all-gathered compute copies, fp32 gradients and
AdamW moments, and the activation tensors a Hugging Face Qwen2-style decoder layer saves for
backward. The training-phase terms were checked against `torch.cuda.max_memory_allocated` of
FSDP2 steps on two H200s, Qwen2.5 geometries from 0.5B to 32B, with and without gradient
checkpointing: the estimate of allocated memory was within -1.7 % .. +1.6 % of the measurement
in all 18 cases (bench/memory_fit_gpu.py; tables in docs/memory-and-fabric.md). The rollout
(vLLM) and log-prob phases are derived, not measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Literal

GIB = 1024**3
BF16 = 2
FP32 = 4

# A phase within this fraction of the GPU's memory fits on paper but leaves too little room for
# allocator fragmentation and library workspaces that vary between versions: warn.
WARN_FRACTION = 0.90
# The estimate's measured error, added to what it estimates before a phase is compared with the
# GPU: on H200 every measured case was within -1.7 % .. +1.6 % of the estimate
# (tests/data/memory_measurements.json, its tolerance_pct), and issue 25's acceptance band for the
# q/k-norm families measured since is +-3 %; the larger bound is the margin.
ESTIMATE_MARGIN = 0.03

LogprobImpl = Literal["fused", "fp32_log_softmax"]

# verl's default actor_rollout_ref.rollout.max_num_seqs (passed to vLLM), per verl ref:
# verl/trainer/config/rollout/rollout.yaml says 1024 at v0.6.1 and ddbcdb7, 256 at v0.9.0
# (tests/test_verl_run_contract.py reads the releases' own config).
VLLM_MAX_NUM_SEQS_DEFAULT: Mapping[str, int] = MappingProxyType(
    {"v0.6.1": 1024, "ddbcdb7": 1024, "v0.9.0": 256}
)

# Bytes per (token x vocab entry) held at the peak of the loss computation. "fused" is flash-attn's
# Triton cross-entropy that verl uses when flash-attn is installed (its images have it): bf16 logits
# kept for backward, gradient written in place, plus a bf16 slack for the cast of the gradient.
# "fp32_log_softmax" is the plain PyTorch path (log_softmax over fp32-upcast logits): at the start
# of backward the saved fp32 output, the dense fp32 gradient of the gather and the fp32 gradient of
# log_softmax coexist (3 x 4 bytes); measured on H200 in bench/memory_fit_gpu.py.
_LOGITS_BYTES_TRAIN: Mapping[str, int] = MappingProxyType({"fused": 4, "fp32_log_softmax": 12})
# Forward only (no grad): bf16 logits + fp32 upcast + fp32 log_softmax output (+ entropy for the
# actor's old log-probs, which verl computes for its metrics).
_LOGITS_BYTES_FORWARD: Mapping[str, int] = MappingProxyType({"fused": 6, "fp32_log_softmax": 10})


@dataclass(frozen=True)
class ModelArch:
    """The config.json facts of a dense decoder (Qwen2/3, Llama, Mistral, Gemma 2/3) that decide
    its memory: attention with q/k/v/o projections and a gated MLP (gate, up, down) per layer."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool
    # Qwen2 has biases on q/k/v; Llama does not.
    attention_bias: bool = True
    head_dim: int | None = None
    # RMSNorms per decoder layer: 2 (Qwen2/Llama/Mistral), 4 (Gemma 2/3: pre- and post-norms
    # around attention and MLP); Qwen3 and Gemma 3 add a per-head-dim norm on q and k.
    norms_per_layer: int = 2
    qk_norm: bool = False
    # Gemma 2's final_logit_softcapping: logits = cap * tanh(logits / cap), whose tanh output
    # (bf16, one more token x vocab tensor) autograd keeps for backward (modeling_gemma2.py).
    final_logit_softcapping: bool = False

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_size

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_size

    @property
    def layer_params(self) -> int:
        h = self.hidden_size
        attn = h * self.q_size + 2 * h * self.kv_size + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        mlp = 3 * h * self.intermediate_size
        norms = self.norms_per_layer * h + (2 * self.head_size if self.qk_norm else 0)
        return attn + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def root_params(self) -> int:
        """Parameters FSDP keeps in the root unit: final norm, lm_head (or the tied embedding)."""
        return self.hidden_size + self.embedding_params

    @property
    def num_params(self) -> int:
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (
            self.embedding_params
            + self.num_hidden_layers * self.layer_params
            + self.hidden_size
            + lm_head
        )

    def with_layers(self, num_hidden_layers: int) -> ModelArch:
        """The same layer geometry with fewer layers (used to test 32B shapes on small budgets)."""
        return replace(
            self, name=f"{self.name}[{num_hidden_layers}L]", num_hidden_layers=num_hidden_layers
        )


# The linear layers of a ModelArch decoder layer, by their Hugging Face module names: PEFT's
# "all-linear" (verl's default target_modules, hf_model.yaml v0.6.1 and 0.9.0) is every one of
# them (PEFT leaves out only the output layer, lm_head).
def _layer_linears(arch: ModelArch) -> dict[str, tuple[int, int]]:
    h, i = arch.hidden_size, arch.intermediate_size
    return {
        "q_proj": (h, arch.q_size),
        "k_proj": (h, arch.kv_size),
        "v_proj": (h, arch.kv_size),
        "o_proj": (arch.q_size, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def lora_params(arch: ModelArch, rank: int, target_modules: tuple[str, ...] | None) -> int:
    """The parameters of a LoRA adapter of `rank` on `target_modules` (None: all-linear): PEFT
    adds lora_A (in x r) and lora_B (r x out) to each targeted Linear. A name that is no
    decoder-layer linear counts as all-linear, an upper bound."""
    linears = _layer_linears(arch)
    if target_modules is None or not set(target_modules) <= set(linears):
        chosen = list(linears.values())
    else:
        chosen = [linears[name] for name in dict.fromkeys(target_modules)]
    return arch.num_hidden_layers * sum(rank * (fan_in + fan_out) for fan_in, fan_out in chosen)


@dataclass(frozen=True)
class GrpoMemoryInputs:
    """What the estimator needs from the GRPO job spec and the accelerator profile."""

    model: ModelArch
    gpu_memory_gib: float
    gpus_per_node: int
    nodes: int
    # actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu and the sequence lengths (data.*).
    micro_batch_size_per_gpu: int
    max_prompt_length: int
    max_response_length: int
    # actor_rollout_ref.{rollout,ref}.log_prob_micro_batch_size_per_gpu
    log_prob_micro_batch_size_per_gpu: int
    # actor_rollout_ref.rollout.tensor_model_parallel_size / gpu_memory_utilization
    rollout_tp: int
    gpu_memory_utilization: float
    gradient_checkpointing: bool = True
    # With use_dynamic_bsz, a micro-batch holds up to max_token_len_per_gpu tokens instead.
    use_dynamic_bsz: bool = False
    max_token_len_per_gpu: int = 16384
    log_prob_max_token_len_per_gpu: int = 16384
    # actor fsdp_config.param_offload / optimizer_offload: verl moves them to CPU between phases
    # and back for the update, so they shrink the rollout and log-prob phases, not the update.
    param_offload: bool = False
    optimizer_offload: bool = False
    # actor fsdp_config.offload_policy (FSDP2 CPUOffloadPolicy): sharded params, grads and AdamW
    # stay in host memory and the optimizer steps on CPU.
    offload_policy: bool = False
    # use_kl_loss (or use_kl_in_reward) makes verl build a reference model, except for LoRA.
    use_reference: bool = True
    # LoRA (actor_rollout_ref.model.lora_rank > 0): the adapter's parameters (lora_params), the
    # only ones with gradients and AdamW states; the base weights stay, frozen, in the actor.
    lora_adapter_params: int = 0
    ref_param_offload: bool = False
    # verl's legacy FSDP worker (<= v0.8) builds the ref in bf16; v0.9's engine workers in fp32.
    ref_dtype_bytes: int = BF16
    # rollout.free_cache_engine (vLLM sleep mode): vLLM frees weights and KV cache while training.
    free_cache_engine: bool = True
    rollout_max_num_batched_tokens: int = 8192
    # actor_rollout_ref.rollout.max_num_seqs: vLLM's profiling run samples this many sequences
    # (VLLM_MAX_NUM_SEQS_DEFAULT has verl's default per ref).
    rollout_max_num_seqs: int = 1024
    logprob_impl: LogprobImpl = "fused"
    # CUDA context, NCCL buffers and cuBLAS workspaces outside PyTorch's allocator: 1.57 GiB per
    # process measured on an H200 pair (bench/memory_fit_gpu.py, non_torch_gib).
    fixed_overhead_gib: float = 2.0
    # The caching allocator's reserved-but-free memory, as a fraction of the allocated peak.
    # Measured reserved/allocated on H200: 1.06-1.16 with PYTORCH_CUDA_ALLOC_CONF=
    # expandable_segments:True, 1.05-1.31 with the default allocator.
    fragmentation_fraction: float = 0.10

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def sequence_length(self) -> int:
        return self.max_prompt_length + self.max_response_length

    @property
    def train_tokens(self) -> int:
        if self.use_dynamic_bsz:
            return max(self.max_token_len_per_gpu, self.sequence_length)
        return self.micro_batch_size_per_gpu * self.sequence_length

    @property
    def log_prob_tokens(self) -> int:
        if self.use_dynamic_bsz:
            return max(self.log_prob_max_token_len_per_gpu, self.sequence_length)
        return self.log_prob_micro_batch_size_per_gpu * self.sequence_length


@dataclass(frozen=True)
class Item:
    label: str
    gib: float
    # Allocated through PyTorch's caching allocator, so subject to its fragmentation. vLLM's
    # reservation is a fixed budget it carves up itself.
    fragments: bool = True


@dataclass(frozen=True)
class PhaseEstimate:
    name: str
    items: tuple[Item, ...]

    @property
    def allocated_gib(self) -> float:
        """What torch.cuda.max_memory_allocated would report (no fixed overhead, no
        fragmentation); vLLM's reservation counts in full."""
        return sum(i.gib for i in self.items if not i.label.startswith("overhead"))

    @property
    def total_gib(self) -> float:
        return sum(i.gib for i in self.items)


@dataclass(frozen=True)
class MemoryBreakdown:
    inputs: GrpoMemoryInputs
    phases: tuple[PhaseEstimate, ...]
    # vLLM: KV-cache room left inside its reservation, and what one full-length sequence needs.
    kv_cache_gib: float
    kv_cache_needed_gib: float

    def phase(self, name: str) -> PhaseEstimate:
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def peak(self) -> PhaseEstimate:
        return max(self.phases, key=lambda p: p.total_gib)


class MemoryFitError(ValueError):
    """The configuration cannot fit; the message names the phase, the numbers and the fixes."""

    def __init__(self, message: str, breakdown: MemoryBreakdown) -> None:
        super().__init__(message)
        self.breakdown = breakdown


def layer_activation_bytes_per_token(arch: ModelArch) -> int:
    """Bytes one decoder layer saves for backward per token, bf16 compute, no checkpointing.

    Hugging Face Qwen2/Llama layer with SDPA flash attention (counted tensor by tensor with
    torch.autograd.graph.saved_tensors_hooks):
    - each RMSNorm: its fp32 upcast (4h), the normalised bf16 value (2h), its output (2h)
      (Gemma's differ: _norm_bytes_per_token; Qwen3's and Gemma 3's q/k norms:
      _qk_norm_bytes_per_token);
    - rotated q and k, v (RoPE's multiplications save cos/sin, not q/k), the attention output,
      which is also o_proj's input, and the fp32 logsumexp per head;
    - MLP: gate, SiLU(gate), up and their product (4 x 2I).
    """
    q, kv, inter = arch.q_size, arch.kv_size, arch.intermediate_size
    norms = _norm_bytes_per_token(arch) + _qk_norm_bytes_per_token(arch)
    attention = BF16 * (2 * q + 2 * kv)
    lse = FP32 * arch.num_attention_heads
    mlp = 4 * BF16 * inter
    return norms + attention + lse + mlp


def _norm_bytes_per_token(arch: ModelArch) -> int:
    """What a layer's RMSNorms save per token. Qwen2/Llama: the fp32 upcast, the bf16 normalised
    value and the bf16 output (8h each). Gemma 2/3 (four norms): the weight is applied in fp32
    as x * (1 + w) before the cast, so each saves its fp32 input and fp32 normalised value; the
    two pre-norms' bf16 outputs feed projections (saved), the two post-norms' feed residual adds
    (not saved): 2 x 10h + 2 x 8h (Gemma2RMSNorm; measured on H200, docs/memory-and-fabric.md).
    Every norm also keeps its fp32 rsqrt, one per token."""
    h = arch.hidden_size
    rsqrt = arch.norms_per_layer * FP32
    if arch.norms_per_layer == 4:
        return 2 * (2 * FP32 * h + BF16 * h) + 2 * (2 * FP32 * h) + rsqrt
    return arch.norms_per_layer * (FP32 * h + BF16 * h + BF16 * h) + rsqrt


def _qk_norm_bytes_per_token(arch: ModelArch) -> int:
    """What q_norm and k_norm (an RMSNorm over head_dim, applied per head before RoPE) save per
    token: for every element of q and k, the fp32 upcast (kept by pow and by the multiply with
    rsqrt) and the normalised value before the weight, bf16 in Qwen3RMSNorm (weight *
    x.to(bf16)) and fp32 in Gemma3RMSNorm (x * (1 + weight) in fp32); plus rsqrt's fp32 output,
    one per head. Their output only feeds RoPE, whose multiplications save cos and sin, so it is
    not saved. Sources: modeling_qwen3.py Qwen3RMSNorm / Qwen3Attention.forward and
    modeling_gemma3.py Gemma3RMSNorm / Gemma3Attention.forward, transformers 5.17.0 (the GPU
    bench's) and 4.57.1 (verl 0.6.1's), identical; counted with
    torch.autograd.graph.saved_tensors_hooks on CPU: 6 (Qwen3) and 8 (Gemma 3) bytes per element
    of q and k, + 4 per head."""
    if not arch.qk_norm:
        return 0
    normalised = FP32 if arch.norms_per_layer == 4 else BF16
    heads = arch.num_attention_heads + arch.num_key_value_heads
    return (FP32 + normalised) * (arch.q_size + arch.kv_size) + FP32 * heads


def _softcap_bytes(arch: ModelArch) -> int:
    return BF16 if arch.final_logit_softcapping else 0


def _layer_backward_transient_bytes_per_token(arch: ModelArch) -> int:
    # Gradients alive while one layer back-propagates: the MLP's (3 x 2I) and the residual's.
    return 3 * BF16 * arch.intermediate_size + 2 * BF16 * arch.hidden_size


def _gib(n_bytes: float) -> float:
    return n_bytes / GIB


def _overheads(allocated_gib: float, inputs: GrpoMemoryInputs) -> tuple[Item, ...]:
    return (
        Item("overhead: fragmentation", allocated_gib * inputs.fragmentation_fraction),
        Item("overhead: CUDA context, NCCL, workspaces", inputs.fixed_overhead_gib),
        Item(
            f"overhead: margin, the estimate's measured error ({ESTIMATE_MARGIN:.0%})",
            allocated_gib * ESTIMATE_MARGIN,
        ),
    )


def _phase(name: str, items: list[Item], inputs: GrpoMemoryInputs) -> PhaseEstimate:
    kept = [i for i in items if i.gib > 0]
    allocated = sum(i.gib for i in kept if i.fragments)
    return PhaseEstimate(name, tuple(kept) + _overheads(allocated, inputs))


def _vllm_reservation_gib(inputs: GrpoMemoryInputs) -> float:
    return inputs.gpu_memory_utilization * inputs.gpu_memory_gib


def _vllm_weights_gib(inputs: GrpoMemoryInputs) -> float:
    return _gib(BF16 * inputs.model.num_params / inputs.rollout_tp)


def _vllm_activation_gib(inputs: GrpoMemoryInputs) -> float:
    # vLLM's profiling run: the widest tensors of one layer for max_num_batched_tokens (MLP
    # gate+up output and its activation, sharded by TP) plus sampler logits in fp32 for its
    # dummy requests, min(max_num_batched_tokens, max_num_seqs) of them (vLLM's GPU model runner
    # _dummy_run), plus ~1 GiB of CUDA graphs.
    arch = inputs.model
    tokens = inputs.rollout_max_num_batched_tokens
    mlp = tokens * 3 * BF16 * arch.intermediate_size / inputs.rollout_tp
    requests = min(tokens, inputs.rollout_max_num_seqs)
    logits = requests * arch.vocab_size * FP32 * 2
    return _gib(mlp + logits) + 1.0


def _kv_bytes_per_token(inputs: GrpoMemoryInputs) -> float:
    arch = inputs.model
    # KV heads are split over TP; with fewer KV heads than TP ranks vLLM replicates them.
    kv_heads_per_rank = max(1, math.ceil(arch.num_key_value_heads / inputs.rollout_tp))
    return 2 * arch.num_hidden_layers * kv_heads_per_rank * arch.head_size * BF16


@dataclass(frozen=True)
class _Resident:
    """Per-GPU memory every phase starts from, in GiB (sharded FSDP state, the reference model,
    FSDP's unsharded buffers, what vLLM keeps)."""

    # Sharded FSDP state: fp32 master weights, fp32 grads, AdamW exp_avg + exp_avg_sq.
    shard_params: float
    shard_grads: float
    shard_adam: float
    ref_shard: float
    ref_resident: float
    # False when an offload policy keeps the actor's states off the GPU.
    on_gpu_states: bool
    root_unsharded: float
    fwd_layer_buffers: float
    # Bytes, per layer: bf16 gather + grads and the fp32 reduce-scatter copy.
    bwd_layer_buffers: float
    vllm_item: Item


def _resident(inputs: GrpoMemoryInputs) -> _Resident:
    arch = inputs.model
    n = inputs.n_gpus
    # LoRA: PEFT freezes the base weights (requires_grad False), so only the adapter gets
    # gradients, and torch's AdamW keeps state only for parameters that have one (verl's
    # build_optimizer passes every parameter: fsdp_workers.py v0.6.1, transformer_impl.py
    # _build_optimizer 0.9.0). The actor keeps base and adapter in fp32 (model_dtype).
    params = arch.num_params + inputs.lora_adapter_params
    trained = inputs.lora_adapter_params or arch.num_params
    ref_shard = _gib(inputs.ref_dtype_bytes * params / n) if inputs.use_reference else 0.0
    # bf16 all-gather buffers: FSDP2 keeps the root unit (final norm + lm_head, or the tied
    # embedding) unsharded through forward and backward; layers are gathered one at a time with
    # one prefetched. Backward adds the layer's bf16 grads and their fp32 reduce-scatter copy.
    layer = arch.layer_params
    vllm_resident = 0.0 if inputs.free_cache_engine else _vllm_reservation_gib(inputs)
    return _Resident(
        shard_params=_gib(FP32 * params / n),
        shard_grads=_gib(FP32 * trained / n),
        shard_adam=_gib(2 * FP32 * trained / n),
        ref_shard=ref_shard,
        ref_resident=0.0 if inputs.ref_param_offload else ref_shard,
        on_gpu_states=not inputs.offload_policy,
        root_unsharded=_gib(BF16 * arch.root_params),
        fwd_layer_buffers=_gib(3 * BF16 * layer),
        bwd_layer_buffers=(3 * BF16 + FP32) * layer,
        vllm_item=Item(
            "vLLM reservation kept during training (free_cache_engine=False)",
            vllm_resident,
            fragments=False,
        ),
    )


def _actor_update_phase(inputs: GrpoMemoryInputs, r: _Resident) -> PhaseEstimate:
    arch = inputs.model
    tokens = inputs.train_tokens
    per_layer = layer_activation_bytes_per_token(arch)
    final_norm = 2 * (FP32 * arch.hidden_size + BF16 * arch.hidden_size)
    logits_train = (
        _LOGITS_BYTES_TRAIN[inputs.logprob_impl] + _softcap_bytes(arch)
    ) * arch.vocab_size
    if inputs.gradient_checkpointing:
        saved = arch.num_hidden_layers * BF16 * arch.hidden_size
        activation_label = "activations: checkpointed layer inputs"
        # Backward re-runs one layer's forward, then back-propagates through it.
        layer_peak = per_layer + _layer_backward_transient_bytes_per_token(arch)
    else:
        saved = arch.num_hidden_layers * per_layer
        activation_label = "activations: all layers saved (no checkpointing)"
        layer_peak = _layer_backward_transient_bytes_per_token(arch)
    # Backward peaks either in the loss (logits and their gradients, with only the last layer
    # gathered ahead) or later in a layer (one layer's activations and gradients, the layer
    # gather/reduce-scatter buffers, and lm_head's unsharded bf16 gradient, which waits for the
    # root's reduce-scatter at the very end). Measured on H200: see the module docstring.
    in_loss = tokens * logits_train + BF16 * arch.layer_params
    in_layer = BF16 * arch.root_params + tokens * layer_peak + r.bwd_layer_buffers
    if in_loss >= in_layer:
        peak_label = "backward peak in the loss: logits + their grads, 1 layer gathered"
    else:
        peak_label = "backward peak in a layer: lm_head grad, 1 layer, FSDP buffers"
    on_gpu = r.on_gpu_states
    items = [
        Item("actor fp32 params (sharded)", r.shard_params if on_gpu else 0.0),
        Item("actor fp32 grads (sharded)", r.shard_grads if on_gpu else 0.0),
        Item("actor AdamW states (sharded)", r.shard_adam if on_gpu else 0.0),
        Item("ref params (sharded, resident)", r.ref_resident),
        Item("bf16 root unit unsharded (lm_head/embedding)", r.root_unsharded),
        Item(f"{activation_label} ({tokens} tokens)", _gib(tokens * (saved + final_norm))),
        Item(peak_label, _gib(max(in_loss, in_layer))),
        r.vllm_item,
    ]
    return _phase("actor_update", items, inputs)


def _optimizer_step_phase(inputs: GrpoMemoryInputs, r: _Resident) -> PhaseEstimate:
    if not r.on_gpu_states:
        return _phase("optimizer_step", [r.vllm_item], inputs)
    items = [
        Item("actor fp32 params (sharded)", r.shard_params),
        Item("actor fp32 grads (sharded)", r.shard_grads),
        Item("actor AdamW states (sharded)", r.shard_adam),
        # torch's foreach AdamW materialises sqrt(exp_avg_sq) for every trained parameter.
        Item("AdamW foreach temporaries", r.shard_grads),
        Item("ref params (sharded, resident)", r.ref_resident),
        r.vllm_item,
    ]
    return _phase("optimizer_step", items, inputs)


def _log_prob_phase(inputs: GrpoMemoryInputs, r: _Resident) -> PhaseEstimate:
    """Old-policy and reference log-probs: forward only."""
    arch = inputs.model
    lp_tokens = inputs.log_prob_tokens
    actor_params_lp = r.shard_params if r.on_gpu_states else 0.0
    adam_lp = r.shard_adam if (r.on_gpu_states and not inputs.optimizer_offload) else 0.0
    lp_activations = _gib(
        lp_tokens
        * (
            (_LOGITS_BYTES_FORWARD[inputs.logprob_impl] + _softcap_bytes(arch)) * arch.vocab_size
            + 4 * BF16 * arch.intermediate_size
        )
    )
    # When the ref log-probs run, verl loads the ref even if it is offloaded; the actor's params
    # are resident unless param_offload moved them out.
    actor_params_during_ref = 0.0 if inputs.param_offload or not r.on_gpu_states else r.shard_params
    worst_params = max(actor_params_lp + r.ref_resident, actor_params_during_ref + r.ref_shard)
    items = [
        Item("actor/ref params (sharded, worst of the two passes)", worst_params),
        Item("actor AdamW states (sharded, unless optimizer_offload)", adam_lp),
        Item("bf16 root unit unsharded (lm_head/embedding)", r.root_unsharded),
        Item("FSDP layer gather buffers", r.fwd_layer_buffers),
        Item(f"activations + logits, no grad ({lp_tokens} tokens)", lp_activations),
        r.vllm_item,
    ]
    return _phase("log_prob", items, inputs)


def _rollout_phase(inputs: GrpoMemoryInputs, r: _Resident) -> PhaseEstimate:
    trainer_rollout = 0.0
    if r.on_gpu_states and not inputs.param_offload:
        trainer_rollout += r.shard_params
    if r.on_gpu_states and not inputs.optimizer_offload:
        trainer_rollout += r.shard_adam
    items = [
        Item("actor state kept during rollout (params/AdamW not offloaded)", trainer_rollout),
        Item("ref params (sharded, resident)", r.ref_resident),
        Item(
            f"vLLM reservation: gpu_memory_utilization {inputs.gpu_memory_utilization} x "
            f"{inputs.gpu_memory_gib} GiB",
            _vllm_reservation_gib(inputs),
            fragments=False,
        ),
    ]
    return _phase("rollout", items, inputs)


def estimate(inputs: GrpoMemoryInputs) -> MemoryBreakdown:
    """Per-GPU memory of each GRPO phase, in GiB."""
    _validate(inputs)
    resident = _resident(inputs)
    kv_cache = (
        _vllm_reservation_gib(inputs) - _vllm_weights_gib(inputs) - _vllm_activation_gib(inputs)
    )
    return MemoryBreakdown(
        inputs=inputs,
        phases=(
            _rollout_phase(inputs, resident),
            _log_prob_phase(inputs, resident),
            _actor_update_phase(inputs, resident),
            _optimizer_step_phase(inputs, resident),
        ),
        kv_cache_gib=kv_cache,
        kv_cache_needed_gib=_gib(_kv_bytes_per_token(inputs) * inputs.sequence_length),
    )


def _validate(inputs: GrpoMemoryInputs) -> None:
    positive = {
        "gpu_memory_gib": inputs.gpu_memory_gib,
        "gpus_per_node": inputs.gpus_per_node,
        "nodes": inputs.nodes,
        "micro_batch_size_per_gpu": inputs.micro_batch_size_per_gpu,
        "log_prob_micro_batch_size_per_gpu": inputs.log_prob_micro_batch_size_per_gpu,
        "max_prompt_length": inputs.max_prompt_length,
        "max_response_length": inputs.max_response_length,
        "rollout_tp": inputs.rollout_tp,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ValueError(f"memory estimate: {key} is {value}; it must be positive (e.g. 1)")
    if not 0.0 < inputs.gpu_memory_utilization < 1.0:
        raise ValueError(
            f"memory estimate: gpu_memory_utilization is {inputs.gpu_memory_utilization}; it is a "
            "fraction of the whole GPU between 0 and 1 (e.g. 0.4)"
        )
    if inputs.ref_dtype_bytes not in (BF16, FP32):
        raise ValueError(
            f"memory estimate: ref_dtype_bytes is {inputs.ref_dtype_bytes}; use 2 (bf16) or 4 "
            "(fp32)"
        )


# --- fit check -----------------------------------------------------------------------------

_MAX_NODES_TRIED = 64
# How the node-count fix begins; the caller names its own setting for it.
NODES_FIX = "more GPU nodes: nodes="


@dataclass(frozen=True)
class MemoryFix:
    """One knob's change that makes every phase fit: `change` in GrpoMemoryInputs fields (what a
    caller maps to settings to judge it by every other rule), `text` in verl's Hydra keys."""

    text: str
    change: Mapping[str, object]


# Judges a fix by every other rule (the whole preflight); True when the changed stack is taken.
FixAcceptor = Callable[[MemoryFix], bool]


def _fits(inputs: GrpoMemoryInputs) -> bool:
    b = estimate(inputs)
    if b.kv_cache_gib < b.kv_cache_needed_gib:
        return False
    return all(p.total_gib <= inputs.gpu_memory_gib for p in b.phases)


def _nodes_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    for nodes in range(inputs.nodes + 1, _MAX_NODES_TRIED + 1):
        yield MemoryFix(
            f"{NODES_FIX}{nodes} ({nodes * inputs.gpus_per_node} GPUs) shards the FSDP state "
            "thinner",
            {"nodes": nodes},
        )


def _micro_batch_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    if inputs.use_dynamic_bsz:
        tokens = inputs.max_token_len_per_gpu // 2
        while tokens >= inputs.sequence_length:
            yield MemoryFix(
                f"smaller actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tokens}",
                {"max_token_len_per_gpu": tokens},
            )
            tokens //= 2
        return
    for micro in range(inputs.micro_batch_size_per_gpu - 1, 0, -1):
        yield MemoryFix(
            f"smaller actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
            {"micro_batch_size_per_gpu": micro},
        )


def _log_prob_micro_batch_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    if inputs.use_dynamic_bsz:
        return
    for micro in range(inputs.log_prob_micro_batch_size_per_gpu - 1, 0, -1):
        yield MemoryFix(
            f"smaller actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro} and "
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
            {"log_prob_micro_batch_size_per_gpu": micro},
        )


def _utilization_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    util = round(inputs.gpu_memory_utilization - 0.05, 2)
    while util >= 0.05:
        yield MemoryFix(
            f"lower actor_rollout_ref.rollout.gpu_memory_utilization={util}",
            {"gpu_memory_utilization": util},
        )
        util = round(util - 0.05, 2)


def _tp_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    tp = inputs.rollout_tp * 2
    while tp <= inputs.gpus_per_node:
        if inputs.model.num_attention_heads % tp == 0:
            yield MemoryFix(
                f"larger actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
                {"rollout_tp": tp},
            )
        tp *= 2


def _response_length_fixes(inputs: GrpoMemoryInputs) -> Iterator[MemoryFix]:
    """The longest response lengths, halving from the requested one (powers of two below it
    when it is one), as data.max_response_length (its config key after in_config_terms)."""
    length = 1 << (inputs.max_response_length.bit_length() - 1)
    if length == inputs.max_response_length:
        length //= 2
    while length >= 1:
        yield MemoryFix(
            f"shorter data.max_response_length={length}", {"max_response_length": length}
        )
        length //= 2


_FLAG_FIXES: tuple[MemoryFix, ...] = (
    MemoryFix(
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        {"gradient_checkpointing": True},
    ),
    MemoryFix("actor_rollout_ref.ref.fsdp_config.param_offload=True", {"ref_param_offload": True}),
    MemoryFix(
        "actor_rollout_ref.actor.fsdp_config.param_offload=True and "
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True (offloaded while vLLM "
        "generates)",
        {"param_offload": True, "optimizer_offload": True},
    ),
    MemoryFix(
        "actor_rollout_ref.actor.fsdp_config.offload_policy=True (FSDP2 CPU offload, a slower "
        "update that needs ~16 bytes/param of host RAM per node)",
        {"offload_policy": True},
    ),
)


def _flag_fixes(inputs: GrpoMemoryInputs) -> list[Iterator[MemoryFix]]:
    return [
        iter([fix])
        for fix in _FLAG_FIXES
        if not all(getattr(inputs, k) == v for k, v in fix.change.items())
    ]


def suggest_fixes(inputs: GrpoMemoryInputs, accept: FixAcceptor | None = None) -> list[MemoryFix]:
    """Single-knob changes, each of which alone makes every phase fit: per knob the first
    candidate that fits and that `accept` (every other rule) takes."""
    knobs = [
        *_flag_fixes(inputs),
        _micro_batch_fixes(inputs),
        _log_prob_micro_batch_fixes(inputs),
        _utilization_fixes(inputs),
        _tp_fixes(inputs),
        _nodes_fixes(inputs),
        _response_length_fixes(inputs),
    ]
    fixes = []
    for candidates in knobs:
        for fix in candidates:
            if _fits(replace(inputs, **fix.change)) and (accept is None or accept(fix)):
                fixes.append(fix)
                break
    return fixes


def check_fit(
    inputs: GrpoMemoryInputs, profile_name: str = "", accept: FixAcceptor | None = None
) -> str | None:
    """Raises MemoryFitError when a phase cannot fit on the GPU, with the fixes `accept` takes;
    returns a warning string when the tightest phase is within 10 % of the limit, else None."""
    breakdown = estimate(inputs)
    limit = inputs.gpu_memory_gib
    gpu = f"the {profile_name} GPU" if profile_name else "the GPU"
    problems = [
        f"phase {p.name!r} needs {p.total_gib:.1f} GiB per GPU but {gpu} has {limit:g} GiB"
        for p in breakdown.phases
        if p.total_gib > limit
    ]
    if breakdown.kv_cache_gib < breakdown.kv_cache_needed_gib:
        problems.append(
            f"vLLM's reservation leaves {max(breakdown.kv_cache_gib, 0.0):.1f} GiB of KV cache "
            f"per GPU, less than the {breakdown.kv_cache_needed_gib:.2f} GiB one "
            f"{inputs.sequence_length}-token sequence needs"
        )
    if problems:
        fixes = suggest_fixes(inputs, accept)
        fix_text = (
            "; ".join(fix.text for fix in fixes)
            if fixes
            else "no single knob is enough: combine offload with more nodes or shorter sequences"
        )
        raise MemoryFitError(
            f"GRPO memory-fit ({inputs.model.name}, {inputs.n_gpus} GPUs, sequences of "
            f"data.max_prompt_length={inputs.max_prompt_length} + "
            f"data.max_response_length={inputs.max_response_length} tokens): "
            + "; ".join(problems)
            + f". Fixes, each enough on its own: {fix_text}.\n"
            + format_breakdown(breakdown),
            breakdown,
        )
    peak = breakdown.peak
    if peak.total_gib > WARN_FRACTION * limit:
        return (
            f"GRPO memory-fit ({inputs.model.name}): phase {peak.name!r} needs "
            f"{peak.total_gib:.1f} of {limit:g} GiB per GPU ({peak.total_gib / limit:.0%}); "
            "allocator fragmentation or a library upgrade may push it over (set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to keep fragmentation low)"
        )
    return None


def format_breakdown(breakdown: MemoryBreakdown) -> str:
    """A plain-text table of every phase's items, for the plan command."""
    inputs = breakdown.inputs
    arch = inputs.model
    lines = [
        f"GRPO memory per GPU: {arch.name} ({arch.num_params / 1e9:.2f} B params), "
        f"{inputs.nodes} x {inputs.gpus_per_node} GPUs of {inputs.gpu_memory_gib:g} GiB, "
        f"train micro-batch {inputs.train_tokens} tokens, rollout TP {inputs.rollout_tp}",
    ]
    width = max(len(i.label) for p in breakdown.phases for i in p.items) + 2
    for p in breakdown.phases:
        share = p.total_gib / inputs.gpu_memory_gib
        lines.append(f"  {p.name}: {p.total_gib:7.1f} GiB ({share:.0%})")
        for item in p.items:
            lines.append(f"    {item.label:<{width}}{item.gib:7.1f}")
    lines.append(
        f"  vLLM KV cache per GPU: {breakdown.kv_cache_gib:.1f} GiB "
        f"(one {inputs.sequence_length}-token sequence needs {breakdown.kv_cache_needed_gib:.2f})"
    )
    return "\n".join(lines)

"""The GRPO memory-fit estimator (training/memory_fit.py): arithmetic on hand-computable cases and
the check's failure and warning paths."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from config.profiles import PROFILES, Mode
from config.settings import load_settings
from tests.program import REAL
from training.assembly import TrainingJob, memory_fit_inputs, training_job
from training.grpo_spec import GrpoPreflightError, apply_overrides, default_grpo_spec
from training.memory_fit import (
    GIB,
    VLLM_MAX_NUM_SEQS_DEFAULT,
    GrpoMemoryInputs,
    MemoryBreakdown,
    MemoryFitError,
    MemoryFix,
    ModelArch,
    check_fit,
    estimate,
    format_breakdown,
    layer_activation_bytes_per_token,
    lora_params,
    suggest_fixes,
)
from training.model_facts import table_facts

QWEN_32B = table_facts("Qwen/Qwen2.5-32B-Instruct").arch
TINY = ModelArch("tiny", 64, 128, 2, 4, 2, 1000, False)

# The official verl example examples/grpo_trainer/run_qwen2_5_32b_fsdp.sh on 2 x 8 H200.
OFFICIAL_32B = GrpoMemoryInputs(
    model=QWEN_32B,
    gpu_memory_gib=141,
    gpus_per_node=8,
    nodes=2,
    micro_batch_size_per_gpu=2,
    max_prompt_length=1024,
    max_response_length=1024,
    log_prob_micro_batch_size_per_gpu=2,
    rollout_tp=8,
    gpu_memory_utilization=0.4,
    ref_param_offload=True,
)


def item(inputs: GrpoMemoryInputs, phase: str, prefix: str) -> float:
    matches = [i.gib for i in estimate(inputs).phase(phase).items if i.label.startswith(prefix)]
    assert len(matches) == 1, (phase, prefix, matches)
    return matches[0]


def test_qwen25_32b_parameter_count_is_32_8_billion() -> None:
    assert QWEN_32B.num_params == pytest.approx(32.8e9, rel=0.01)
    # Hand count: per layer q/o 5120x5120, k/v 5120x1024 (+ biases), MLP 3 x 5120 x 27648, two
    # norms; untied embedding and lm_head 152064 x 5120; final norm.
    layer = 2 * 5120 * 5120 + 2 * 5120 * 1024 + (5120 + 2 * 1024) + 3 * 5120 * 27648 + 2 * 5120
    assert QWEN_32B.num_params == 64 * layer + 2 * 152064 * 5120 + 5120


def test_tied_small_models_count_the_embedding_once() -> None:
    small = table_facts("Qwen/Qwen2.5-0.5B-Instruct").arch
    assert small.num_params == pytest.approx(0.494e9, rel=0.01)
    untied = replace(small, tie_word_embeddings=False)
    assert untied.num_params - small.num_params == small.embedding_params


def test_fp32_master_weights_and_adam_are_12_bytes_per_param_sharded_over_ranks() -> None:
    params = QWEN_32B.num_params
    for nodes in (1, 2, 4):
        inputs = replace(OFFICIAL_32B, nodes=nodes)
        n = 8 * nodes
        master = item(inputs, "actor_update", "actor fp32 params")
        adam = item(inputs, "actor_update", "actor AdamW states")
        grads = item(inputs, "actor_update", "actor fp32 grads")
        assert (master + adam) * GIB == pytest.approx(12 * params / n)
        assert grads * GIB == pytest.approx(4 * params / n)


def test_optimizer_step_adds_one_fp32_copy_for_foreach_adamw() -> None:
    step = estimate(OFFICIAL_32B).phase("optimizer_step")
    states = 16 * QWEN_32B.num_params / 16 / GIB
    assert step.allocated_gib == pytest.approx(states + 4 * QWEN_32B.num_params / 16 / GIB)


def test_layer_activation_bytes_by_hand() -> None:
    # h=64, q=64, kv=32 (2 heads of 16), I=128, 4 heads:
    # norms 2 x (4+2+2) x 64 = 1024 and their fp32 rsqrt 2 x 4 = 8; q,k,v and attention output
    # 2 x (2x64 + 2x32) = 384; logsumexp 4 x 4 = 16; MLP 4 x 2 x 128 = 1024.
    assert layer_activation_bytes_per_token(TINY) == 1024 + 8 + 384 + 16 + 1024
    # Qwen3-style q/k norms: fp32 upcast + bf16 normalised value (6 bytes) per element of q (64)
    # and k (32), and a 4-byte rsqrt per head (4 + 2); Gemma-3-style keep the normalised value
    # in fp32 (8 bytes).
    qwen3_like = replace(TINY, qk_norm=True)
    assert (
        layer_activation_bytes_per_token(qwen3_like) - layer_activation_bytes_per_token(TINY)
        == 6 * (64 + 32) + 4 * 6
    )
    gemma2_like = replace(TINY, norms_per_layer=4)
    gemma3_like = replace(gemma2_like, qk_norm=True)
    assert (
        layer_activation_bytes_per_token(gemma3_like)
        - layer_activation_bytes_per_token(gemma2_like)
        == 8 * (64 + 32) + 4 * 6
    )


def test_checkpointing_keeps_only_layer_inputs_and_lowers_the_update_peak() -> None:
    with_ckpt = replace(OFFICIAL_32B, gradient_checkpointing=True)
    without = replace(OFFICIAL_32B, gradient_checkpointing=False)
    tokens = 2 * 2048
    final_norm = 2 * (4 + 2) * 5120
    saved_ckpt = item(with_ckpt, "actor_update", "activations: checkpointed")
    saved_all = item(without, "actor_update", "activations: all layers")
    assert saved_ckpt * GIB == tokens * (64 * 2 * 5120 + final_norm)
    per_layer = layer_activation_bytes_per_token(QWEN_32B)
    assert saved_all * GIB == tokens * (64 * per_layer + final_norm)
    update_ckpt = estimate(with_ckpt).phase("actor_update").allocated_gib
    update_all = estimate(without).phase("actor_update").allocated_gib
    assert update_ckpt < update_all - 50


def test_activations_scale_with_micro_batch_and_sequence_length() -> None:
    base = replace(OFFICIAL_32B, gradient_checkpointing=False)
    doubled_batch = replace(base, micro_batch_size_per_gpu=4)
    doubled_seq = replace(base, max_prompt_length=2048, max_response_length=2048)
    a = item(base, "actor_update", "activations: all layers")
    assert item(doubled_batch, "actor_update", "activations: all layers") == pytest.approx(2 * a)
    assert item(doubled_seq, "actor_update", "activations: all layers") == pytest.approx(2 * a)


def test_dynamic_batch_uses_the_token_budget() -> None:
    dynamic = replace(OFFICIAL_32B, use_dynamic_bsz=True, max_token_len_per_gpu=16384)
    assert dynamic.train_tokens == 16384


def test_rollout_phase_holds_vllm_reservation_and_what_is_not_offloaded() -> None:
    inputs = replace(OFFICIAL_32B, nodes=1)
    rollout = estimate(inputs).phase("rollout")
    reservation = 0.4 * 141
    trainer = 12 * QWEN_32B.num_params / 8 / GIB
    assert rollout.allocated_gib == pytest.approx(reservation + trainer)
    offloaded = replace(inputs, param_offload=True, optimizer_offload=True)
    assert estimate(offloaded).phase("rollout").allocated_gib == pytest.approx(reservation)


def test_reference_model_counts_unless_offloaded() -> None:
    with_ref = replace(OFFICIAL_32B, ref_param_offload=False)
    ref_bf16 = item(with_ref, "actor_update", "ref params")
    assert ref_bf16 * GIB == pytest.approx(2 * QWEN_32B.num_params / 16)
    ref_fp32 = replace(with_ref, ref_dtype_bytes=4)
    assert item(ref_fp32, "actor_update", "ref params") == pytest.approx(2 * ref_bf16)
    no_ref = replace(with_ref, use_reference=False)
    labels = [i.label for i in estimate(no_ref).phase("actor_update").items]
    assert not any(label.startswith("ref params") for label in labels)


def test_official_32b_example_fits_two_h200_nodes_without_warning() -> None:
    assert check_fit(OFFICIAL_32B, "a3u") is None


def fix_value(fixes: list[MemoryFix], key: str) -> int | float:
    [fix] = [f.text for f in fixes if f"{key}=" in f.text]
    text = fix.split(f"{key}=")[1].split()[0]
    return float(text) if "." in text else int(text)


def test_rollout_that_cannot_fit_names_phase_and_fixes() -> None:
    inputs = replace(OFFICIAL_32B, nodes=1, gpu_memory_utilization=0.75)
    with pytest.raises(MemoryFitError) as caught:
        check_fit(inputs, "a3u")
    message = str(caught.value)
    assert "phase 'rollout'" in message
    assert "a3u GPU has 141 GiB" in message
    # The breakdown is in the message and on the exception.
    assert "vLLM reservation" in message
    assert caught.value.breakdown.phase("rollout").total_gib > 141
    fixes = suggest_fixes(inputs)
    assert all(fix.text in message for fix in fixes)
    assert any(
        "param_offload=True and" in f.text and "optimizer_offload=True" in f.text for f in fixes
    )
    utilization = fix_value(fixes, "gpu_memory_utilization")
    nodes = fix_value(fixes, "nodes")
    # Each suggested value fits, and the next step beyond it does not.
    check_fit(replace(inputs, gpu_memory_utilization=utilization))  # raises if it does not fit
    with pytest.raises(MemoryFitError):
        check_fit(replace(inputs, gpu_memory_utilization=round(utilization + 0.05, 2)))
    estimate_at = estimate(replace(inputs, nodes=int(nodes)))
    assert all(p.total_gib <= 141 for p in estimate_at.phases)
    with pytest.raises(MemoryFitError):
        check_fit(replace(inputs, nodes=int(nodes) - 1))


def test_update_that_cannot_fit_suggests_checkpointing_and_smaller_micro_batch() -> None:
    inputs = replace(OFFICIAL_32B, gradient_checkpointing=False, micro_batch_size_per_gpu=16)
    with pytest.raises(MemoryFitError) as caught:
        check_fit(inputs)
    message = str(caught.value)
    assert "phase 'actor_update'" in message
    assert "enable_gradient_checkpointing=True" in message
    micro = fix_value(suggest_fixes(inputs), "ppo_micro_batch_size_per_gpu")
    assert 1 <= micro < 16
    fitting = estimate(replace(inputs, micro_batch_size_per_gpu=int(micro)))
    assert fitting.phase("actor_update").total_gib <= 141
    over = estimate(replace(inputs, micro_batch_size_per_gpu=int(micro) + 1))
    assert over.phase("actor_update").total_gib > 141


def test_vllm_without_room_for_kv_cache_suggests_larger_tp() -> None:
    inputs = replace(OFFICIAL_32B, rollout_tp=1, gpu_memory_utilization=0.4)
    breakdown = estimate(inputs)
    assert breakdown.kv_cache_gib < breakdown.kv_cache_needed_gib
    with pytest.raises(MemoryFitError, match="tensor_model_parallel_size=2"):
        check_fit(inputs)


def test_within_ten_percent_of_the_limit_warns() -> None:
    base = replace(OFFICIAL_32B, nodes=1)
    in_band = []
    for percent in range(5, 95):
        candidate = replace(base, gpu_memory_utilization=percent / 100)
        share = estimate(candidate).peak.total_gib / candidate.gpu_memory_gib
        if 0.9 < share <= 1.0 and estimate(candidate).kv_cache_gib > 1:
            in_band.append(candidate)
    assert in_band, "some utilisation must land the peak within 10 % of the limit"
    warning = check_fit(in_band[0], "a3u")
    assert warning is not None
    assert "of 141 GiB per GPU" in warning
    assert "expandable_segments" in warning


def test_format_breakdown_lists_every_phase() -> None:
    text = format_breakdown(estimate(OFFICIAL_32B))
    assert "Qwen/Qwen2.5-32B-Instruct (32.76 B params)" in text
    for phase in ("rollout:", "log_prob:", "actor_update:", "optimizer_step:"):
        assert phase in text
    assert "vLLM KV cache per GPU" in text


def test_invalid_inputs_name_the_setting() -> None:
    with pytest.raises(ValueError, match=r"gpu_memory_utilization is 1\.2"):
        estimate(replace(OFFICIAL_32B, gpu_memory_utilization=1.2))
    with pytest.raises(ValueError, match="micro_batch_size_per_gpu is 0"):
        estimate(replace(OFFICIAL_32B, micro_batch_size_per_gpu=0))


def test_vllm_profiles_min_of_max_num_seqs_and_batched_tokens_requests() -> None:
    # vLLM's profiling run (gpu_model_runner _dummy_run) samples
    # num_reqs = min(max_num_batched_tokens, max_num_seqs) sequences.
    kv_room = {
        seqs: estimate(replace(OFFICIAL_32B, rollout_max_num_seqs=seqs)).kv_cache_gib
        for seqs in (256, 1024, 8192, 16384)
    }
    assert kv_room[256] > kv_room[1024] > kv_room[8192]
    assert kv_room[16384] == kv_room[8192]  # max_num_batched_tokens is 8192


def test_the_job_reads_max_num_seqs_from_extra_overrides_else_verls_default() -> None:
    # verl passes actor_rollout_ref.rollout.max_num_seqs to vLLM (vllm_rollout_spmd.py and
    # vllm_async_server.py, v0.6.1; vllm_async_server.py, ddbcdb7).
    for name in ("a4", "a4x"):
        profile = PROFILES[name]
        spec = default_grpo_spec(profile, Mode.STANDARD, profile.default_gpu_nodes)
        default = memory_fit_inputs(spec, profile, QWEN_32B).rollout_max_num_seqs
        assert default == VLLM_MAX_NUM_SEQS_DEFAULT[profile.verl_ref]
        given = ["actor_rollout_ref.rollout.max_num_seqs=96"]
        spec = apply_overrides(spec, {"extraOverrides": given})
        assert memory_fit_inputs(spec, profile, QWEN_32B).rollout_max_num_seqs == 96


# --- LoRA ----------------------------------------------------------------------------------------
# verl's facts behind the LoRA terms (test_verl_builds_no_reference_model_for_lora reads them):
# with lora_rank > 0 the reference log-probs come from the actor with its adapter disabled
# (ref_in_actor), and PEFT freezes the base, so grads and AdamW states exist for the adapter only.


def test_lora_params_count_lora_a_and_b_of_each_targeted_linear() -> None:
    h, i, q, kv, layers = 64, 128, 64, 32, 2  # TINY: 4 heads of 16, 2 KV heads
    assert lora_params(TINY, 8, ("q_proj", "v_proj")) == layers * 8 * ((h + q) + (h + kv))
    every = layers * 8 * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    assert lora_params(TINY, 8, None) == every
    # A module name that is no decoder-layer linear counts as all-linear (an upper bound).
    assert lora_params(TINY, 8, ("q_proj", "lm_head")) == every


def test_lora_has_no_reference_model_and_trains_only_the_adapter() -> None:
    adapter = lora_params(QWEN_32B, 32, None)
    full = estimate(OFFICIAL_32B)
    lora = estimate(replace(OFFICIAL_32B, use_reference=False, lora_adapter_params=adapter))
    n = OFFICIAL_32B.n_gpus

    def item(breakdown: MemoryBreakdown, phase: str, label: str) -> float:
        (found,) = [i.gib for i in breakdown.phase(phase).items if i.label == label]
        return found

    grads, adam = "actor fp32 grads (sharded)", "actor AdamW states (sharded)"
    assert item(lora, "optimizer_step", grads) == pytest.approx(4 * adapter / n / GIB)
    assert item(lora, "optimizer_step", adam) == pytest.approx(8 * adapter / n / GIB)
    params = "actor fp32 params (sharded)"
    base_and_adapter = 4 * (QWEN_32B.num_params + adapter) / n / GIB
    assert item(lora, "optimizer_step", params) == pytest.approx(base_and_adapter)
    assert not [i for i in lora.phase("log_prob").items if i.label.startswith("ref params")]
    assert lora.peak.total_gib < full.peak.total_gib


def test_a_lora_job_full_training_cannot_fit_is_accepted() -> None:
    def job(*extra: str) -> TrainingJob:
        values = {
            **REAL,
            "verl-gke:mode": "standard",
            "verl-gke:model": "Qwen/Qwen2.5-72B-Instruct",
            "verl-gke:gpuNodes": "1",
            "verl-gke:job": json.dumps({"extraOverrides": list(extra)}),
        }
        return training_job(load_settings("a3u", values, offline=False).settings)

    with pytest.raises(GrpoPreflightError, match="GRPO memory-fit"):
        job()
    lora = job("actor_rollout_ref.model.lora_rank=32")
    assert lora.memory.peak.total_gib < lora.memory.inputs.gpu_memory_gib
    assert not lora.memory.inputs.use_reference

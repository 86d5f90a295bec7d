"""Steps 1b, 5 and 6 of the rehearsal: the loss functions and dynamic batches the first update
uses, the reward as verl loads and calls it, the rollout's lengths and LoRA weight sync.
"""

from __future__ import annotations

import ast
import sys
import types
from typing import Any

from rehearsal_common import (
    fix_for,
    function_node,
    line_of,
    problem_entry,
    setting_for,
    verl_function,
    verl_has,
    verl_namespace,
    verl_source,
)

WRONG_ANSWER = "987654321"


def loss_functions(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """verl's own loss lookups, called on CPU with the composed names, as the first actor update
    and the first in-reward KL call them (no config check covers these names; an unknown one
    raises on the GPUs): core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode) and
    core_algos.kl_penalty(..., actor.kl_loss_type) when use_kl_loss (0.6.1
    workers/actor/dp_actor.py DataParallelPPOActor.update_policy; 0.9.0 workers/utils/losses.py
    ppo_loss), core_algos.kl_penalty(..., algorithm.kl_penalty) when use_kl_in_reward
    (ray_trainer.py apply_kl_penalty)."""
    import torch

    core = verl_namespace("verl.trainer.ppo.core_algos")
    actor = config.actor_rollout_ref.actor
    checks: list[tuple[str, Any, Any]] = [
        (
            "actor_rollout_ref.actor.policy_loss.loss_mode",
            actor.policy_loss.get("loss_mode", "vanilla"),
            core["get_policy_loss_fn"],
        )
    ]
    zeros = torch.zeros(1, 2)
    kl = core["kl_penalty"]
    if actor.use_kl_loss:
        checks.append(
            (
                "actor_rollout_ref.actor.kl_loss_type",
                actor.kl_loss_type,
                lambda n: kl(zeros, zeros, n),
            )
        )
    if config.algorithm.use_kl_in_reward:
        checks.append(
            ("algorithm.kl_penalty", config.algorithm.kl_penalty, lambda n: kl(zeros, zeros, n))
        )
    problems = []
    for key, name, call in checks:
        try:
            call(name)
        except (ValueError, NotImplementedError, KeyError) as error:
            function = "get_policy_loss_fn" if key.endswith("loss_mode") else "kl_penalty"
            problems.append(
                problem_entry(
                    setting_for(context, key),
                    name,
                    f"{type(error).__name__}: {str(error) or 'verl has no branch for this name'} "
                    f"(verl/trainer/ppo/core_algos.py "
                    f"{function}({name!r}), called at the first actor update on the GPUs)",
                    fix_for(context, key, None),
                )
            )
    return problems


def _dynamic_passes(config: Any) -> list[tuple[bool, str]]:
    """(dynamic batch size on, its max-token key) of the actor update and the log-prob passes
    (the reference's only where a KL switch adds the reference worker)."""
    aref = config.actor_rollout_ref
    passes = [
        (aref.actor.use_dynamic_bsz, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"),
        (
            aref.rollout.get("log_prob_use_dynamic_bsz", False),
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        ),
    ]
    if aref.actor.use_kl_loss or config.algorithm.use_kl_in_reward:
        passes.append(
            (
                aref.ref.get("log_prob_use_dynamic_bsz", False),
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            )
        )
    return passes


def dynamic_batch_checks(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """With dynamic batch sizes, each pass splits its batch by verl's
    seqlen_balancing.rearrange_micro_batches(batch, max_token_len), which asserts max_token_len
    >= the batch's sequence length: prompt + response as the padded batch comes (0.6.1), the
    longest sequence (0.9.0's nested batches; a response that runs to max_response_length
    reaches it). Called here on such a batch with each pass's max_token_len x
    ulysses_sequence_parallel_size: the actor update (ppo_max_token_len_per_gpu), the rollout
    and reference log-prob passes (log_prob_max_token_len_per_gpu): 0.6.1 dp_actor.py
    update_policy and fsdp_workers.py compute_log_prob / compute_ref_log_prob; 0.9.0
    engine_workers.py (engine_config.max_token_len_per_gpu, infer_max_token_len_per_gpu) through
    workers/engine/utils.py prepare_micro_batches."""
    import torch
    from omegaconf import OmegaConf
    from tensordict import TensorDict

    rearrange = verl_namespace("verl.utils.seqlen_balancing")["rearrange_micro_batches"]
    aref = config.actor_rollout_ref
    length = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    batch = TensorDict(
        {
            "input_ids": torch.zeros(2, length, dtype=torch.long),
            "attention_mask": torch.ones(2, length, dtype=torch.long),
        },
        batch_size=[2],
    )
    sp = int(aref.actor.get("ulysses_sequence_parallel_size", 1) or 1)
    where = line_of("verl.utils.seqlen_balancing", "def rearrange_micro_batches")
    problems, refused = [], set()
    for dynamic, key in _dynamic_passes(config):
        per_gpu = int(OmegaConf.select(config, key))
        # The log-prob lengths default to the actor's (rollout.yaml, ref.yaml oc.select): one
        # problem for one value.
        if not dynamic or per_gpu in refused:
            continue
        try:
            rearrange(batch, max_token_len=per_gpu * sp)
        except AssertionError as error:
            refused.add(per_gpu)
            problems.append(
                problem_entry(
                    setting_for(context, key),
                    per_gpu,
                    f"AssertionError: {error} ({where}, "
                    f"on a batch of data.max_prompt_length + data.max_response_length = {length} "
                    "tokens, with use_dynamic_bsz)",
                    fix_for(context, key, length),
                )
            )
    return problems


def load_reward(config: Any) -> tuple[Any, str]:
    """verl's get_custom_reward_fn (verl/trainer/ppo/reward.py), else default_compute_score, as
    load_reward_manager chooses (0.6.1; 0.9.0's reward loop calls the same pair)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    # get_custom_reward_fn keeps the file it loaded as sys.modules["custom_module"] and reuses
    # it (reward.py, 0.6.1 and 0.9.0): one reward per trainer process, one per case here.
    sys.modules.pop("custom_module", None)
    function = get_custom_reward_fn(config)
    if function is not None:
        section = config.get("custom_reward_function") or {}
        if not section.get("path") and "reward" in config:
            section = config.reward.get("custom_reward_function") or {}
        return function, f"{section.get('path')}:{section.get('name')}"
    from verl.utils.reward_score import default_compute_score

    return default_compute_score, "verl.utils.reward_score:default_compute_score"


def _verl_reward_value(score: Any) -> Any:
    """What the reward manager makes of a return (NaiveRewardManager.__call__,
    verl/workers/reward_manager/naive.py): a dict gives score["score"], anything else is the
    reward itself, written into a float tensor: `reward_tensor[i, length - 1] = reward`."""
    import torch

    reward = score["score"] if isinstance(score, dict) else score
    torch.zeros(1, 1, dtype=torch.float32)[0, 0] = reward
    return float(reward)


def score_rows(
    config: Any,
    trainer: types.SimpleNamespace,
    samples: int,
    context: dict[str, Any],
    record: dict[str, Any],
) -> list[dict[str, Any]]:
    function, name = load_reward(config)
    record["reward"] = {"function": name, "samples": []}
    key = config.data.get("reward_fn_key", "data_source")
    count = min(samples, len(trainer.train_dataset))
    for index in range(count):
        item = trainer.train_dataset[index]
        truth = item["reward_model"]["ground_truth"]
        extra = item.get("extra_info")
        sample: dict[str, Any] = {"row": index, "ground_truth": str(truth)}
        for label, answer in (("score_correct", str(truth)), ("score_wrong", WRONG_ANSWER)):
            response = f"So the answer is \\boxed{{{answer}}}.\n#### {answer}"
            score: Any = "<nothing: it raised>"
            try:
                score = function(
                    data_source=item[key],
                    solution_str=response,
                    ground_truth=truth,
                    extra_info=extra,
                )
                sample[label] = _verl_reward_value(score)
            except Exception as error:
                record["reward"]["samples"].append(sample)
                return [
                    problem_entry(
                        setting_for(context, "custom_reward_function.path", "verl-gke:reward"),
                        name,
                        f"train row {index} (data_source {item[key]!r}, ground truth "
                        f"{str(truth)!r}), response {response!r}: it returned {score!r}: "
                        f"{type(error).__name__}: {error}; verl needs a number or a dict with "
                        "'score' (NaiveRewardManager)",
                        "a reward that returns a number (or a dict with 'score') on every path: "
                        "e.g. verl-gke:reward docs/examples/exact_match.py:compute_score",
                    )
                ]
        record["reward"]["samples"].append(sample)
    return []


SPMD = "verl.workers.rollout.vllm_rollout.vllm_rollout_spmd"
ASYNC_SERVER = "verl.workers.rollout.vllm_rollout.vllm_async_server"


def _spmd_length_checks() -> tuple[ast.Module, str] | None:
    """verl 0.6.1 vLLMRollout.__init__ (vllm_rollout_spmd.py): its statements from
    `max_num_batched_tokens = self.config.get(...)` through the chunked-prefill ValueError."""
    if not verl_has(SPMD):
        return None
    path = verl_source(SPMD)
    init = function_node(path, "vLLMRollout.__init__")
    body = init.body
    starts = [i for i, s in enumerate(body) if "max_num_batched_tokens =" in ast.unparse(s)]
    ends = [
        i
        for i, s in enumerate(body)
        if isinstance(s, ast.If) and "max_num_batched_tokens < max_model_len" in ast.unparse(s.test)
    ]
    if not starts or not ends:
        return None
    return ast.Module(body[starts[0] : ends[0] + 1], []), f"{path.name}:{body[ends[0]].lineno}"


def lora_weight_sync(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """LoRA with rollout.layered_summon needs the base model in vLLM before the first weight
    sync. The worker sets base_sync_done = "dummy" not in rollout.load_format (0.6.1
    fsdp_workers.py, 0.9.0 engine_workers.py), and the first sync of a LoRA actor raises
    ValueError when layered_summon and not base_sync_done (utils/fsdp_utils.py
    collect_lora_params; 0.6.1 sync mode sharding_manager/fsdp_vllm.py __enter__; 0.9.0 unless
    model.lora.merge). Restated: the check needs an FSDP-wrapped PEFT model on GPUs."""
    model, rollout = config.actor_rollout_ref.model, config.actor_rollout_ref.rollout
    lora = int(model.get("lora_rank", 0) or 0) > 0
    merged = bool((model.get("lora") or {}).get("merge", False))
    if not (lora and rollout.get("layered_summon", False)) or merged:
        return []
    if "dummy" not in str(rollout.load_format):
        return []
    key = "actor_rollout_ref.rollout.load_format"
    where = line_of("verl.utils.fsdp_utils", "To use layered_summon, you must make sure")
    return [
        problem_entry(
            setting_for(context, "actor_rollout_ref.rollout.layered_summon"),
            True,
            "ValueError at the first weight sync on the GPUs: 'To use layered_summon, you must "
            "make sure base-model is preloaded in vllm, e.g. let rollout.load_format="
            f"safetensors' ({where}); {key} = {rollout.load_format}",
            fix_for(context, key, "safetensors"),
        )
    ]


def rollout_lengths_follow_data(config: Any, context: dict[str, Any]) -> list[dict[str, Any]]:
    """rollout.prompt_length / response_length default to data.max_prompt_length /
    max_response_length (rollout.yaml, `${oc.select:data...}`, 0.6.1 and 0.9.0); vLLM generates
    and the actor trains on the rollout's lengths, while the plan's memory fit, step time and
    evaluation use the data's. An override that sets them apart is refused with the data
    setting that keeps the length asked for."""
    rollout = config.actor_rollout_ref.rollout
    problems = []
    for field, data_key in (
        ("prompt_length", "data.max_prompt_length"),
        ("response_length", "data.max_response_length"),
    ):
        asked, data_value = int(rollout[field]), int(config.data[data_key.split(".")[1]])
        if asked == data_value:
            continue
        key = f"actor_rollout_ref.rollout.{field}"
        problems.append(
            problem_entry(
                setting_for(context, key),
                asked,
                f"{key} = {asked} while {data_key} = {data_value}: vLLM generates and the actor "
                f"trains on the rollout's length, but the plan's memory fit and step time use "
                f"{data_key} (verl's rollout.yaml sets the first from the second)",
                f"{fix_for(context, data_key, asked)}, and {fix_for(context, key, None)}",
            )
        )
    return problems


def rollout_checks(
    config: Any, hf_config: Any, context: dict[str, Any], record: dict[str, Any], notes: list[str]
) -> list[dict[str, Any]]:
    rollout = config.actor_rollout_ref.rollout
    model_context = record.get("model", {}).get("max_position_embeddings")
    record["rollout"] = {
        "name": str(rollout.name),
        "mode": str(rollout.get("mode", "async")),
        "max_model_len": rollout.get("max_model_len"),
        "max_num_batched_tokens": rollout.get("max_num_batched_tokens"),
        "enable_chunked_prefill": rollout.get("enable_chunked_prefill"),
        "model_context": model_context,
    }
    if str(rollout.name) != "vllm" or hf_config is None:
        return []
    spmd = _spmd_length_checks()
    server_check = verl_has(ASYNC_SERVER) and "_validate_configs" in (
        verl_source(ASYNC_SERVER).read_text()
    )
    if record["rollout"]["mode"] == "sync" and spmd is not None:
        return _run_spmd(spmd, config, hf_config, context, record)
    if server_check:  # 0.9.0: vLLMHttpServer._validate_configs
        return _run_server_check(config, hf_config, context, record)
    if record["rollout"]["mode"] == "async":
        # 0.6.1 vLLMHttpServerBase.__init__ (vllm_async_server.py) replaces the override.
        where = line_of(ASYNC_SERVER, "self.config.max_model_len = self.config.prompt_length")
        effective = int(rollout.prompt_length) + int(rollout.response_length)
        if rollout.get("max_model_len") not in (None, effective):
            notes.append(
                f"rollout.max_model_len={rollout.max_model_len} is replaced by prompt_length + "
                f"response_length = {effective} in async mode ({where})"
            )
        record["rollout"]["max_model_len"] = effective
    return []


def _run_spmd(
    spmd: tuple[ast.Module, str],
    config: Any,
    hf_config: Any,
    context: dict[str, Any],
    record: dict[str, Any],
) -> list[dict[str, Any]]:
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    code, where = spmd
    composed = config.actor_rollout_ref.rollout

    def run(values: dict[str, Any]) -> str | None:
        """verl's statements on the rollout config (RolloutConfig, as the worker converts it)
        with `values` changed; verl's message, or None when they pass."""
        rollout = omega_conf_to_dataclass(OmegaConf.merge(composed, values))
        scope = {"config": rollout, "self": types.SimpleNamespace(config=rollout)}
        scope["model_hf_config"] = hf_config
        try:
            exec(compile(code, where, "exec"), scope)
        except (ValueError, AssertionError) as error:
            return f"{type(error).__name__}: {' '.join(str(error).split())} ({where})"
        if not values:  # the job's own config: the length vLLM gets
            record["rollout"]["max_model_len"] = scope.get("max_model_len")
        return None

    message = run({})
    if message is None:
        return []
    if message.startswith("AssertionError"):
        return [_context_problem(composed, run, message, context, record)]
    asked = composed.get("max_model_len")
    context_len = record["rollout"]["model_context"]
    # The fix keeps the asked length where the model holds it (more batched tokens), else drops
    # the override; either is run through the same statements before it is offered.
    candidates: list[tuple[str, Any, dict[str, Any]]] = [
        ("actor_rollout_ref.rollout.max_model_len", None, {"max_model_len": None})
    ]
    if asked and context_len and int(asked) <= int(context_len):
        batched = ("actor_rollout_ref.rollout.max_num_batched_tokens", int(asked))
        candidates.insert(0, (*batched, {"max_num_batched_tokens": int(asked)}))
    fix = next(
        (fix_for(context, key, value) for key, value, change in candidates if run(change) is None),
        None,
    )
    setting = setting_for(context, "actor_rollout_ref.rollout.max_model_len")
    return [problem_entry(setting, asked, message, fix)]


def _context_problem(
    composed: Any, run: Any, message: str, context: dict[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """verl 0.6.1's assertion that the model's context holds prompt + response: the fix is the
    longest response it holds, run through the same statements (with max_num_batched_tokens at
    least prompt + response, which the chunked-prefill check right after asks for)."""
    prompt, response = int(composed.prompt_length), int(composed.response_length)
    longest = int(record["rollout"]["model_context"] or 0) - prompt
    change = {
        "response_length": longest,
        "max_num_batched_tokens": max(int(composed.max_num_batched_tokens), prompt + longest),
    }
    accepted = longest > 0 and run(change) is None
    key = "data.max_response_length"
    fix = fix_for(context, key, longest) if accepted else "a model with a longer context"
    return problem_entry(setting_for(context, key), response, message, fix)


def _run_server_check(
    config: Any, hf_config: Any, context: dict[str, Any], record: dict[str, Any]
) -> list[dict[str, Any]]:
    from verl.utils.config import omega_conf_to_dataclass

    check = verl_function(ASYNC_SERVER, "vLLMHttpServer._validate_configs")
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    server = types.SimpleNamespace(
        config=rollout, model_config=types.SimpleNamespace(hf_config=hf_config)
    )
    asked = rollout.max_model_len
    try:
        check(server)
    except ValueError as error:
        return [
            problem_entry(
                setting_for(context, "actor_rollout_ref.rollout.max_model_len"),
                asked,
                f"ValueError: {error} ({line_of(ASYNC_SERVER, 'def _validate_configs')})",
                fix_for(context, "actor_rollout_ref.rollout.max_model_len", None),
            )
        ]
    record["rollout"]["max_model_len"] = server.config.max_model_len
    return []

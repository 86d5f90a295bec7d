"""Sequence lengths verl and vLLM refuse when the rollout is built, checked before anything exists.

- vLLM's max_num_batched_tokens: verl's default is 8192 with chunked prefill on
  (verl/trainer/config/rollout/rollout.yaml, v0.6.1 and v0.9.0). verl v0.6.1's vLLM rollout
  raises "Enable chunked prefill, max_num_batched_tokens is smaller than max_model_len" when
  max_num_batched_tokens < max_model_len (= prompt_length + response_length unless set) with
  chunked prefill on (verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py, v0.6.1). So a job
  whose prompt + response exceeds 8192 gets max_num_batched_tokens = prompt + response (the
  smallest value verl accepts), unless extraOverrides sets it; the memory fit's vLLM profiling
  term follows it (assembly.memory_fit_inputs). With chunked prefill off, vLLM itself raises for
  max_num_batched_tokens < max_model_len (SchedulerConfig._verify_args, vllm/config/scheduler.py),
  so an extraOverrides value below prompt + response is refused either way. From v0.7.0 the vLLM
  server sets max_model_len to the model's max_position_embeddings and makes no such check
  (vllm_async_server.py, v0.7.0 and v0.9.0); a prefill of the whole prompt in one step is
  accepted there as well.
- the model's context: verl v0.6.1 asserts max_position_embeddings >= prompt_length +
  response_length for a model without rope_scaling (x the rope factor with it,
  vllm_rollout_spmd.py v0.6.1); 0.9.0 caps each response at max_model_len (=
  max_position_embeddings) minus its prompt (vllm_async_server.py), so maxResponseLength could
  never be reached. Refused at max_position_embeddings from config.json; a rope factor is not
  credited (vLLM derives its own limit from the scaling type).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from training.grpo_spec import CONFIG_KEY, GrpoSpec
from training.model_facts import ModelFacts

BATCHED_TOKENS_KEY = "actor_rollout_ref.rollout.max_num_batched_tokens"
CHUNKED_PREFILL_KEY = "actor_rollout_ref.rollout.enable_chunked_prefill"
# verl/trainer/config/rollout/rollout.yaml max_num_batched_tokens, v0.6.1 and v0.9.0.
VERL_BATCHED_TOKENS_DEFAULT = 8192


def _extra_value(spec: GrpoSpec, key: str) -> str | None:
    """The last extraOverrides value given for `key`, as written."""
    values = [
        o.split("=", 1)[1] for o in spec.extra_overrides if o.lstrip("+").split("=")[0] == key
    ]
    return values[-1].strip() if values else None


def _sequence(spec: GrpoSpec) -> int:
    return spec.max_prompt_length + spec.max_response_length


def rollout_batched_tokens(spec: GrpoSpec) -> int:
    """vLLM's max_num_batched_tokens for this job: an integer extraOverrides value, else the
    larger of verl's default and prompt + response."""
    given = _extra_value(spec, BATCHED_TOKENS_KEY)
    if given is not None and given.isdigit():
        return int(given)
    return max(VERL_BATCHED_TOKENS_DEFAULT, _sequence(spec))


def batched_tokens_overrides(spec: GrpoSpec) -> list[str]:
    """The override the job adds when verl's default is below prompt + response."""
    if _extra_value(spec, BATCHED_TOKENS_KEY) is not None:
        return []
    if _sequence(spec) <= VERL_BATCHED_TOKENS_DEFAULT:
        return []
    return [f"{BATCHED_TOKENS_KEY}={_sequence(spec)}"]


def _fitting_lengths(fit: int) -> Iterator[int]:
    """The longest response that fits the context, then powers of two below it."""
    yield fit
    length = 1 << (fit.bit_length() - 1)
    if length == fit:
        length //= 2
    while length >= 1:
        yield length
        length //= 2


def sequence_problems(
    spec: GrpoSpec, model: ModelFacts, accept: Callable[[int], bool] | None = None
) -> list[str]:
    """Lengths no setting of the rollout can serve, and a batched-token override verl refuses.
    accept(length): the whole job takes that maxResponseLength (its memory fit included), so
    the fix offered is one every rule accepts."""
    problems = []
    total = _sequence(spec)
    prompt, response = f"{CONFIG_KEY}.maxPromptLength", f"{CONFIG_KEY}.maxResponseLength"
    limit = model.max_position_embeddings
    if limit is not None and total > limit:
        fit = limit - spec.max_prompt_length
        length = (
            next((n for n in _fitting_lengths(fit) if accept is None or accept(n)), fit)
            if fit > 0
            else 0
        )
        fix = (
            f"pulumi config set --path {response} {length}"
            if fit > 0
            else f"set {prompt} below {limit} and {response} to at most {limit} minus it"
        )
        problems.append(
            f"{prompt} + {response} = {spec.max_prompt_length} + {spec.max_response_length} = "
            f"{total} tokens, more than {model.hub_id}'s context, max_position_embeddings = "
            f"{limit} (its config.json, {model.source}): verl v0.6.1's vLLM rollout asserts "
            f"the sum fits, and 0.9.0 cuts each response at {limit} minus its prompt. Fix: {fix}"
        )
    given = _extra_value(spec, BATCHED_TOKENS_KEY)
    chunked = (_extra_value(spec, CHUNKED_PREFILL_KEY) or "true").lower() != "false"
    if given is not None and given.isdigit() and int(given) < total:
        # Chunked prefill off: vLLM's own SchedulerConfig._verify_args raises for the same
        # values (vllm/config/scheduler.py), whatever verl's ref.
        who = (
            "with chunked prefill on, verl v0.6.1's vLLM rollout raises"
            if chunked
            else "with chunked prefill off, vLLM's scheduler config raises"
        )
        problems.append(
            f"{CONFIG_KEY}.extraOverrides: {BATCHED_TOKENS_KEY}={given} is below {prompt} + "
            f"{response} = {total}: {who} (max_num_batched_tokens smaller than max_model_len). "
            f"Fix: remove it (the job then passes {max(VERL_BATCHED_TOKENS_DEFAULT, total)}) or "
            f"set it to at least {total}"
        )
    return problems

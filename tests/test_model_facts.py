"""verl-gke:model's facts: the committed table against the numbers it cites, config.json parsing,
verl-gke:modelConfig, and the Hub read of `pulumi up` against a real HTTP server on 127.0.0.1
that answers as the Hub does (200 with config.json; 401/403 with X-Error-Code GatedRepo for a
gated model the token may not read; 404/401 with RepoNotFound; 404 with EntryNotFound)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from config.settings import load_settings
from tests.support.require import verl_python
from training.assembly import training_job
from training.grpo_spec import GrpoPreflightError
from training.hub_client import HF_ENDPOINT_ENV
from training.model_config import (
    ModelFactsError,
    arch_from_config,
    best_rollout_tp,
    rollout_tp_fits,
)
from training.model_facts import _hub_config, table_facts
from training.model_table import MODEL_TABLE

GOOD = {
    "gcp:project": "my-proj",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:hfToken": "hf_abcdefghijklmnop",
    "verl-gke:reservation": "my-res",
}
TOKEN = GOOD["verl-gke:hfToken"]


def _settings(**config: str) -> Any:
    values = {**GOOD, "verl-gke:mode": "standard"}
    values.update({f"verl-gke:{k}": v for k, v in config.items()})
    return load_settings("a3u", values, offline=False).settings


# --- the committed table ------------------------------------------------------------------------


@pytest.mark.parametrize("hub_id", sorted(MODEL_TABLE))
def test_table_arithmetic_reproduces_the_model_cards_parameter_count(hub_id: str) -> None:
    # Each model card states the parameter count; embeddings + layers (q/k/v/o, gated MLP,
    # norms) + final norm (+ lm_head unless tied) from the config.json facts must give it.
    entry = MODEL_TABLE[hub_id]
    arch = table_facts(hub_id).arch
    assert arch.num_params / 1e9 == pytest.approx(entry.card_params_b, rel=0.02)


@pytest.mark.parametrize("hub_id", sorted(MODEL_TABLE))
def test_table_entries_are_dense_causal_lms_the_tutorial_tp_can_shard(hub_id: str) -> None:
    facts = table_facts(hub_id)
    assert facts.model_type in {"qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3_text"}
    # Some TP up to 8 (a node's GPUs) divides the heads, as vLLM requires.
    assert any(rollout_tp_fits(tp, facts.arch) for tp in (8, 4, 2, 1))


def test_gemma_head_dim_is_not_hidden_over_heads() -> None:
    # gemma-2-9b: hidden 3584, 16 heads of head_dim 256 (q projection 4096 wide, not 3584).
    arch = table_facts("google/gemma-2-9b-it").arch
    assert arch.hidden_size // arch.num_attention_heads == 224
    assert arch.head_size == 256 and arch.q_size == 4096


# --- config.json parsing ------------------------------------------------------------------------

QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 151936,
}
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 8,
    "hidden_size": 4096,
}


@pytest.mark.parametrize(("config", "key"), [(QWEN3_MOE, "num_experts"), (MIXTRAL, "num_local")])
def test_mixture_of_experts_is_refused_with_the_reason(config: dict, key: str) -> None:
    with pytest.raises(ModelFactsError, match=f"mixture-of-experts model \\(config.json {key}"):
        arch_from_config(config, "x/moe")


def test_image_text_models_and_remote_code_are_refused() -> None:
    with pytest.raises(ModelFactsError, match="image-text model"):
        arch_from_config({"model_type": "gemma3", "text_config": {}}, "google/gemma-3-4b-it")
    with pytest.raises(ModelFactsError, match="trust_remote_code"):
        arch_from_config({**table_facts_config("Qwen/Qwen3-8B"), "auto_map": {}}, "x/y")


def test_missing_fact_names_the_key() -> None:
    config = dict(table_facts_config("Qwen/Qwen3-8B"))
    del config["intermediate_size"]
    with pytest.raises(ModelFactsError, match="intermediate_size = None"):
        arch_from_config(config, "x/y")


def table_facts_config(hub_id: str) -> dict[str, Any]:
    return dict(MODEL_TABLE[hub_id].config)


def test_absent_kv_heads_read_as_transformers_reads_them() -> None:
    # transformers 4.57.1: LlamaConfig(num_key_value_heads=None) takes num_attention_heads;
    # Qwen2Config's default is 32 (configuration_qwen2.py), not the heads.
    llama = table_facts_config("meta-llama/Llama-3.1-8B-Instruct")
    del llama["num_key_value_heads"]
    assert arch_from_config(llama, "x/y").num_key_value_heads == llama["num_attention_heads"]
    qwen2 = table_facts_config("Qwen/Qwen2.5-7B-Instruct")
    del qwen2["num_key_value_heads"]
    assert arch_from_config(qwen2, "x/y").num_key_value_heads == 32


def test_best_tp_is_the_nearest_that_vllm_can_shard() -> None:
    arch = table_facts("Qwen/Qwen2.5-7B-Instruct").arch  # 28 heads, 4 KV heads
    assert not rollout_tp_fits(8, arch)
    assert best_rollout_tp(8, 8, arch) == 4


def test_tp_must_divide_the_mlp_size_as_vllm_splits_it() -> None:
    # vLLM v0.11.0 MergedColumnParallelLinear splits gate/up (intermediate_size) over the TP
    # ranks and asserts each divides (vllm/model_executor/layers/linear.py): 32 heads and 8 KV
    # heads allow TP 8, an MLP of 12300 does not.
    config = {**table_facts_config("Qwen/Qwen3-8B"), "intermediate_size": 12300}
    arch = arch_from_config(config, "x/y")
    assert not rollout_tp_fits(8, arch)
    assert best_rollout_tp(8, 8, arch) == 4


# --- the job, offline -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "hub_id",
    [
        "Qwen/Qwen3-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "google/gemma-2-9b-it",
    ],
)
def test_popular_models_fit_on_a3u_offline(hub_id: str) -> None:
    job = training_job(_settings(model=hub_id))
    assert job.model.hub_id == hub_id
    assert job.spec.model_path == f"/data/{hub_id.split('/')[1]}"
    assert job.memory.peak.total_gib < 141
    assert "committed table" in job.model.source


def test_a_model_outside_the_table_is_refused_offline_with_model_config_as_fix() -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model="my-org/my-finetune"))
    (problem,) = caught.value.problems
    assert problem.startswith("verl-gke:model = 'my-org/my-finetune': not in the committed table")
    assert "pulumi config set verl-gke:modelConfig PATH/config.json -s a3u" in problem
    assert ". Fix: pulumi config set verl-gke:model Qwen/Qwen3-8B -s a3u (or" in problem


def test_model_config_gives_the_facts_of_a_model_outside_the_table(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(table_facts_config("Qwen/Qwen3-8B")))
    job = training_job(_settings(model="my-org/my-finetune", modelConfig=str(path)))
    assert job.model.arch.num_params == table_facts("Qwen/Qwen3-8B").arch.num_params
    assert job.model.source == f"verl-gke:modelConfig ({path})"
    assert job.spec.model_path == "/data/my-finetune"


def test_model_config_that_is_not_json_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(GrpoPreflightError, match=r"verl-gke:modelConfig = '.*' cannot be read"):
        training_job(_settings(model="my-org/my-finetune", modelConfig=str(path)))
    # The file is wrong, not the model: the fix points the setting at a config.json.
    with pytest.raises(GrpoPreflightError, match=r"Fix: pulumi config set verl-gke:modelConfig "):
        training_job(_settings(model="my-org/my-finetune", modelConfig=str(path)))


def test_moe_model_is_refused_by_the_job_naming_the_model_key(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_MOE))
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model="Qwen/Qwen3-30B-A3B", modelConfig=str(path)))
    (problem,) = caught.value.problems
    assert problem.startswith("verl-gke:model = 'Qwen/Qwen3-30B-A3B': it is a mixture-of-experts")
    # The facts came from verl-gke:modelConfig: a new id alone would still be planned from it.
    assert problem.endswith(
        "Fix: pulumi config set verl-gke:model Qwen/Qwen3-8B -s a3u and pulumi config rm "
        "verl-gke:modelConfig -s a3u (the facts of Qwen/Qwen3-8B are known without it)"
    )


def test_model_config_of_another_model_than_a_table_id_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_MOE))
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model="Qwen/Qwen3-8B", modelConfig=str(path)))
    (problem,) = caught.value.problems
    assert problem.startswith(
        f"verl-gke:modelConfig = '{path}' describes another model than verl-gke:model = "
        "'Qwen/Qwen3-8B', whose facts are known (from committed table"
    )
    assert "model_type 'qwen3_moe' (there: 'qwen3')" in problem
    assert problem.endswith(
        "Fix: pulumi config rm verl-gke:modelConfig -s a3u "
        "(the facts of Qwen/Qwen3-8B are known without it)"
    )
    # The same model's config.json is accepted, and so is the fix: no modelConfig.
    path.write_text(json.dumps(table_facts_config("Qwen/Qwen3-8B")))
    assert training_job(_settings(model="Qwen/Qwen3-8B", modelConfig=str(path))).model
    assert training_job(_settings(model="Qwen/Qwen3-8B")).model.source.startswith("committed")


# --- the Hub, as `pulumi up` reads it ------------------------------------------------------------

GATED = "meta-llama/Llama-3.1-8B-Instruct"
PINNED = "0123456789abcdef" * 2 + "01234567"  # the one commit the fake Hub knows besides main
NO_CONFIG = "my-org/datasets-only"


class _Hub(BaseHTTPRequestHandler):
    """Answers GET /{org}/{name}/resolve/main/config.json as huggingface.co does."""

    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        path = self.path.removesuffix("/config.json").lstrip("/")
        repo, _, revision = path.partition("/resolve/")
        if revision not in ("main", PINNED):
            self._send(404, b"Revision not found", "RevisionNotFound")
        elif repo == GATED:
            self._send(403, b"Access to model is restricted.", "GatedRepo")
        elif repo == NO_CONFIG:
            self._send(404, b"Entry not found", "EntryNotFound")
        elif repo in MODEL_TABLE:
            body = json.dumps(dict(MODEL_TABLE[repo].config)).encode()
            self._send(200, body, None, {"X-Repo-Commit": "0123abcd" * 5})
        else:
            self._send(401, b"Repository not found", "RepoNotFound")

    def _send(self, status: int, body: bytes, code: str | None, extra: dict | None = None) -> None:
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str | None]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(HF_ENDPOINT_ENV, f"http://127.0.0.1:{server.server_port}")
    _hub_config.cache_clear()
    _Hub.seen = []
    try:
        yield _Hub.seen
    finally:
        server.shutdown()
        server.server_close()
        _hub_config.cache_clear()


def test_pulumi_up_reads_config_json_from_the_hub_with_the_token_once(hub: list) -> None:
    settings = _settings(model="Qwen/Qwen3-8B")
    job = training_job(settings, hub=True)
    training_job(settings, hub=True)
    assert job.model.source.startswith("the Hub (http://127.0.0.1:")
    assert "config.json at 0123abcd" in job.model.source
    assert hub == [("/Qwen/Qwen3-8B/resolve/main/config.json", f"Bearer {TOKEN}")]


def test_a_pinned_revision_is_read_at_that_commit_and_reaches_the_job(hub: list) -> None:
    job = training_job(_settings(model="Qwen/Qwen3-8B", modelRevision=PINNED), hub=True)
    assert hub == [(f"/Qwen/Qwen3-8B/resolve/{PINNED}/config.json", f"Bearer {TOKEN}")]
    assert job.model.revision == PINNED
    assert job.spec.model_path == f"/data/Qwen3-8B-{PINNED[:12]}"
    other = "f" * 40  # a commit the repository does not have
    with pytest.raises(GrpoPreflightError, match=r"has no revision 'f{40}'.*modelRevision"):
        training_job(_settings(model="Qwen/Qwen3-8B", modelRevision=other), hub=True)


def test_an_unknown_revision_is_fixed_by_the_revision_keeping_the_model(hub: list) -> None:
    # The Hub's X-Error-Code RevisionNotFound (huggingface_hub 0.36.2 utils/_http.py
    # hf_raise_for_status): the revision is wrong, so the fix changes verl-gke:modelRevision and
    # keeps the user's model; the fix it prints (unpinned) is then accepted.
    model = "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model=model, modelRevision="f" * 40), hub=True)
    (problem,) = caught.value.problems
    fix = problem.split("Fix: ", 1)[1]
    assert fix.startswith("pulumi config rm verl-gke:modelRevision -s ")
    assert f"https://huggingface.co/{model}/commits/main" in fix
    assert "config set verl-gke:model " not in fix
    assert training_job(_settings(model=model), hub=True).model.revision is None


def test_gated_model_without_access_is_refused_with_its_licence_page(hub: list) -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model=GATED), hub=True)
    (problem,) = caught.value.problems
    assert problem.startswith(f"verl-gke:model = '{GATED}': it is a gated model")
    assert f"accept the licence on https://huggingface.co/{GATED}" in problem
    assert TOKEN not in problem


@pytest.mark.parametrize(
    ("hub_id", "reason"),
    [
        ("my-org/no-such-model", "the Hub has no model repository 'my-org/no-such-model'"),
        (NO_CONFIG, "its Hub repository has no config.json"),
    ],
)
def test_missing_repository_or_config_is_refused(hub: list, hub_id: str, reason: str) -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(_settings(model=hub_id), hub=True)
    (problem,) = caught.value.problems
    assert problem.startswith(f"verl-gke:model = '{hub_id}': {reason}")
    assert "Fix: pulumi config set verl-gke:model " in problem


def test_model_config_that_differs_from_the_hub_s_config_json_is_refused(
    hub: list, tmp_path: Path
) -> None:
    # The Hub answers for Qwen/Qwen2.5-7B-Instruct (qwen2); the file given is Qwen3-8B's.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(table_facts_config("Qwen/Qwen3-8B")))
    settings = _settings(model="Qwen/Qwen2.5-7B-Instruct", modelConfig=str(path))
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(settings, hub=True)
    (problem,) = caught.value.problems
    assert "whose facts are known (from the Hub (http://127.0.0.1:" in problem
    assert "model_type 'qwen3' (there: 'qwen2')" in problem
    assert "Fix: pulumi config rm verl-gke:modelConfig -s a3u" in problem


def test_an_unreachable_hub_falls_back_to_the_table_and_refuses_an_unknown_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A port nothing listens on: the connection is refused at once. The Hub down or blocked from
    # the deploying machine says nothing about the model: a model of the table (or of
    # verl-gke:modelConfig) is planned from those facts, said so; any other is refused.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    port = server.server_port
    server.server_close()
    monkeypatch.setenv(HF_ENDPOINT_ENV, f"http://127.0.0.1:{port}")
    _hub_config.cache_clear()
    job = training_job(_settings(model="Qwen/Qwen3-8B"), hub=True)
    assert job.model.arch == table_facts("Qwen/Qwen3-8B").arch
    assert "could not be reached" in job.model.source and "not checked" in job.model.source
    with pytest.raises(GrpoPreflightError, match=r"could not be reached.*modelConfig"):
        training_job(_settings(model="acme/tiny-llama"), hub=True)
    _hub_config.cache_clear()


# --- the table against transformers' own model classes ------------------------------------------

# Builds each config on the meta device (no memory, no weights) with the transformers of verl's
# pinned release, and prints its parameter count and the facts transformers reads from it: the
# classes verl's FSDP actor loads.
_COUNT_PARAMS = """
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
facts = {}
for key, config in json.load(sys.stdin).items():
    config = dict(config)
    config.pop("architectures", None)
    hf = AutoConfig.for_model(config.pop("model_type"), **config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    facts[key] = {
        "params": sum(p.numel() for p in model.parameters()),
        "softcap": bool(getattr(hf, "final_logit_softcapping", None)),
    }
print(json.dumps(facts))
"""
# Keys a published config.json may leave out, transformers then using its config class's default:
# google/gemma-2-*'s config.json has no tie_word_embeddings (Gemma2Config ties by default).
_OPTIONAL_KEYS = ("tie_word_embeddings", "head_dim", "attention_bias", "final_logit_softcapping")


@pytest.fixture(scope="module")
def transformers_facts() -> dict[str, dict[str, Any]]:
    # One layer each keeps it fast; the layer count only multiplies the per-layer count.
    python = verl_python("0.6.1")
    configs = {}
    for hub_id, entry in MODEL_TABLE.items():
        configs[hub_id] = {**entry.config, "num_hidden_layers": 1}
        configs[f"{hub_id} without optional keys"] = _without_optional_keys(configs[hub_id])
    done = subprocess.run(
        [str(python), "-c", _COUNT_PARAMS],
        input=json.dumps(configs),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _without_optional_keys(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key not in _OPTIONAL_KEYS}


@pytest.mark.integration  # transformers in the verl 0.6.1 virtualenv
def test_table_arithmetic_equals_the_parameters_transformers_builds(
    transformers_facts: dict[str, dict[str, Any]],
) -> None:
    for hub_id in MODEL_TABLE:
        arch = table_facts(hub_id).arch.with_layers(1)
        assert transformers_facts[hub_id]["params"] == arch.num_params, hub_id


@pytest.mark.integration  # transformers in the verl 0.6.1 virtualenv
def test_a_config_json_without_optional_keys_is_read_as_transformers_reads_it(
    transformers_facts: dict[str, dict[str, Any]],
) -> None:
    # Tied embeddings, head_dim, biases and the final softcap from the config class's defaults
    # (transformers 4.57.1 configuration_<model_type>.py), as verl's actor and vLLM load them.
    for hub_id, entry in MODEL_TABLE.items():
        config = _without_optional_keys({**entry.config, "num_hidden_layers": 1})
        arch = arch_from_config(config, hub_id)
        built = transformers_facts[f"{hub_id} without optional keys"]
        assert (arch.num_params, arch.final_logit_softcapping) == (
            built["params"],
            built["softcap"],
        ), hub_id


def test_gemma2_config_json_without_tie_key_is_tied_and_softcapped() -> None:
    # google/gemma-2-2b-it's config.json carries no tie_word_embeddings: its lm_head is the
    # embedding (Gemma2Config tie_word_embeddings=True, transformers 4.57.1), 2.61 B parameters.
    config = _without_optional_keys(table_facts_config("google/gemma-2-2b-it"))
    config["head_dim"] = 256
    arch = arch_from_config(config, "google/gemma-2-2b-it")
    assert arch.tie_word_embeddings and arch.final_logit_softcapping
    assert arch.num_params / 1e9 == pytest.approx(2.61, rel=0.01)

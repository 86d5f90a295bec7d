"""What bench/gpu_run.py builds before the job runs: the source rows, the tiny model and its
tokenizer (offline), the 1-GPU plan of the product, and a GCS stand-in over the local checkpoint
folder (GCP is the one system mocked: the machine reaches no network).

Runs on the GPU machine under the image's python3 with the carried wheels (transformers 4.57.1,
tokenizers 0.22.1, ...); the plan part also runs here under .venv (tests/test_gpu_run_plan.py).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "bench" / "gpu_run_files"
MODEL_CONFIG = "bench/gpu_run_files/tiny-qwen2.json"  # relative to the folder of Pulumi.yaml
MODEL_ID = "acme/tiny-qwen2"
OWN_DATASET = "acme/own-math"
OWN_COLUMNS = {"prompt": "problem", "answer": "solution"}
REWARD = "docs/examples/exact_match.py:compute_score"
STACK = "a3u"
# Sizes the one GPU and the short lease force; everything else is the stack's default.
JOB = {
    "trainBatchSize": 8,
    "maxPromptLength": 256,
    "maxResponseLength": 48,
    "ppoMiniBatchSize": 8,
    "ppoMicroBatchSizePerGpu": 4,
    "rolloutN": 2,
    "saveFreq": 1,
    "testFreq": 0,
    "rolloutTensorParallelSize": 1,
}
# flash-attn is not on the machine (verl 0.6.1 fsdp_workers.py builds with flash_attention_2
# unless override_config says otherwise).
SDPA = "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def gsm8k_rows(count: int, offset: int = 0) -> list[dict[str, str]]:
    """openai/gsm8k's columns (question, answer ending in '#### <number>')."""
    rows = []
    for i in range(offset, offset + count):
        a, b = 3 + i % 17, 5 + i % 11
        rows.append(
            {
                "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}",
            }
        )
    return rows


def own_rows(count: int, long_every: int) -> list[dict[str, str]]:
    """An own dataset's columns (problem, solution); every long_every-th prompt is far longer than
    the job's maxPromptLength."""
    rows = []
    for i in range(count):
        a, b = 2 + i % 13, 7 + i % 5
        problem = f"What is {a} times {b}?"
        if i % long_every == 0:
            problem = (
                " ".join(
                    [f"Step {k}: recall that {a} groups of {b} are counted." for k in range(60)]
                )
                + " "
                + problem
            )
        rows.append({"problem": problem, "solution": str(a * b)})
    return rows


def write_jsonl(folder: Path, splits: Mapping[str, list[dict[str, str]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def build_tokenizer(texts: list[str], folder: Path) -> Any:
    """A byte-level BPE of 1,024 tokens trained on the rows, with a Qwen-style chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    config = json.loads((FILES / "tiny-qwen2.json").read_text())
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config["vocab_size"],
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([*texts, "user assistant system"], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def build_model(folder: Path) -> int:
    """Qwen2 of tiny-qwen2.json with random weights, saved in bf16; returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**json.loads((FILES / "tiny-qwen2.json").read_text()))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def stack_config(job: Mapping[str, Any], own_dataset: bool = False) -> dict[str, str]:
    """The Pulumi config of a 1-node stack planning the tiny model (docs/models.md modelConfig)."""
    config = {
        "gcp:project": "gpu-run",
        "gcp:region": "us-central1",
        "verl-gke:zone": "us-central1-b",
        "verl-gke:hfToken": "hf_unused_offline",
        "verl-gke:mode": "standard",
        "verl-gke:model": MODEL_ID,
        "verl-gke:modelConfig": MODEL_CONFIG,
        "verl-gke:gpuNodes": "1",
        # verl comes from the carried wheel, as from an image: no node-local checkout on
        # PYTHONPATH (training/assembly.py job_runtime_env).
        "verl-gke:verlSource": "image",
        "verl-gke:exportModel": "true",
        "verl-gke:job": json.dumps(job),
    }
    if own_dataset:
        config["verl-gke:dataset"] = OWN_DATASET
        config["verl-gke:datasetColumns"] = json.dumps(OWN_COLUMNS)
        config["verl-gke:reward"] = REWARD
    return config


@contextmanager
def one_gpu_profile() -> Iterator[None]:
    """The stack's profile with one GPU per node: the machine has one H200 (config/stack_values.py
    reads PROFILES when a StackSettings asks for its profile)."""
    import config.stack_values as settings_module

    saved = settings_module.PROFILES
    profile = saved[STACK]
    settings_module.PROFILES = {**saved, STACK: dataclasses.replace(profile, gpus_per_node=1)}
    try:
        yield
    finally:
        settings_module.PROFILES = saved


def plan(job: Mapping[str, Any], own_dataset: bool = False) -> tuple[Any, Any]:
    """(StackSettings, TrainingJob) as training.assembly renders them for 1 node x 1 GPU."""
    from config.settings import load_settings
    from training.assembly import training_job

    with one_gpu_profile():
        settings = load_settings(STACK, stack_config(job, own_dataset), offline=True).settings
        return settings, training_job(settings)


def machine_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The job's env_vars less what this machine cannot honour: paths of GKE node files that do
    not exist here and a socket interface it lacks. Returns (env, what was dropped and why)."""
    kept, dropped = {}, []
    for key, value in env.items():
        if value.startswith("/usr/local/gib") and not Path(value).exists():
            dropped.append(f"{key}={value} (no such file on this machine)")
        elif key == "GLOO_SOCKET_IFNAME" and not Path(f"/sys/class/net/{value}").exists():
            dropped.append(f"{key}={value} (no such interface on this machine)")
        else:
            kept[key] = value
    return kept, dropped


class _GcsHandler(BaseHTTPRequestHandler):
    """The two GCS JSON API calls jobs/checkpoints.py makes: a delimiter listing and a media
    download (cloud.google.com/storage/docs/json_api/v1/objects/list, .../objects/get)."""

    bucket = ""
    prefix = ""  # object-name prefix mapped onto `folder`
    folder = Path()

    def log_message(self, *args: Any) -> None:
        pass

    def _local(self, name: str) -> Path | None:
        if not (name == self.prefix or name.startswith(self.prefix + "/")):
            return None
        return self.folder / name[len(self.prefix) :].lstrip("/")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        listing = f"/storage/v1/b/{self.bucket}/o"
        media = f"/download/storage/v1/b/{self.bucket}/o/"
        if url.path == listing:
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            self._send(200, json.dumps(self._list(query.get("prefix", ""))).encode())
        elif url.path.startswith(media):
            path = self._local(unquote(url.path[len(media) :]))
            if path is None or not path.is_file():
                self._send(404, b'{"error": {"code": 404, "message": "No such object"}}')
            else:
                self._send(200, path.read_bytes(), "application/octet-stream")
        else:
            self._send(404, b'{"error": {"code": 404, "message": "Not found"}}')

    def _list(self, prefix: str) -> dict[str, Any]:
        base = self._local(prefix.rstrip("/"))
        items, prefixes = [], []
        if base is not None and base.is_dir():
            for entry in sorted(base.iterdir()):
                name = f"{prefix}{entry.name}"
                if entry.is_dir():
                    prefixes.append(name + "/")
                else:
                    items.append(
                        {
                            "kind": "storage#object",
                            "name": name,
                            "bucket": self.bucket,
                            "size": str(entry.stat().st_size),
                        }
                    )
        return {"kind": "storage#objects", "items": items, "prefixes": prefixes}

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def gcs_stand_in(checkpoint_url: str, folder: Path) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering for gs://<bucket>/<prefix> from `folder` (what the
    GCS FUSE mount /checkpoints shows the pods); yields the STORAGE_EMULATOR_HOST value."""
    bucket, _, prefix = checkpoint_url.removeprefix("gs://").partition("/")
    handler = type(
        "Handler", (_GcsHandler,), {"bucket": bucket, "prefix": prefix, "folder": folder}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

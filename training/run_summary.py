"""The run block of the plan and of `pulumi up`'s log: what the job trains and whether it fits."""

from __future__ import annotations

from config import run_inputs
from config.settings import StackSettings
from training.assembly import TrainingJob
from training.memory_fit import format_breakdown
from training.model_evaluation import plan_line


def model_lines(job: TrainingJob) -> list[str]:
    """The model the run trains: its Hub id, size, layer geometry and where the facts came from."""
    model = job.model
    arch = model.arch
    return [
        f"Model: {model.hub_id} ({model.model_type or 'model_type not given'}), "
        f"{arch.num_params / 1e9:.2f} B parameters, {arch.num_hidden_layers} layers, "
        f"hidden {arch.hidden_size}, {arch.num_attention_heads} attention / "
        f"{arch.num_key_value_heads} KV heads of dim {arch.head_size}, vocabulary "
        f"{arch.vocab_size}{', tied embeddings' if arch.tie_word_embeddings else ''}",
        f"  facts from: {model.source}",
        f"  revision: {model.revision} (pinned)"
        if model.revision
        else "  revision: main, not pinned (verl-gke:modelRevision COMMIT pins it)",
        f"  job reads it from {job.spec.model_path} (the data-prep Job downloads it there)",
    ]


def run_block(job: TrainingJob, settings: StackSettings) -> str:
    """The run in one block: the model, the dataset, reward and verl (config/run_inputs.py), the
    evaluation of the export (training/model_evaluation.py), then the memory fit per phase
    (training/memory_fit.format_breakdown)."""
    return "\n".join(
        [
            *model_lines(job),
            *run_inputs.plan_lines(settings),
            plan_line(job.evaluation, job.spec),
            format_breakdown(job.memory),
        ]
    )

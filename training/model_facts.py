"""The model a stack trains: its Hub id and the config.json facts the preflight needs.

Where the facts come from:
- `pulumi up` (the real engine): the model's own config.json from the Hugging Face Hub, read with
  the stack's hfToken (only that file, once per process, training/hub_client.py). A gated model
  the token may not read, and a repository that does not exist, are refused before anything is
  created; a Hub that does not answer is no verdict, and the offline facts below serve.
- without network (the offline plan, CI, tests): `verl-gke:modelConfig`, a config.json in the
  user's repository, else the committed table (training/model_table.py).

Only dense decoder-only causal LMs are accepted: the memory fit models attention + gated MLP
layers; a mixture-of-experts config is refused with the reason.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from config.settings import StackSettings, config_key
from config.stack_values import DEFAULT_MODEL
from training.hub_client import HubAnswer, HubNotAnsweringError, hub_endpoint, hub_get
from training.memory_fit import ModelArch
from training.model_config import ModelFactsError, arch_from_config
from training.model_table import MODEL_TABLE, table_entry

# verl-gke:modelConfig paths are relative to the folder holding Pulumi.yaml.
PROJECT_ROOT = Path(__file__).resolve().parents[1]


# How a verl-gke:modelConfig that is no config.json is refused (its fix names the file).
_UNREADABLE = "cannot be read as a config.json"
# How a verl-gke:modelRevision the Hub does not know is refused (its fix names the revision).
_NO_REVISION = "has no revision"
# A dense model of the table that fits every profile: the fix for a model that cannot be trained.
_DENSE = "Qwen/Qwen3-8B"


class HubUnreachableError(ModelFactsError):
    """The Hub did not answer: no verdict on the model, unlike a refusal (gated, missing)."""


@dataclass(frozen=True)
class ModelFacts:
    """The model's identity and architecture, carried with the job from settings to the plan."""

    hub_id: str
    arch: ModelArch
    model_type: str
    # Where the facts were read: the Hub, the committed table or verl-gke:modelConfig.
    source: str
    # config.json max_position_embeddings: the longest prompt + response the rollout serves
    # (training/sequence_limits.py); None when config.json has none.
    max_position_embeddings: int | None = None
    # verl-gke:modelRevision: the Hub commit the data-prep Job downloads; None: the branch main.
    revision: str | None = None


def _facts(
    hub_id: str, config: Mapping[str, Any], source: str, revision: str | None = None
) -> ModelFacts:
    return ModelFacts(
        hub_id=hub_id,
        revision=revision,
        arch=arch_from_config(config, hub_id),
        model_type=str(config.get("model_type", "")),
        source=source,
        max_position_embeddings=_positive_int(config.get("max_position_embeddings")),
    )


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def model_facts(settings: StackSettings, *, hub: bool = False) -> ModelFacts:
    """The facts of verl-gke:model: from the Hub when `hub` (a real `pulumi up`), else from
    verl-gke:modelConfig or the committed table. ModelFactsError names the key and a fix."""
    hub_id, revision = settings.model, settings.model_revision
    try:
        if not hub:
            return _facts(hub_id, *_offline_config(settings), revision)
        try:
            config, source = hub_config(
                hub_id, settings.hf_token.get_secret_value(), revision or "main"
            )
        except HubUnreachableError as unreachable:
            # The Hub down or blocked from this machine is no verdict on the model: the facts a
            # plan would use serve, and the data-prep Job (in the cluster) downloads it later.
            config, source = _offline_config(settings, unreachable=str(unreachable))
            source = f"{source}; {unreachable}, so gated access was not checked"
        else:
            if settings.model_config_file:
                _cross_check(settings, _config_file(settings.model_config_file)[0], config, source)
        return _facts(hub_id, config, source, revision)
    except ModelConfigMismatchError as error:
        raise ModelFactsError(f"{error}. Fix: {_rm_model_config(settings, hub_id)}") from None
    except ModelFactsError as error:
        raise ModelFactsError(
            f"{config_key('model')} = {hub_id!r}: {error}. Fix: {_fix(settings, str(error))}"
        ) from None


class ModelConfigMismatchError(ModelFactsError):
    """verl-gke:modelConfig describes another model than the one verl-gke:model names."""


# The config.json facts that tell one model from another: its family and class (transformers'
# model_type and architectures) and the shape keys the memory fit reads (training/model_config.py).
_IDENTITY_KEYS = (
    "model_type",
    "architectures",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
)


def _cross_check(
    settings: StackSettings,
    given: Mapping[str, Any],
    known: Mapping[str, Any],
    known_source: str,
) -> None:
    """Refuse a verl-gke:modelConfig whose identity facts differ from the model's known ones
    (the committed table or the Hub's config.json), naming both: the facts of one model would
    otherwise be planned under the id of another."""
    differ = [
        f"{key} {given.get(key)!r} (there: {known.get(key)!r})"
        for key in _IDENTITY_KEYS
        if key in given and key in known and given[key] != known[key]
    ]
    if not differ:
        return
    raise ModelConfigMismatchError(
        f"{config_key('model_config_file')} = {settings.model_config_file!r} describes another "
        f"model than {config_key('model')} = {settings.model!r}, whose facts are known (from "
        f"{known_source}): its config.json has {'; '.join(differ)}"
    )


def _rm_model_config(settings: StackSettings, model: str) -> str:
    # Without verl-gke:modelConfig the known facts (the table's or the Hub's) serve.
    return (
        f"pulumi config rm {config_key('model_config_file')} -s {settings.stack} (the facts of "
        f"{model} are known without it)"
    )


def _offline_config(
    settings: StackSettings, unreachable: str | None = None
) -> tuple[Mapping[str, Any], str]:
    """verl-gke:modelConfig's config.json, else the committed table's entry."""
    entry = table_entry(settings.model)
    if settings.model_config_file:
        config, source = _config_file(settings.model_config_file)
        if entry is not None:
            _cross_check(settings, config, entry.config, entry.source)
        return config, source
    if entry is None:
        why = _not_in_table(settings)
        raise ModelFactsError(f"{unreachable}, and it is {why}" if unreachable else why)
    return entry.config, entry.source


def _fix(settings: StackSettings, reason: str) -> str:
    if "gated model" in reason:
        return (
            f"accept the licence on https://huggingface.co/{settings.model} with the account of "
            f"{config_key('hf_token')}, then run pulumi up again; or "
            f"{settings.fix('model', DEFAULT_MODEL)}"
        )
    if _NO_REVISION in reason:
        # verl-gke:modelRevision, not the model, is wrong: pin another commit or unpin it.
        return (
            f"pulumi config rm {config_key('model_revision')} -s {settings.stack} (branch main, "
            f"not pinned), or set it to a commit listed at "
            f"https://huggingface.co/{settings.model}/commits/main"
        )
    if "not in the committed table" in reason:
        return (
            f"{settings.fix('model', closest_table_id(settings.model))} (or, to train this "
            f"model, give its "
            f"config.json: pulumi config set {config_key('model_config_file')} "
            f"PATH/config.json -s {settings.stack}, a copy in your repository)"
        )
    if _UNREADABLE in reason:
        # The file, not the model, is wrong: point the setting at the model's config.json.
        return (
            f"{settings.fix('model_config_file', 'PATH/config.json')} (relative to the folder of "
            f"Pulumi.yaml), or pulumi config rm {config_key('model_config_file')} -s "
            f"{settings.stack}"
        )
    if settings.model_config_file:
        # The facts came from verl-gke:modelConfig: a new model id alone would still be planned
        # from that file, so the fix replaces both.
        return f"{settings.fix('model', _DENSE)} and {_rm_model_config(settings, _DENSE)}"
    return settings.fix("model", _DENSE)


def closest_table_id(model: str) -> str:
    """The table's id `model` most likely meant (a typo, another case: `Qwen/Qwen2.5-32B-Instrct`
    -> `Qwen/Qwen2.5-32B-Instruct`), else the table's small dense model."""
    by_lower = {hub_id.lower(): hub_id for hub_id in MODEL_TABLE}
    close = difflib.get_close_matches(model.lower(), list(by_lower), n=1, cutoff=0.85)
    return by_lower[close[0]] if close else _DENSE


def _not_in_table(settings: StackSettings) -> str:
    return (
        "not in the committed table of architectures and the offline plan reads no network, so "
        f"its heads and memory cannot be checked (in the table: {', '.join(MODEL_TABLE)}; "
        "pulumi up reads any model's config.json from the Hub)"
    )


def _config_file(path_text: str) -> tuple[Mapping[str, Any], str]:
    path = Path(path_text)
    path = path if path.is_absolute() else PROJECT_ROOT / path
    key = config_key("model_config_file")
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ModelFactsError(
            f"{key} = {path_text!r} {_UNREADABLE} ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(config, dict):
        raise ModelFactsError(f"{key} = {path_text!r} {_UNREADABLE} (it holds no JSON object)")
    return config, f"{key} ({path_text})"


def hub_config(hub_id: str, token: str, revision: str = "main") -> tuple[Mapping[str, Any], str]:
    """The model's config.json from the Hub at `revision` (verl-gke:modelRevision, else the
    branch main), read once per process."""
    return _hub_config(hub_endpoint(), hub_id, token, revision)


@lru_cache(maxsize=8)
def _hub_config(
    endpoint: str, hub_id: str, token: str, revision: str = "main"
) -> tuple[Mapping[str, Any], str]:
    # The Hub's file URL (huggingface_hub file_download.hf_hub_url): /{repo}/resolve/{rev}/{file}.
    url = f"{endpoint}/{hub_id}/resolve/{revision}/config.json"
    try:
        answer = hub_get(url, token)
    except HubNotAnsweringError as error:
        raise HubUnreachableError(
            f"the Hub could not be reached for its config.json ({error})"
        ) from None
    if answer.status == 200:
        try:
            config = json.loads(answer.body)
        except ValueError:
            raise ModelFactsError("the Hub returned a config.json that is not JSON") from None
        at = answer.revision or revision
        return config, f"the Hub ({endpoint}/{hub_id}, config.json at {at})"
    raise ModelFactsError(_hub_refusal(hub_id, answer, revision))


def _hub_refusal(hub_id: str, answer: HubAnswer, revision: str = "main") -> str:
    code = answer.error_code or ""
    status = answer.status
    if code == "RevisionNotFound":
        # huggingface_hub utils/_http.py: X-Error-Code RevisionNotFound for an unknown revision.
        return (
            f"its Hub repository {_NO_REVISION} {revision!r} (HTTP {status}); check "
            f"{config_key('model_revision')} against https://huggingface.co/{hub_id}/commits/main"
        )
    if code == "GatedRepo":
        return (
            f"it is a gated model and the token of {config_key('hf_token')} has no access "
            f"(HTTP {status}); the data-prep Job could not download it"
        )
    if code == "RepoNotFound" or (status == 404 and code != "EntryNotFound"):
        return (
            f"the Hub has no model repository {hub_id!r} that the token of "
            f"{config_key('hf_token')} can read (HTTP {status}); check the id's spelling"
        )
    if code == "EntryNotFound":
        return "its Hub repository has no config.json, so it is not a transformers model"
    if status == 401:
        return f"the Hub refused the token of {config_key('hf_token')} (HTTP 401)"
    return f"the Hub answered HTTP {status} for its config.json"


def table_facts(hub_id: str) -> ModelFacts:
    """The committed table's facts of `hub_id` (KeyError when it is not in the table)."""
    entry = table_entry(hub_id)
    if entry is None:
        raise KeyError(hub_id)
    return _facts(hub_id, entry.config, entry.source)

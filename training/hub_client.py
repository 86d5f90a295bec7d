"""The one client of the Hugging Face Hub that `pulumi up` uses, before anything is created: the
model's config.json (training/model_facts.py) and the dataset's access (training/dataset_access.py).

The Hub answers a refusal with an error code in the `X-Error-Code` header (`GatedRepo`,
`RepoNotFound`, `EntryNotFound`) and a reason in `X-Error-Message`; huggingface_hub's
utils/_http.py hf_raise_for_status reads the same two headers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import requests

# The Hub's base URL; huggingface_hub reads the same variable (constants.HF_ENDPOINT).
HF_ENDPOINT_ENV = "HF_ENDPOINT"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 20


class HubNotAnsweringError(OSError):
    """The Hub could not be reached (connection, DNS, timeout): no verdict on what was asked."""


@dataclass(frozen=True)
class HubAnswer:
    status: int
    error_code: str | None  # X-Error-Code
    error_message: str | None  # X-Error-Message
    revision: str | None  # X-Repo-Commit of a file answer
    body: bytes


def hub_endpoint() -> str:
    return os.environ.get(HF_ENDPOINT_ENV, DEFAULT_HF_ENDPOINT).rstrip("/")


def hub_get(url: str, token: str) -> HubAnswer:
    """GET `url` with the token as a bearer; HubNotAnsweringError when no answer came."""
    try:
        response = requests.get(
            url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S
        )
    except requests.RequestException as error:
        raise HubNotAnsweringError(f"{type(error).__name__}") from None
    return HubAnswer(
        status=response.status_code,
        error_code=response.headers.get("X-Error-Code"),
        error_message=response.headers.get("X-Error-Message"),
        revision=response.headers.get("X-Repo-Commit"),
        body=response.content,
    )

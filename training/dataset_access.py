"""Whether the stack's Hugging Face token may read verl-gke:dataset, asked of the Hub during
`pulumi up` (the offline plan and tests do not ask: the plan says the access is unchecked).

The Hub's own access check: GET {endpoint}/api/datasets/{id}/auth-check with the token as a
Bearer header answers 200 when the token can read the files; otherwise its X-Error-Code header
says why: GatedRepo (the licence is not accepted by the token's account) or RepoNotFound (no such
dataset, or a private one the token cannot see), and a 401 whose X-Error-Message is "Invalid
credentials in Authorization header" is a token the Hub does not know, not a missing dataset
(huggingface_hub HfApi.auth_check and utils/_http.py hf_raise_for_status, 0.36.2 and 1.33.0).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from config import run_inputs
from config.run_inputs import DATASET_KEY
from config.settings import StackSettings, report
from training.hub_client import DEFAULT_HF_ENDPOINT, hub_endpoint, hub_get

# huggingface_hub's hf_raise_for_status: this 401 message means the token itself is refused.
INVALID_TOKEN = "Invalid credentials in Authorization header"

# (status, X-Error-Code or None, X-Error-Message or None) of one GET; raises OSError when the Hub
# cannot be reached.
Fetch = Callable[[str, str], tuple[int, str | None, str | None]]


def fetch(url: str, token: str) -> tuple[int, str | None, str | None]:
    answer = hub_get(url, token)  # HubNotAnsweringError is an OSError
    return answer.status, answer.error_code, answer.error_message


def access_problems(
    dataset: str, token: str, stack: str, get: Fetch = fetch, hub: str = DEFAULT_HF_ENDPOINT
) -> tuple[list[str], list[str]]:
    """(problems, notes) for the Hub dataset `dataset` read with `token`."""
    url = f"{hub}/api/datasets/{urllib.parse.quote(dataset, safe='/')}/auth-check"
    page = f"{hub}/datasets/{dataset}"
    try:
        status, code, message = get(url, token)
    except OSError as error:
        return [], [f"{DATASET_KEY}: the Hub did not answer ({error}); access is unchecked"]
    if status == 200:
        return [], []
    where = f"{DATASET_KEY} = {dataset!r}"
    if status == 401 and message == INVALID_TOKEN:
        return [
            f"verl-gke:hfToken: the Hub refuses the token ({INVALID_TOKEN}), so neither the "
            f"dataset nor the model could be downloaded. Fix: pulumi config set --secret "
            f"verl-gke:hfToken <a token from {hub}/settings/tokens> -s {stack}"
        ], []
    if code == "GatedRepo":
        return [
            f"{where}: the dataset is gated and the account of verl-gke:hfToken has not "
            f"accepted its terms, so the data-prep Job could not download it. Fix: accept them "
            f"at {page} while logged in as that account, then run pulumi up again"
        ], []
    if code == "RepoNotFound" or status in (401, 404):
        return [
            f"{where}: the Hub has no dataset the token can see under this id (a typo, or a "
            f"private dataset of another account). Fix: check the id at {page}, or pulumi config "
            f"set {DATASET_KEY} openai/gsm8k -s {stack}"
        ], []
    return [], [f"{DATASET_KEY}: the Hub's access check answered {status}; access is unchecked"]


def stack_access_problems(
    settings: StackSettings, get: Fetch = fetch
) -> tuple[list[str], list[str]]:
    """access_problems for the stack's dataset when it is a Hub dataset; ([], []) otherwise."""
    dataset = run_inputs.dataset_of(settings)
    if dataset.kind == "bucket":
        return [], []
    token = settings.hf_token.get_secret_value()
    return access_problems(dataset.dataset, token, settings.stack, get, hub=hub_endpoint())


def check_stack_access(
    settings: StackSettings, warn: Callable[[str], None], get: Fetch = fetch
) -> None:
    """stack_access_problems raised as a SettingsError (before any resource is registered);
    the notes go to `warn`."""
    found = stack_access_problems(settings, get)
    report(settings.stack, "the Hugging Face Hub refuses the run's dataset or token", found, warn)

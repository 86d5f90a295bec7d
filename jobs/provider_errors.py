"""The job provider's own errors, and how they reach the user: as their message, no traceback.

Pulumi's dynamic-provider host (`python -m pulumi.dynamic`, pulumi 3.272
`pulumi/dynamic/__main__.py`) wraps Check, Diff, Create, Read, Update and Delete in
`_abort_with_traceback`, which answers any exception with
`context.abort(grpc.StatusCode.UNKNOWN, traceback.format_exc())`; the engine shows those details
as the error. So every error reaches `pulumi up` as a full Python traceback with the message on
its last line. The host offers no other channel, and `format_exc` is looked up on the host
module's `traceback` global at call time: `install_in_dynamic_host` gives that global a stand-in
whose `format_exc` answers a `ProviderError` with its message alone (the error says what happened
and what to do; the provider's frames do not). Any other exception (a bug) keeps the full
traceback. With `VERL_GKE_DEBUG=1` in the environment of `pulumi` (the host inherits it), every
error keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
import types
from typing import Any

DEBUG_ENV = "VERL_GKE_DEBUG"
DEBUG_HINT = f"(set {DEBUG_ENV}=1 to see the provider's traceback)"
_HOST_MODULE = "pulumi.dynamic.__main__"


class ProviderError(Exception):
    """An error whose message tells the user what happened and what to do."""


class ProviderRuntimeError(ProviderError, RuntimeError):
    pass


class ProviderTimeoutError(ProviderError, TimeoutError):
    pass


class ProviderInputError(ProviderError, ValueError):
    pass


def debug() -> bool:
    """VERL_GKE_DEBUG is set to anything but empty, 0 or false."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false")


def format_exc(limit: int | None = None, chain: bool = True) -> str:
    """traceback.format_exc, except a ProviderError (outside debug mode) gives its message."""
    exc = sys.exc_info()[1]
    if isinstance(exc, ProviderError) and not debug():
        return f"{exc}\n{DEBUG_HINT}"
    return traceback.format_exc(limit=limit, chain=chain)


def _host_traceback() -> types.ModuleType:
    shim = types.ModuleType("traceback", "traceback, with format_exc for ProviderError")
    shim.__dict__.update({k: v for k, v in vars(traceback).items() if not k.startswith("__")})
    shim.format_exc = format_exc  # type: ignore[attr-defined]
    return shim


def install_in_dynamic_host() -> bool:
    """In the `python -m pulumi.dynamic` process, route the host's traceback formatting through
    format_exc; anywhere else (the Pulumi program, tests) do nothing. True when installed."""
    host: Any = sys.modules.get("__main__")
    spec = getattr(host, "__spec__", None)
    if spec is None or spec.name != _HOST_MODULE:
        return False
    if not hasattr(host, "_abort_with_traceback"):
        return False  # another host layout: leave it as it is
    current = getattr(host, "traceback", None)
    if current is traceback:
        host.traceback = _host_traceback()
    return getattr(host.traceback, "format_exc", None) is format_exc

"""Moved to `ipybox.mcp_client`; this module keeps the old import path working."""

from ipybox.mcp_client.params import ServerParamsError, transport_of
from ipybox.mcp_client.placeholders import (
    SECRET_PLACES,
    PlaceholderError,
    Placeholders,
    placeholder_names,
    placeholder_values,
    redact,
    resolve,
)
from ipybox.mcp_client.session import describe_error, list_all_tools, open_session
from ipybox.mcp_client.stdio import PASSED_THROUGH, ServerStartError, StderrTail, passed_through_env

__all__ = [
    "PASSED_THROUGH",
    "SECRET_PLACES",
    "PlaceholderError",
    "Placeholders",
    "ServerParamsError",
    "ServerStartError",
    "StderrTail",
    "describe_error",
    "list_all_tools",
    "open_session",
    "passed_through_env",
    "placeholder_names",
    "placeholder_values",
    "redact",
    "resolve",
    "transport_of",
]

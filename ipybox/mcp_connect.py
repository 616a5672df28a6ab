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

__all__ = [
    "SECRET_PLACES",
    "PlaceholderError",
    "Placeholders",
    "ServerParamsError",
    "describe_error",
    "list_all_tools",
    "open_session",
    "placeholder_names",
    "placeholder_values",
    "redact",
    "resolve",
    "transport_of",
]

"""The private names of dependencies that ipybox uses (see `ipybox.upstream`), checked by name.

When one of these fails after an upgrade, the message names the ipybox helper to update.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

PRIVATE = [
    # (module, attribute path, where ipybox uses it)
    (
        "jupyter_client.asynchronous.client",
        "AsyncKernelClient._handle_kernel_info_reply",
        "upstream.adopt_kernel_info",
    ),
    ("mcp.shared._httpx_utils", "create_mcp_http_client", "upstream.mcp_http_client"),
    ("mcp.client._transport", "ReadStream", "mcp_client.repair (type hints)"),
    ("mcp.client._transport", "WriteStream", "mcp_client.repair (type hints)"),
    ("pydantic._internal._model_construction", "ModelMetaclass", "mcp_apigen.runtime"),
    ("pydantic.root_model", "_RootModelMetaclass", "mcp_apigen.runtime"),
]


@pytest.mark.parametrize(("module", "path", "user"), PRIVATE, ids=[f"{m}.{p}" for m, p, _ in PRIVATE])
def test_private_name_still_exists(module: str, path: str, user: str) -> None:
    try:
        obj: object = importlib.import_module(module)
        for part in path.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{module}.{path} is gone ({e}): update ipybox.{user}")


def test_kernel_info_handler_takes_the_reply() -> None:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    assert list(inspect.signature(AsyncKernelClient._handle_kernel_info_reply).parameters) == ["self", "msg"]


async def test_mcp_http_client_gets_the_headers() -> None:
    from ipybox.upstream import mcp_http_client

    async with mcp_http_client({"X-Test": "1"}) as client:
        assert client.headers["X-Test"] == "1"


def test_an_mcp_server_has_a_lowlevel_server_to_run() -> None:
    from mcp.server.lowlevel import Server
    from mcp.server.mcpserver import MCPServer

    from ipybox.upstream import lowlevel_server

    lowlevel = lowlevel_server(MCPServer("probe"))
    assert isinstance(lowlevel, Server) and lowlevel.name == "probe"
    parameters = list(inspect.signature(lowlevel.run).parameters)
    assert parameters[:3] == ["read_stream", "write_stream", "initialization_options"]

"""Fixtures for tool execution tests: generated APIs in a shared workspace, real servers, real kernels."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from servers.launch import HttpServer, everything_params, nasty_params, node_servers_installed

from ipybox import (
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.tool_exec import registry

requires_node = pytest.mark.skipif(not node_servers_installed(), reason="node MCP test servers not installed")


@dataclass
class Workspace:
    """A working directory whose `mcptools/` holds generated APIs, shared by a test module."""

    root: Path
    servers: dict[str, dict[str, Any]]

    def register(self) -> None:
        """Register the workspace's servers in the current (per-test) registry."""
        for name, params in self.servers.items():
            registry.register(name, params)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("workspace")
    servers = {"nasty": nasty_params()}
    if node_servers_installed():
        servers["everything"] = everything_params()

    async def generate() -> None:
        for name, params in servers.items():
            await generate_mcp_sources(name, params, root / "mcptools")

    with pytest.MonkeyPatch.context() as mp:  # registrations go to a throwaway registry
        mp.setenv("IPYBOX_STATE_DIR", str(tmp_path_factory.mktemp("generation-state")))
        asyncio.run(generate())
    return Workspace(root, servers)


@pytest.fixture
async def executor(workspace: Workspace, _state_dir: Path) -> AsyncIterator[CodeExecutor]:
    """An executor whose kernel runs in the shared workspace, with its servers registered."""
    workspace.register()
    async with CodeExecutor(working_dir=workspace.root, spare_kernel=False) as executor:
        yield executor


@pytest.fixture
def http_server(request: pytest.FixtureRequest) -> Iterator[HttpServer]:
    """server-everything over HTTP (`request.param`: "streamableHttp" or "sse"), killed at teardown."""
    if not node_servers_installed():
        pytest.skip("node MCP test servers not installed")
    server = HttpServer(getattr(request, "param", "streamableHttp")).start()
    try:
        yield server
    finally:
        server.kill()

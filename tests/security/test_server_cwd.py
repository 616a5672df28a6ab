"""A stdio MCP server never starts in the kernel-writable workspace (ipybox's own working directory).

Each variant plants in the workspace what makes a server's launcher run other code: a
`node_modules/` bin for `npx`, a module for `python -m`, an `.npmrc` whose `node-options`
preloads a script. A control start with `cwd` set to the workspace by the application shows
the plant works; the default start must leave the marker file unwritten.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ipybox.mcp_client.session import open_session

requires_npx = pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
MARKER = "marker"


def node_package(directory: Path, name: str, body: str = "") -> Path:
    directory.mkdir(parents=True)
    (directory / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", "bin": "cli.js"}))
    (directory / "cli.js").write_text(f"#!/usr/bin/env node\n{body}")
    (directory / "cli.js").chmod(0o755)
    return directory


def write_marker_js(outside: Path) -> str:
    return f"require('fs').writeFileSync({str(outside / MARKER)!r}, 'x')\n"


def node_bin(workspace: Path, outside: Path) -> dict[str, Any]:
    node_package(workspace / "node_modules" / "srv-probe", "srv-probe", write_marker_js(outside))
    (workspace / "node_modules" / ".bin").mkdir()
    (workspace / "node_modules" / ".bin" / "srv-probe").symlink_to("../srv-probe/cli.js")
    return {"command": "npx", "args": ["--offline", "srv-probe"]}


def python_module(workspace: Path, outside: Path) -> dict[str, Any]:
    (workspace / "srv_probe.py").write_text(f"open({str(outside / MARKER)!r}, 'w').close()\n")
    return {"command": sys.executable, "args": ["-m", "srv_probe"]}


def npmrc(workspace: Path, outside: Path) -> dict[str, Any]:
    (workspace / "evil.js").write_text(write_marker_js(outside))
    (workspace / ".npmrc").write_text(f"node-options=--require {workspace / 'evil.js'}\n")
    package = node_package(outside / "benign", "benign")  # the application's choice, outside the workspace
    return {"command": "npx", "args": ["--offline", str(package)]}


async def start(params: dict[str, Any]) -> None:
    """Try to open a session; the planted programs are no MCP servers, so it fails either way."""
    with pytest.raises(BaseException):  # noqa: B017 - any failure to connect will do
        async with asyncio.timeout(60):
            async with open_session(params, {}):
                pass


@pytest.mark.parametrize(
    "plant",
    [pytest.param(node_bin, marks=requires_npx), python_module, pytest.param(npmrc, marks=requires_npx)],
    ids=["node_modules bin", "python -m module", ".npmrc node-options"],
)
async def test_stdio_server_ignores_what_the_workspace_plants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plant: Callable[[Path, Path], dict[str, Any]]
) -> None:
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    params = plant(workspace, outside)
    monkeypatch.chdir(workspace)  # as the `ipybox` command runs

    await start(params)
    assert not (outside / MARKER).exists()

    await start(params | {"cwd": str(workspace)})  # control: the application chose the workspace
    assert (outside / MARKER).exists(), "control: the plant should run when the server starts there"

"""A stdio server that fails to start: its last stderr lines reach the error, in generation and in
tool calls; stdio servers get the TLS and proxy variables they need behind an intercepting proxy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from servers.hostile_args import assert_shown_safely
from servers.launch import REPO

from ipybox import CodeExecutionError, CodeExecutor, generate_mcp_sources
from ipybox.tool_exec import registry

FAILING = REPO / "tests" / "servers" / "failing_server.py"


def failing(count: int, *names: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"command": sys.executable, "args": [str(FAILING), str(count), *names]}
    return params | ({"env": env} if env else {})


async def generation_error(params: dict[str, Any], root: Path) -> str:
    with pytest.raises(ConnectionError) as info:
        await generate_mcp_sources("failing", params, root)
    return str(info.value)


async def test_generation_error_ends_with_the_servers_stderr(tmp_path: Path) -> None:
    message = await generation_error(failing(2), tmp_path)
    assert "Connection closed" in message
    assert message.endswith("stderr ended with:\n  log line 1\n  log line 2")


async def test_only_the_last_lines_are_kept(tmp_path: Path) -> None:
    message = await generation_error(failing(5000), tmp_path)
    assert "log line 5000" in message and "log line 4981" in message
    assert "log line 4980\n" not in message and len(message) < 2000


@pytest.mark.parametrize(
    "name", ["SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"]
)
async def test_tls_variables_reach_stdio_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "/etc/custom-ca.pem")
    monkeypatch.setenv("SOME_SECRET", "do-not-pass")
    message = await generation_error(failing(0, name, "SOME_SECRET"), tmp_path)
    assert f"{name}=/etc/custom-ca.pem" in message and "SOME_SECRET=unset" in message


async def test_proxy_variables_reach_stdio_servers_and_params_env_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    params = failing(0, "HTTPS_PROXY", "NO_PROXY", env={"NO_PROXY": "internal.example"})
    message = await generation_error(params, tmp_path)
    assert "HTTPS_PROXY=http://proxy.example:3128" in message and "NO_PROXY=internal.example" in message


@pytest.mark.timeout(90)
async def test_a_tool_call_to_a_failing_server_names_its_stderr(tmp_path: Path) -> None:
    params = failing(1)
    registry.register("failing", params, tmp_path)
    code = f"""
from ipybox.tool_exec.client import ToolRunner
ToolRunner("failing", {params!r}).run_sync("anything", {{}})
"""
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        with pytest.raises(CodeExecutionError) as info:
            await executor.execute(code)
    assert "Could not connect to MCP server 'failing'" in str(info.value)
    assert "stderr ended with:" in str(info.value) and "log line 1" in str(info.value)


async def test_a_secret_the_server_prints_is_redacted(tmp_path: Path) -> None:
    """A server that echoes its ${VAR}-filled env to stderr: the error shows the name, never the value."""
    params = failing(0, "API_KEY", env={"API_KEY": "${TOKEN}"})
    with pytest.raises(ConnectionError) as info:
        await generate_mcp_sources(
            "failing", params, tmp_path, placeholder_env={"TOKEN": "s3cret-token-value"}
        )
    assert "API_KEY=" in str(info.value) and "s3cret-token-value" not in str(info.value)


@pytest.mark.timeout(90)
async def test_a_secret_the_server_prints_never_reaches_the_kernel(tmp_path: Path) -> None:
    params = failing(0, "API_KEY", env={"API_KEY": "${TOKEN}"})
    registry.register("failing", params, tmp_path)
    code = f"""
from ipybox.tool_exec.client import ToolRunner
ToolRunner("failing", {params!r}).run_sync("anything", {{}})
"""
    secret = {"TOKEN": "s3cret-token-value"}
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False, placeholder_env=secret) as executor:
        with pytest.raises(CodeExecutionError) as info:
            await executor.execute(code)
    assert "API_KEY=" in str(info.value) and "s3cret-token-value" not in str(info.value)


async def test_the_servers_stderr_is_quoted_as_data(tmp_path: Path) -> None:
    """A server's stderr reaches whoever reads the error (a person's terminal, a client's window):
    what it wrote to redraw, recolour, set the clipboard or reorder text is shown as escapes."""
    hostile = "\r\x1b[2K\x1b[38:5:16m\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\\x9b2J\u202egnp.exe\u2028x\x07"
    message = await generation_error(failing(0, "HOSTILE", env={"HOSTILE": hostile}), tmp_path)
    assert_shown_safely(message, lines=True)
    assert (
        "HOSTILE=\\r\\u001b[2K\\u001b[38:5:16m\\u001b]52;c;Y3VybCBldmlsfHNo\\u001b\\\\u009b2J\\u202egnp.exe"
        "\\u2028x\\u0007" in message
    ), message


#: A stdio server that answers the handshake with an error whose message would act on a terminal.
REFUSING = r"""
import json, sys
request = json.loads(sys.stdin.readline())
message = "no\r\x1b[2K\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\ \x9b2J \u202eexe.txt \u2028 handshake"
error = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32000, "message": message}}
print(json.dumps(error), flush=True)
sys.stdin.read()
"""


async def test_the_servers_error_message_is_quoted_as_data(tmp_path: Path) -> None:
    message = await generation_error({"command": sys.executable, "args": ["-c", REFUSING]}, tmp_path)
    assert_shown_safely(message, lines=True)
    assert (
        "no\\r\\u001b[2K\\u001b]52;c;Y3VybCBldmlsfHNo\\u001b\\ \\u009b2J \\u202eexe.txt \\u2028 handshake"
        in message
    )

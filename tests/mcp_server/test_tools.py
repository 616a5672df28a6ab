"""Attack tests: on a server with authentication, no user has ipybox run a program on the host
unless the operator trusts the users with that (`--shared-trust`).

A sandboxed team of two (a token file): `install_package` would put one user's package into the
environment every user's kernel runs (a `.pth` file runs in the others' kernels), and a stdio
MCP server is a program ipybox starts on the host, outside every sandbox, where it reads the
other users' homes. Both are refused in every spelling and protocol era, saying why and what to
do; a team that trusts itself (`--shared-trust`, the control) gets both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, require_sandbox

from .conftest import running_http_ipybox, text_of
from .test_clients import connect
from .test_packages import PROBE, evil_wheel, new_venv, requires_uv, start_python

ALICE, BOB = "alice-secret-token-0123456789", "bob-secret-token-9876543210"


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(python, marker, env): a throwaway environment that runs ipybox (its packages from the
    project's), and an index serving a wheel whose `.pth` file writes `marker` at every start of
    that Python, as it would in every user's kernel (and ipybox's next start)."""
    base = tmp_path_factory.mktemp("shared-env")
    python = new_venv(base / "venv")
    site_packages = next((base / "venv" / "lib").glob("python*/site-packages"))
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (site_packages / "_ipybox_dev.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours)
    )
    marker, index = base / "pwned", base / "index"
    wheel = evil_wheel(index / PROBE, marker)
    (index / PROBE / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    (index / "index.html").write_text(f'<a href="{PROBE}/">{PROBE}</a>\n')
    return python, marker, {"UV_INDEX_URL": index.as_uri(), "PATH": SANDBOX_PATH}


def _stdio_servers(marker: Path) -> list[dict[str, object]]:
    """Registrations whose command writes `marker` on the host (and would read any user's home)."""
    write = f"open({str(marker)!r}, 'a').write('ran\\n')"
    return [
        {"command": "/bin/sh", "args": ["-c", f"echo ran >> {marker}"]},
        {"command": "sh", "args": ["-c", f"echo ran >> {marker}"], "cwd": "/"},
        {"command": sys.executable, "args": ["-c", write], "type": "stdio"},
        {"command": "env", "args": [sys.executable, "-c", write], "env": {"X": "1"}},
    ]


@requires_uv
@pytest.mark.timeout(180)
async def test_users_of_a_shared_server_run_no_programs_on_the_host(
    tmp_path: Path, shared_env: tuple[Path, Path, dict[str, str]]
) -> None:
    require_sandbox()
    python, marker, env = shared_env
    ran = tmp_path / "ran-on-host"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    command = [str(python), "-m", "ipybox.mcp_server"]
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    team = ["--auth-tokens", str(tokens), "--spare-kernels", "0"]
    specs = [
        PROBE,
        f"{PROBE} @ https://example.com/{PROBE}-99.0-py3-none-any.whl",
        "git+https://example.com/p.git",
    ]
    with running_http_ipybox(
        workspace, state, tmp_path / "log1", [*team, "--sandbox"], command=command, env=env
    ) as (
        _,
        url,
    ):
        for token, mode in [(ALICE, "auto"), (BOB, "legacy")]:
            async with connect(url, token, mode) as client:
                for spec in specs:
                    result = await client.call_tool("install_package", {"package_name": spec})
                    said = text_of(result)
                    assert result.is_error, said
                    for words in (
                        "every user",
                        "others' kernels",
                        "on the host",
                        "--shared-trust",
                        repr(spec),
                    ):
                        assert words in said, said
                for params in _stdio_servers(ran):
                    arguments = {"server_name": "x", "server_params": params}
                    said = text_of(await client.call_tool("register_mcp_server", arguments))
                    for words in ("on the ipybox host", "by URL only", "operator", "--shared-trust"):
                        assert words in said, said
                url_params = {"url": "http://127.0.0.1:9/mcp"}  # by URL: not this refusal
                said = text_of(
                    await client.call_tool(
                        "register_mcp_server", {"server_name": "y", "server_params": url_params}
                    )
                )
                assert "Could not connect" in said and "by URL only" not in said, said
    alone = tmp_path / "alone"  # a single user is no operator either: she reaches ipybox's user's files
    alone.write_text(f"carol {ALICE}\n")
    args = ["--auth-tokens", str(alone), "--sandbox"]
    with running_http_ipybox(workspace, state, tmp_path / "log0", args, command=command, env=env) as (_, url):
        async with connect(url, ALICE, "auto") as client:
            said = text_of(await client.call_tool("install_package", {"package_name": PROBE}))
            assert "--shared-trust" in said, said
            arguments = {"server_name": "x", "server_params": _stdio_servers(ran)[0]}
            said = text_of(await client.call_tool("register_mcp_server", arguments))
            assert "by URL only" in said, said
    start_python(python)
    assert not marker.exists() and not ran.exists()
    audit = (workspace / "users" / "alice" / ".ipybox" / "audit.jsonl").read_text()
    assert audit.count('"decision": "refused"') == len(_stdio_servers(ran)), audit

    args = [*team, "--shared-trust"]  # the control: a team whose users may run programs as ipybox's user
    with running_http_ipybox(workspace, state, tmp_path / "log2", args, command=command, env=env) as (_, url):
        async with connect(url, ALICE, "auto") as client:
            result = await client.call_tool("install_package", {"package_name": PROBE})
            assert not result.is_error, text_of(result)
            await client.call_tool(
                "register_mcp_server", {"server_name": "x", "server_params": _stdio_servers(ran)[0]}
            )
    start_python(python)
    assert marker.exists() and ran.exists(), "control: a trusted team's programs run on the host"


@pytest.mark.timeout(180)
async def test_stdio_servers_registered_while_allowed_run_no_users_code_later(tmp_path: Path) -> None:
    """A stdio server a user registered while the server trusted its users stays in her registry;
    once it no longer does, her kernel's calls would start it on the host: her code is refused,
    naming the servers, where they are registered and what to do."""
    require_sandbox()
    from .test_clients import NOTES_SERVER

    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\n")
    notes = {"command": sys.executable, "args": [str(NOTES_SERVER)]}
    trusted = ["--auth-tokens", str(tokens), "--shared-trust"]
    with running_http_ipybox(workspace, state, tmp_path / "log1", trusted) as (_, url):
        async with connect(url, ALICE, "auto") as client:  # trusted: her programs may run on the host
            said = text_of(
                await client.call_tool(
                    "register_mcp_server", {"server_name": "notes", "server_params": notes}
                )
            )
            assert "Generated" in said, said
    tokens.write_text(f"alice {ALICE}\nbob {BOB}\n")
    args = ["--auth-tokens", str(tokens), "--sandbox", "--spare-kernels", "0"]
    code = "from mcptools.notes import count_notes\nprint(count_notes.run(count_notes.Params()))"
    with running_http_ipybox(workspace, state, tmp_path / "log2", args) as (_, url):
        for mode in ("auto", "legacy"):
            async with connect(url, ALICE, mode) as client:
                result = await client.call_tool("execute_ipython_cell", {"code": code})
                said = text_of(result)
                assert result.is_error, said
                for words in (
                    "stdio MCP servers registered (notes)",
                    "operator",
                    str(state),
                    "--shared-trust",
                ):
                    assert words in said, said

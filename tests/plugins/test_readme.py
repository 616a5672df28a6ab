"""The README's two entry points, typed literally as a newcomer in the clone would: the
`claude plugin …` commands give a Connected ipybox, and the `uvx --from` command serves an MCP
client. Each runs in a fresh HOME."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from servers.launch import network_env

from .conftest import NODE_BIN, REPO, cell, claude, mcp_session, project_version, requires_claude


def bash_lines(section: str) -> list[str]:
    """The commands of the first ```bash block under the README heading `section`."""
    text = (REPO / "README.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```bash\n(.*?)```", text, re.S)
    assert match, f"no bash block under '## {section}'"
    return [line for line in match.group(1).splitlines() if line.strip() and not line.startswith("#")]


def newcomer_env(home: Path) -> dict[str, str]:
    """A shell of someone with Claude Code and uv installed, in a fresh HOME; uv keeps its cache."""
    cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE_", "ANTHROPIC_", "VIRTUAL_ENV"))}
    return (
        env
        | network_env()
        | {
            "HOME": str(home),
            "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "UV_CACHE_DIR": cache,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
    )


@requires_claude
@pytest.mark.timeout(300)
def test_readme_plugin_commands_give_a_connected_ipybox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    commands = bash_lines("Claude Code plugins")
    assert [c.split()[:3] for c in commands] == [
        ["claude", "plugin", "marketplace"],
        ["claude", "plugin", "install"],
    ]
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=newcomer_env(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    project = tmp_path / "some project"
    project.mkdir()
    listing = claude(home, "mcp", "list", cwd=project, timeout=240)
    assert re.search(r"^plugin:codeact-default:ipybox: .* - ✔ Connected$", listing.stdout, re.M), (
        listing.stdout
    )


@pytest.mark.timeout(300)
async def test_readme_uvx_command_serves_a_client(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    section = (REPO / "README.md").read_text().split("For MCP clients", 1)[1]
    [command] = re.findall(r"^uvx --from .*$", section, re.M)
    env = newcomer_env(home) | {"IPYBOX_STATE_DIR": str(tmp_path / "state")}
    async with mcp_session("bash", ["-c", command], REPO, env, tmp_path / "server.log") as session:
        info = session.server_info
        assert info is not None and (info.name, info.version) == ("ipybox", project_version())
        output = await cell(session, "import os; open('hello.txt', 'w').write('hi'); print(os.getcwd())")
    assert Path(output.strip()) == home / "my-project"
    assert (home / "my-project" / "hello.txt").read_text() == "hi"

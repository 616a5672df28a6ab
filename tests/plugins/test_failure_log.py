"""Where a plugin that cannot start says why (docs/plugins.md): `claude mcp list` shows only that
it failed; the launcher's one line is in Claude Code's MCP log for the project."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import REPO, claude, requires_claude
from .test_installed import path_without


@requires_claude
@pytest.mark.timeout(240)
def test_the_reason_is_in_claude_codes_mcp_log(claude_home: Path, tmp_path: Path) -> None:
    for args in (("marketplace", "add", str(REPO)), ("install", "codeact-default@ipybox")):
        done = claude(claude_home, "plugin", *args)
        assert done.returncode == 0, done.stdout + done.stderr
    project = tmp_path / "project"
    project.mkdir()
    listing = claude(claude_home, "mcp", "list", cwd=project, env={"PATH": path_without(tmp_path, "uv")})
    assert "plugin:codeact-default:ipybox:" in listing.stdout and "Failed to connect" in listing.stdout
    assert "needs uv" not in listing.stdout  # hence the log
    logs = claude_home / ".cache" / "claude-cli-nodejs" / re.sub(r"[^A-Za-z0-9]", "-", str(project))
    [log] = (logs / "mcp-logs-plugin-codeact-default-ipybox").glob("*.jsonl")
    errors = [json.loads(line).get("error", "") for line in log.read_text().splitlines()]
    assert any(
        e.startswith("Server stderr: ipybox plugin: needs uv, which is not installed") for e in errors
    ), errors

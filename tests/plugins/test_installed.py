"""The plugins as users get them: installed by the real Claude Code CLI in a fresh HOME, from a
local checkout or a git URL, checked with `claude mcp list`, and driven by a real MCP client
through the command Claude Code runs, in a project whose path has spaces."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from servers.launch import require_sandbox

from .conftest import (
    IPYBOX_TOOLS,
    REPO,
    UV_PLUGINS,
    Marketplace,
    cell,
    claude,
    install_plugins,
    mcp_session,
    project_version,
    requires_claude,
    run_launcher,
    tree,
)

WHO_RUNS = """\
import importlib.metadata, json, os, sys, ipybox
open("from-the-kernel.txt", "w").write("written by the kernel")
print(json.dumps({"ipybox": ipybox.__file__, "version": importlib.metadata.version("ipybox"),
                  "python": sys.executable, "cwd": os.getcwd()}))
"""


def connected(listing: str) -> dict[str, bool]:
    """Plugin server -> whether `claude mcp list` reported it Connected."""
    status = {}
    for line in listing.splitlines():
        if match := re.match(r"plugin:([\w-]+):ipybox: .* - (✔ Connected|✘ .*)$", line):
            status[match.group(1)] = match.group(2) == "✔ Connected"
    return status


def project_dir(root: Path) -> Path:
    project = root / "my project (with spaces)"
    project.mkdir()
    return project


def sandbox_if_needed(plugin: str) -> None:
    if plugin == "codeact-sandbox":
        require_sandbox()


@requires_claude
@pytest.mark.timeout(300)
def test_local_checkout_marketplace_connects(tmp_path: Path) -> None:
    """`claude plugin marketplace add <checkout>`, install, `claude mcp list`: Connected."""
    require_sandbox()
    home = tmp_path / "home"
    home.mkdir()
    install_plugins(home, str(REPO), UV_PLUGINS)
    project = project_dir(tmp_path)
    listing = claude(home, "mcp", "list", cwd=project, timeout=240)
    assert connected(listing.stdout) == dict.fromkeys(UV_PLUGINS, True), listing.stdout + listing.stderr
    assert list(project.iterdir()) == []  # connecting starts no kernel and leaves nothing in the project
    for plugin in UV_PLUGINS:  # from a local marketplace Claude Code runs the plugin in the checkout
        assert f"plugin:{plugin}:ipybox: {REPO / 'plugins' / plugin / 'core'}" in listing.stdout


@requires_claude
@pytest.mark.timeout(300)
def test_git_marketplace_connects(marketplace: Marketplace, tmp_path: Path) -> None:
    """From a git URL every uv plugin connects; the docker one says what is missing until its
    image is built (tests/plugins/test_docker.py builds and connects it)."""
    require_sandbox()
    listing = claude(marketplace.home, "mcp", "list", cwd=project_dir(tmp_path), timeout=240)
    status = connected(listing.stdout)
    assert {p: status.get(p) for p in UV_PLUGINS} == dict.fromkeys(UV_PLUGINS, True), listing.stdout
    for plugin in UV_PLUGINS:  # from a git marketplace, in the installed copy
        assert f"plugin:{plugin}:ipybox: {marketplace.plugins[plugin].command}" in listing.stdout


@requires_claude
def test_installed_copy_carries_the_core(marketplace: Marketplace) -> None:
    """The installer turned the plugin's symlinks into files: the copy runs without the repository."""
    for plugin in marketplace.plugins.values():
        core = plugin.root / "core"
        assert not core.is_symlink()
        assert not any(p.is_symlink() for p in core.rglob("*"))
        ours = {k: v for k, v in tree(REPO / "ipybox").items() if "__pycache__" not in k}
        assert {k: v for k, v in tree(core / "ipybox").items() if "__pycache__" not in k} == ours
        for name in ("pyproject.toml", "uv.lock", "README.md", "Dockerfile", "docker-build.sh"):
            assert (core / name).read_bytes() == (REPO / name).read_bytes(), name
        assert os.access(core / "bin" / "ipybox-mcp", os.X_OK)
        assert os.access(core / "bin" / "ipybox-docker", os.X_OK)


@requires_claude
@pytest.mark.timeout(400)
@pytest.mark.parametrize("plugin_name", UV_PLUGINS)
async def test_installed_plugin_runs_its_own_ipybox(
    plugin_name: str, marketplace: Marketplace, tmp_path: Path
) -> None:
    """The installed plugin's command serves this repository's ipybox, from inside the plugin, in
    the project it is started in; the second start reuses the environment the first one built."""
    sandbox_if_needed(plugin_name)
    plugin = marketplace.plugins[plugin_name]
    project = project_dir(tmp_path)
    env = plugin.env(project, IPYBOX_STATE_DIR=str(tmp_path / "state"))

    async with mcp_session(plugin.command, plugin.args, project, env, tmp_path / "first.log") as session:
        info = session.server_info
        assert info is not None and info.name == "ipybox" and info.version == project_version()
        assert {t.name for t in (await session.list_tools()).tools} == IPYBOX_TOOLS
        who = json.loads(await cell(session, WHO_RUNS))
    assert Path(who["ipybox"]).is_relative_to(plugin.root / "core"), who  # not the index's ipybox
    assert who["version"] == project_version()
    assert Path(who["python"]).is_relative_to(plugin.data), who
    assert Path(who["cwd"]) == project
    assert (project / "from-the-kernel.txt").read_text() == "written by the kernel"

    record = next(plugin.data.glob("venv/lib/python*/site-packages/ipybox-*.dist-info/RECORD"))
    built = record.stat().st_mtime_ns
    async with mcp_session(plugin.command, plugin.args, project, env, tmp_path / "second.log") as session:
        assert "42" in await cell(session, "print(6 * 7)")
    assert record.stat().st_mtime_ns == built, "the second start reinstalled ipybox"


def path_without(tmp_path: Path, *tools: str) -> str:
    """A PATH of links to everything the shell needs, less `tools` (and their other copies)."""
    keep = tmp_path / "bin"
    keep.mkdir()
    shell = ("sh", "dirname", "uname", "mkdir", "head", "grep", "id", "cat", "env", "printf")
    for tool in (*shell, "node", "uv", "srt", "bwrap", "socat", "rg"):
        found = shutil.which(tool)
        if found and tool not in tools:
            (keep / tool).symlink_to(found)
    return str(keep)


@requires_claude
@pytest.mark.parametrize(
    ("plugin_name", "missing", "expected"),
    [
        ("codeact-default", "uv", "needs uv, which is not installed: run 'python3 -m venv"),
        ("codeact-sandbox", "srt", "srt (npm install -g @anthropic-ai/sandbox-runtime)"),
        ("codeact-docker", "docker", "needs a container engine"),
    ],
)
def test_missing_tool_is_one_clear_line(
    plugin_name: str, missing: str, expected: str, marketplace: Marketplace, tmp_path: Path
) -> None:
    plugin = marketplace.plugins[plugin_name]
    project = project_dir(tmp_path)
    env = plugin.env(project, PATH=path_without(tmp_path, missing, "podman"), HOME=str(tmp_path))
    done = run_launcher(plugin, project, env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ipybox plugin: "), done.stderr
    assert expected in lines[0]

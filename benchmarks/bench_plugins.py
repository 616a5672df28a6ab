"""Cold and warm start of the codeact plugins, measured with the real Claude Code CLI, beside a
bare `mcp` server plugin started the same way.

    uv run python benchmarks/bench_plugins.py [--n 5] [--cold-uv-cache] [--checkout DIR]

In a fresh HOME, Claude Code adds this repository as a marketplace and installs codeact-default
and codeact-sandbox (when a sandbox can run here). In a second fresh HOME, it adds a throwaway
marketplace with one plugin, `bare-mcp`, launched as ipybox was before its front: `uv run
--frozen --no-dev --project <plugin-core>` (its environment built in its own plugin data
directory from the same lock) of benchmarks/servers/no_kernel.py, a bare `mcp` MCPServer. Then
`claude mcp list` (Claude Code starts every plugin's server at once, initializes an MCP session
with each, reports Connected) runs once cold in each HOME (every plugin's first start: it builds
its environment), then --n times warm, alternating between the two.

Figures per server are Claude Code's own ("Successfully connected (transport: stdio) in N ms",
from its MCP logs): the time it waits for that server. The last row is the wall time of the
whole `claude mcp list`. PYTHONDONTWRITEBYTECODE is removed from the environment, as a user's
shell does not set it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import NODE_BIN, REPO

from ipybox.sandbox import sandbox_problem

CLAUDE = NODE_BIN / "claude"
BARE_LAUNCHER = """\
#!/bin/sh
set -eu
export UV_PROJECT_ENVIRONMENT="$CLAUDE_PLUGIN_DATA/venv"
exec uv run --quiet --frozen --no-dev --project {core} -- python {server}
"""
_CONNECTED = re.compile(r"Successfully connected \(transport: stdio\) in (\d+)ms")


def _uv() -> Path:
    """uv, as the plugins find it (on PATH, or where scripts/uv installs it in the real HOME)."""
    found = shutil.which("uv")
    data = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    return Path(found) if found else data / "ipybox" / "uv-venv" / "bin" / "uv"


def claude_env(home: Path, uv_cache: Path | None) -> dict[str, str]:
    drop = ("CLAUDE_", "ANTHROPIC_", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(NODE_BIN), str(_uv().parent), env.get("PATH", "")]),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    # uv finds its cache through HOME: keep the user's (or the empty one asked for)
    cache = uv_cache or subprocess.run([_uv(), "cache", "dir"], capture_output=True, text=True).stdout.strip()
    return env | {"UV_CACHE_DIR": str(cache)}


def claude(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [str(CLAUDE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"claude {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def bare_marketplace(root: Path) -> Path:
    """A marketplace with one plugin that starts a bare `mcp` server the way ours start ipybox."""
    root = root / "bare-market"
    plugin = root / "plugins" / "bare-mcp"
    (plugin / ".claude-plugin").mkdir(parents=True)
    (root / ".claude-plugin").mkdir()
    manifest = {"name": "bare-mcp", "version": "0.0.1", "description": "a bare mcp server"}
    (plugin / ".claude-plugin" / "plugin.json").write_text(json.dumps(manifest))
    launcher = plugin / "launch"
    server = REPO / "benchmarks" / "servers" / "no_kernel.py"
    launcher.write_text(BARE_LAUNCHER.format(core=REPO / "plugin-core", server=server))
    launcher.chmod(0o755)
    servers = {"mcpServers": {"bare": {"command": "${CLAUDE_PLUGIN_ROOT}/launch", "args": []}}}
    (plugin / ".mcp.json").write_text(json.dumps(servers))
    market = {
        "name": "bench",
        "owner": {"name": "bench"},
        "plugins": [{"name": "bare-mcp", "source": "./plugins/bare-mcp", "version": "0.0.1"}],
    }
    (root / ".claude-plugin" / "marketplace.json").write_text(json.dumps(market))
    return root


def mcp_list(env: dict[str, str], project: Path, servers: list[str]) -> dict[str, Any]:
    """Seconds Claude Code waited for each server to connect (NaN: it gave up), and the whole
    command's ("total")."""
    logs = Path(env["HOME"]) / ".cache" / "claude-cli-nodejs"
    before = set(logs.rglob("*.jsonl")) if logs.exists() else set()
    started = time.perf_counter()
    listing = claude(env, project, "mcp", "list")
    times = {"total": time.perf_counter() - started}
    for server in servers:
        line = next((x for x in listing.splitlines() if x.startswith(f"{server}:")), "")
        if not line.endswith("✔ Connected"):
            times[server] = math.nan
            continue
        directory = "mcp-logs-" + server.replace(":", "-")
        (log,) = [p for p in logs.rglob(f"{directory}/*.jsonl") if p not in before]
        found = _CONNECTED.search(log.read_text())
        if found is None:
            raise RuntimeError(f"no connection time in {log}")
        times[server] = int(found.group(1)) / 1000
    return times


def _cell(seconds: float) -> str:
    return f"{'failed':>8}" if math.isnan(seconds) else f"{seconds:>8.2f}"


def installed(
    home: Path, project: Path, uv_cache: Path | None, source: str, plugins: list[str]
) -> dict[str, str]:
    """The environment of Claude Code in a fresh `home` with `plugins` installed from `source`."""
    home.mkdir()
    env = claude_env(home, uv_cache)
    claude(env, project, "plugin", "marketplace", "add", source)
    for plugin in plugins:
        claude(env, project, "plugin", "install", plugin)
    return env


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=5, help="warm runs of `claude mcp list` (default 5)")
    parser.add_argument("--cold-uv-cache", action="store_true", help="first start from an empty uv cache")
    parser.add_argument(
        "--checkout", type=Path, default=REPO, help="the marketplace to measure, e.g. an older commit's tree"
    )
    args = parser.parse_args()
    if not CLAUDE.exists():
        print("the Claude Code CLI is not installed: npm ci", file=sys.stderr)
        return 2
    os.environ["PATH"] = os.pathsep.join([str(NODE_BIN), os.environ.get("PATH", "")])  # srt, for the check
    plugins = ["codeact-default"] + (["codeact-sandbox"] if sandbox_problem() is None else [])

    with tempfile.TemporaryDirectory(prefix="ipybox-bench-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        uv_cache = root / "uv-cache" if args.cold_uv_cache else None
        ours = installed(
            root / "ours", project, uv_cache, str(args.checkout), [f"{p}@ipybox" for p in plugins]
        )
        bare = installed(root / "bare", project, uv_cache, str(bare_marketplace(root)), ["bare-mcp@bench"])
        servers = [f"plugin:{p}:ipybox" for p in plugins]
        baseline = ["plugin:bare-mcp:bare"]
        load = os.getloadavg()[0]
        cold = mcp_list(ours, project, servers) | {"bare": mcp_list(bare, project, baseline)}
        warm = []
        for _ in range(args.n):  # alternated, so that both sides see the same load
            warm.append(mcp_list(ours, project, servers) | {"bare": mcp_list(bare, project, baseline)})
        left = sorted(p.name for p in project.iterdir())

    cache = "empty uv cache" if args.cold_uv_cache else "warm uv cache"
    print(f"load average at the start: {load:.2f}; {cache}")
    print(f"{'claude mcp list: connected in (s)':<40}{'cold':>8}{'warm':>8}")
    for server in [*servers, "total"]:
        label = "whole `claude mcp list`" if server == "total" else server.removeprefix("plugin:")
        print(f"{label:<40}{_cell(cold[server])}{_cell(statistics.median(w[server] for w in warm))}")
    for key in (baseline[0], "total"):
        label = "bare: " + ("whole `claude mcp list`" if key == "total" else key.removeprefix("plugin:"))
        middle = statistics.median(w["bare"][key] for w in warm)
        print(f"{label:<40}{_cell(cold['bare'][key])}{_cell(middle)}")
    print(f"warm: median of {args.n}; failed: Claude Code gave up on the server (it waits 30 s)")
    print("bare: a bare `mcp` server as a plugin started the same way (uv run), alone in its HOME")
    print(f"left in the project: {left or 'nothing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

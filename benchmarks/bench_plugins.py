"""Start-to-Connected of the codeact-default plugin, measured with the real Claude Code CLI.

    uv run python benchmarks/bench_plugins.py [--n 5] [--cold-uv-cache]

Each figure is the wall time of `claude mcp list` (Claude Code starts the server, initializes an
MCP session, reports Connected) in a fresh HOME where this repository was added as a marketplace:
- cold: the plugin's first start, which builds its locked environment in the plugin's data dir
  (from uv's cache; with --cold-uv-cache from an empty cache, i.e. downloading every package);
- warm: later starts (median of --n);
- baseline: the same `claude mcp list` for ipybox added with `claude mcp add` as this checkout's
  installed console script, i.e. no launcher and no uv: what the plugin's own start costs on top.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import NODE_BIN, REPO

CLAUDE = NODE_BIN / "claude"


def claude_env(home: Path, uv_cache: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE_", "ANTHROPIC_", "VIRTUAL_ENV"))}
    env |= {
        "HOME": str(home),
        "PATH": f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if uv_cache is not None:
        env["UV_CACHE_DIR"] = str(uv_cache)
    return env


def claude(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [str(CLAUDE), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"claude {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done.stdout


def connect_seconds(env: dict[str, str], project: Path, server: str) -> float:
    """Seconds `claude mcp list` takes, checking that `server` came out Connected."""
    started = time.perf_counter()
    listing = claude(env, project, "mcp", "list")
    elapsed = time.perf_counter() - started
    line = next((x for x in listing.splitlines() if x.startswith(f"{server}:")), "")
    if not line.endswith("✔ Connected"):
        raise RuntimeError(f"{server} did not connect:\n{listing}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=5, help="warm starts per side (default 5)")
    parser.add_argument("--cold-uv-cache", action="store_true", help="first start from an empty uv cache")
    args = parser.parse_args()
    if not CLAUDE.exists():
        print("the Claude Code CLI is not installed: npm ci", file=sys.stderr)
        return 2
    console_script = Path(sys.executable).parent / "ipybox"

    with tempfile.TemporaryDirectory(prefix="ipybox-bench-") as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        plugin_home, direct_home = root / "plugin-home", root / "direct-home"
        plugin_home.mkdir()
        direct_home.mkdir()
        plugin_env = claude_env(plugin_home, root / "uv-cache" if args.cold_uv_cache else None)
        claude(plugin_env, project, "plugin", "marketplace", "add", str(REPO))
        claude(plugin_env, project, "plugin", "install", "codeact-default@ipybox")
        direct_env = claude_env(direct_home, None)
        claude(direct_env, project, "mcp", "add", "--scope", "user", "ipybox", "--", str(console_script))

        server = "plugin:codeact-default:ipybox"
        cold = connect_seconds(plugin_env, project, server)
        warm = [connect_seconds(plugin_env, project, server) for _ in range(args.n)]
        direct = [connect_seconds(direct_env, project, "ipybox") for _ in range(args.n)]

    warm_s, direct_s = statistics.median(warm), statistics.median(direct)
    cache = "empty uv cache" if args.cold_uv_cache else "warm uv cache"
    print(f"{'claude mcp list, Connected (s)':<44} {'plugin':>8} {'baseline':>9} {'ratio':>6}")
    print(
        f"{f'cold: first start, builds env ({cache})':<44} {cold:8.2f} {direct_s:9.2f} {cold / direct_s:6.2f}"
    )
    warm_label = f"warm: later starts, median of {args.n}"
    print(f"{warm_label:<44} {warm_s:8.2f} {direct_s:9.2f} {warm_s / direct_s:6.2f}")
    print("baseline: the same check for this checkout's `ipybox` console script (no launcher, no uv)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

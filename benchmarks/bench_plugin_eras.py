"""Cold and warm start of the plugin's launcher as the real `mcp` 2.x `Client` meets it, in both
protocol eras, beside a bare `mcp` server launched the same way.

    uv run python benchmarks/bench_plugin_eras.py [--n 5] [--checkout DIR]

Claude Code opens with the `initialize` handshake (bench_plugins.py times it); a 2026-07-28
client (`mode="auto"`) opens with `server/discover` instead and gives it 10 s before it falls
back to the handshake. Each run starts `plugin-core/bin/ipybox-mcp` with a plugin data directory
of its own, first empty (cold: the launcher builds the environment from uv's cache), then kept
(warm, --n times), and times from the start of the process to a session that has listed its
tools. The baseline, alternated with ours, is benchmarks/servers/no_kernel.py (a bare `mcp`
server) started by `uv run --project plugin-core` as bench_plugins.py starts it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import REPO
from bench_plugins import BARE_LAUNCHER, _uv
from mcp import StdioServerParameters
from mcp.client.client import Client

MODES = {"auto": "2026-07-28", "legacy": "handshake"}


async def start(launcher: Path, mode: str, data: Path, project: Path) -> float:
    """Seconds from starting `launcher` to a session in `mode` that has listed the tools."""
    drop = ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE", "CLAUDE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = os.pathsep.join([str(_uv().parent), env.get("PATH", "")])
    env["CLAUDE_PLUGIN_DATA"] = str(data)
    params = StdioServerParameters(command=str(launcher), args=[], env=env, cwd=str(project))
    started = time.perf_counter()
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()
        return time.perf_counter() - started


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=5, help="warm starts per launcher and era (default 5)")
    parser.add_argument("--checkout", type=Path, default=REPO, help="the tree to measure (an older commit's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ipybox-bench-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        bare = root / "bare-launch"
        server = REPO / "benchmarks" / "servers" / "no_kernel.py"
        bare.write_text(BARE_LAUNCHER.format(core=args.checkout / "plugin-core", server=server))
        bare.chmod(0o755)
        launchers = {"ipybox": args.checkout / "plugin-core" / "bin" / "ipybox-mcp", "bare": bare}
        load = os.getloadavg()[0]
        figures: dict[tuple[str, str], tuple[float, list[float]]] = {}
        for mode in MODES:
            for name, launcher in launchers.items():
                figures[name, mode] = (await start(launcher, mode, root / f"{name}-{mode}", project), [])
            for _ in range(args.n):  # alternated, so that both see the same load
                for name, launcher in launchers.items():
                    warm = await start(launcher, mode, root / f"{name}-{mode}", project)
                    figures[name, mode][1].append(warm)
            shutil.rmtree(root / f"bare-{mode}", ignore_errors=True)
    print(f"load average at the start: {load:.2f}; warm uv cache")
    print(f"{'opened and listed tools in (s)':<36}{'cold':>8}{'warm':>8}")
    for (name, mode), (cold, warm) in figures.items():
        print(f"{name + ', ' + MODES[mode] + ' era':<36}{cold:>8.2f}{statistics.median(warm):>8.2f}")
    print(f"warm: median of {args.n}; bare: no_kernel.py behind `uv run --project plugin-core`")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

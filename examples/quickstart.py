"""ipybox quickstart: generate a typed API for a local MCP server, then run agent-style code
that calls it, approving each tool call at the prompt.

Run with `scripts/demo` (which installs what it needs), or `uv run python examples/quickstart.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path

from ipybox import (
    ApprovalRequest,
    CodeExecutionChunk,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.utils import arun

REPO = Path(__file__).resolve().parent.parent
SERVER_PARAMS = {"command": str(REPO / "node_modules" / ".bin" / "mcp-server-everything"), "args": ["stdio"]}

# What an agent would write: several tool calls, a loop and some data handling in one action.
AGENT_CODE = """
from mcptools.everything import get_structured_content as weather, echo

readings = {}
for city in weather.Location:
    result = weather.run(weather.Params(location=city))
    readings[city.value] = result.temperature
    print(f"{city.value:12} {result.temperature:5.1f} °C  {result.conditions}")

warmest = max(readings, key=readings.get)
print(echo.run(echo.Params(message=f"warmest city: {warmest}")))
"""


async def main(workspace: Path, auto_approve: bool) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    print(f"1. Generating a Python API for the 'everything' MCP server in {workspace / 'mcptools'} ...")
    modules = await generate_mcp_sources("everything", SERVER_PARAMS, workspace / "mcptools")
    print(f"   {len(modules)} tool modules: {', '.join(modules)}\n")
    print(f"2. Running agent code in a fresh IPython kernel:\n{AGENT_CODE}")

    async with CodeExecutor(working_dir=workspace) as executor:
        try:
            await run_agent_code(executor, auto_approve)
        except CodeExecutionError as e:
            # The agent would see this error and adapt its next action.
            print(f"\n3. The agent's code failed:\n   {str(e).strip().splitlines()[-1]}")


async def run_agent_code(executor: CodeExecutor, auto_approve: bool) -> None:
    async for item in executor.stream(AGENT_CODE, chunks=True):
        match item:
            case ApprovalRequest():
                answer = "y" if auto_approve else await arun(input, f"   approve {item}? [Y/n] ")
                if answer.strip().lower() in ("", "y", "yes"):
                    await item.accept()
                else:
                    await item.reject()
            case CodeExecutionChunk(text=text):
                print(f"   | {text}", end="" if text.endswith("\n") else "\n")
            case CodeExecutionResult(text=text):
                print(f"\n3. Result returned to the agent:\n{text}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=REPO / ".demo-workspace")
    parser.add_argument("--yes", action="store_true", help="approve every tool call without asking")
    parser.add_argument("--clean", action="store_true", help="delete the workspace afterwards")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.workspace, args.yes))
    finally:
        if args.clean:
            shutil.rmtree(args.workspace, ignore_errors=True)

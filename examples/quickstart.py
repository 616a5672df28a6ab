"""ipybox quickstart: generate a typed API for a local MCP server, then run agent-style code
that calls it, approving each tool call at the prompt.

Run with `scripts/demo` (which installs what it needs), or `uv run python examples/quickstart.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import termios
from collections.abc import AsyncIterator
from pathlib import Path

from ipybox import (
    ApprovalRequest,
    CodeExecutionChunk,
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.tool_exec.approval import display

REPO = Path(__file__).resolve().parent.parent
SERVER_PARAMS = {"command": str(REPO / "node_modules" / ".bin" / "mcp-server-everything"), "args": ["stdio"]}

# What an agent would write: several tool calls, a loop and some data handling in one action.
AGENT_CODE = """
from mcptools.everything import get_structured_content as weather, echo

readings = {}
for city in weather.Location:
    result = weather.run(weather.Params(location=city))
    readings[city.value] = result.temperature  # in °F (73 in sunny LA), though its schema says celsius
    print(f"{city.value:12} {result.temperature:5.1f} °F  {result.conditions}")

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
            print(f"\n3. The agent's code failed:\n   {display.escape(str(e).strip().splitlines()[-1])}")


async def run_agent_code(executor: CodeExecutor, auto_approve: bool) -> None:
    # Everything the kernel prints is data for the terminal: shown with display.lines(), its escape
    # sequences and control characters cannot hide or redraw the prompt (str(item) escapes its own),
    # and each line of it is marked, so none passes for a line of the demo's.
    async for item in output_before_approvals(executor.stream(AGENT_CODE, chunks=True)):
        match item:
            case ApprovalRequest():
                answer = "y" if auto_approve else await ask(f"   approve {item}? [y/N] ")
                if answer.strip().lower() in ("y", "yes"):  # Enter alone declines
                    await item.accept()
                else:
                    await item.reject("declined by the user at the prompt")
            case CodeExecutionChunk(text=text):
                print(marked(text))
            case CodeExecutionResult(text=text):
                print(f"\n3. Result returned to the agent:\n{display.lines(text)}")


def marked(text: str) -> str:
    """The kernel's text as data (`display.lines`), every line of it marked `   | `: a line of its
    output cannot pass for one of the demo's own, such as a prompt."""
    return "\n".join(f"   | {line}" for line in display.lines(text.removesuffix("\n")).split("\n"))


Item = ApprovalRequest | CodeExecutionChunk | CodeExecutionResult


async def output_before_approvals(stream: AsyncIterator[Item], grace: float = 0.2) -> AsyncIterator[Item]:
    """The stream's items, with output the code printed before a tool call shown before its approval.

    The approval request reaches the application over the tool server's socket, often a moment
    before the kernel's output, which travels over Jupyter's messaging. While a request waits the
    kernel is paused, so whatever arrives within `grace` seconds was printed before the call.
    """
    items: asyncio.Queue[Item | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in stream:
                await items.put(item)
        finally:
            await items.put(None)

    task = asyncio.create_task(pump())
    try:
        while (item := await items.get()) is not None:
            if isinstance(item, ApprovalRequest):
                try:
                    while isinstance(early := await asyncio.wait_for(items.get(), grace), CodeExecutionChunk):
                        yield early
                    items.put_nowait(early)  # the next thing after the approval (its result, or the end)
                except TimeoutError:
                    pass
            yield item
        await task  # re-raises what ended the stream (e.g. CodeExecutionError)
    finally:
        task.cancel()


async def ask(prompt: str) -> str:
    """`input()` that Ctrl-C interrupts at once: the line is read on the event loop, not in a thread.

    Keys typed before the question is on the screen (a second Enter after the last answer, a "y"
    typed while the code still ran) are dropped first: only what the person types after reading
    this question answers it."""
    loop = asyncio.get_running_loop()
    if sys.stdin.isatty():
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    print(prompt, end="", flush=True)
    answer: asyncio.Future[str] = loop.create_future()

    def on_input() -> None:
        if not answer.done():
            answer.set_result(sys.stdin.readline())

    try:
        loop.add_reader(sys.stdin.fileno(), on_input)
    except (PermissionError, ValueError, OSError):  # stdin is a regular file: reading cannot block
        return sys.stdin.readline()
    try:
        line = await answer
    finally:
        loop.remove_reader(sys.stdin.fileno())
    if not line:
        raise EOFError("no answer: stdin is closed")
    return line


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=REPO / ".demo-workspace")
    parser.add_argument("--yes", action="store_true", help="approve every tool call without asking")
    parser.add_argument("--clean", action="store_true", help="delete the workspace afterwards")
    args = parser.parse_args()
    try:
        asyncio.run(main(args.workspace, args.yes))
    except KeyboardInterrupt:
        print("\ninterrupted: the kernel and the MCP server were stopped.", file=sys.stderr)
        sys.exit(130)
    finally:
        if args.clean:
            shutil.rmtree(args.workspace, ignore_errors=True)

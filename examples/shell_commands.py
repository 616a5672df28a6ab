"""Shell commands under approval: an application policy that allows read-only commands, and
cancel() for a cell that runs too long.

    uv run python examples/shell_commands.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.tool_exec.approval import display

READ_ONLY = ("ls", "echo", "cat", "wc")

AGENT_CODE = """
folder = "notes"
!mkdir -p {folder} && echo "first note" > {folder}/a.txt
!ls {folder}
lines = !wc -l {folder}/a.txt
print("counted:", lines)
"""


def allowed(cmd: str) -> bool:
    """The application's policy: only commands that read."""
    return cmd.split()[0] in READ_ONLY and "&&" not in cmd and ">" not in cmd


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with CodeExecutor(working_dir=Path(tmp), approve_shell_cmds=True) as executor:
            print("1. Agent code with shell commands, approved by a policy:")
            try:
                async for item in executor.stream(AGENT_CODE):
                    match item:
                        case ApprovalRequest(tool_name="shell", tool_args={"cmd": cmd}):
                            verdict = allowed(cmd)
                            print(f"   {'accept' if verdict else 'reject'}: {display.escape(cmd)}")
                            await (item.accept() if verdict else item.reject())
                        case CodeExecutionResult():
                            print(display.lines(item.text or ""))
            except CodeExecutionError as e:
                print("   the cell failed:", display.escape(str(e).strip().splitlines()[-1]))

            print("2. The agent writes the file from Python instead, then lists it:")
            code = "from pathlib import Path\nPath('notes').mkdir()\n"
            code += "Path('notes/a.txt').write_text('x')\n!ls notes"
            result = await executor.execute(code)  # execute() approves everything
            print("  ", display.lines(result.text or ""))

            print("3. A long cell, cancelled after a second; the kernel keeps its state:")
            task = asyncio.create_task(
                executor.execute("import time\nstep = 0\nwhile True:\n    step += 1\n    time.sleep(0.1)")
            )
            await asyncio.sleep(1)
            await executor.cancel()
            print("   cancelled result:", await task)
            print("   steps done before:", (await executor.execute("print(step > 0)")).text)


if __name__ == "__main__":
    asyncio.run(main())

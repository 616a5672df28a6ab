"""A sandboxed kernel: it runs code and calls approved tools, but cannot read `.env`, change
files outside the working directory or reach the network.

Needs sandbox-runtime (`srt`) and, on Linux, bubblewrap, socat and ripgrep (`scripts/setup`
installs them). Run with `uv run python examples/sandbox.py`.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from ipybox import CodeExecutionError, CodeExecutor

#: A file outside the working directory, in your home directory.
OUTSIDE = Path.home() / f"ipybox-example-{os.getpid()}.txt"

ATTEMPTS = {
    "read .env": "print(open('.env').read())",
    "write outside the working directory": f"open({str(OUTSIDE)!r}, 'w').write('x')",
    "reach the internet": "import urllib.request; urllib.request.urlopen('http://example.org', timeout=5)",
    "write in the working directory": "open('notes.txt', 'w').write('ok'); print(open('notes.txt').read())",
}


async def main() -> None:
    repo_bin = Path(__file__).resolve().parent.parent / "node_modules" / ".bin"
    os.environ["PATH"] = f"{repo_bin}{os.pathsep}{os.environ['PATH']}"  # a locally installed srt
    with tempfile.TemporaryDirectory() as workspace:
        (Path(workspace) / ".env").write_text("API_KEY=never-seen-by-the-kernel\n")
        async with CodeExecutor(sandbox=True, working_dir=Path(workspace)) as executor:
            for what, code in ATTEMPTS.items():
                try:
                    result = await executor.execute(code, timeout=30)
                except CodeExecutionError as e:
                    print(f"{what}: blocked -> {str(e).strip().splitlines()[-1]}")
                    continue
                if what == "write outside the working directory" and not OUTSIDE.exists():
                    # the sandbox lays a scratch file system over most of what is not the workspace
                    print(f"{what}: blocked -> written to the sandbox's scratch space, not to {OUTSIDE}")
                else:
                    print(f"{what}: allowed -> {result.text}")


if __name__ == "__main__":
    asyncio.run(main())

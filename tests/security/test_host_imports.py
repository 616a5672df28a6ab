"""Attack tests: a sandboxed kernel writes modules into its working directory, which is on the
host app's import path (the app runs from there, as `python app.py`, `python -m app` or
`python -c`); the host then imports those names lazily, as ipybox's MCP client does with `mcp`.
None of the planted modules may run on the host; the app's own module there still imports.

Each variant is a real app process with a real sandboxed kernel that plants a package
(`mcp/`, which ipybox's `open_session` imports lazily), a module shadowing an installed
distribution (`jwt.py`), one shadowing the standard library (`wave.py`) and a sourceless one
(`graphlib.pyc`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, require_sandbox

PLANT = r"""
import os, py_compile
def pwn(name):
    return f"open(os.path.join({os.getcwd()!r}, 'PWNED-{name}'), 'w').close()\nimport os\n"
os.makedirs("mcp", exist_ok=True)
open("mcp/__init__.py", "w").write("import os\n" + pwn("mcp"))
open("jwt.py", "w").write("import os\n" + pwn("jwt"))
open("wave.py", "w").write("import os\n" + pwn("wave"))
open("_graphlib_src.py", "w").write("import os\n" + pwn("graphlib"))
py_compile.compile("_graphlib_src.py", cfile="graphlib.pyc")
os.remove("_graphlib_src.py")
print(sorted(os.listdir(".")))
"""

APP = r"""
import asyncio, contextlib, importlib, json, sys
from ipybox import CodeExecutor
from ipybox.mcp_client.session import open_session

async def main():
    async with CodeExecutor(sandbox=True) as executor:
        planted = await executor.execute(PLANT)
        with contextlib.suppress(Exception):  # no such server: ipybox imports mcp, then fails
            async with open_session({"command": "ipybox-no-such-server"}):
                pass
        files = {"mcp": sys.modules["mcp"].__file__}
        for name in ("jwt", "wave", "graphlib", "mylib"):
            files[name] = importlib.import_module(name).__file__
        print(json.dumps({"planted": planted.text, "files": files}))

asyncio.run(main())
"""


def run_app(workspace: Path, how: str) -> tuple[dict[str, object], str]:
    """Run the app from `workspace` the way `how` names; its JSON result and its stderr."""
    source = f"PLANT = {PLANT!r}\n{APP}"
    (workspace / "app.py").write_text(source)
    (workspace / "mylib.py").write_text("VALUE = 1\n")  # the app's own module
    argv = {"script": ["app.py"], "module": ["-m", "app"], "command": ["-c", source]}[how]
    env = {**os.environ, "PATH": SANDBOX_PATH}
    done = subprocess.run(
        [sys.executable, *argv], cwd=workspace, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize("how", ["script", "module", "command"])
def test_kernel_written_modules_never_run_on_the_host(tmp_path: Path, how: str) -> None:
    require_sandbox()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result, stderr = run_app(workspace, how)
    assert "graphlib.pyc" in str(result["planted"]) and "mcp" in str(result["planted"])  # the plant worked
    assert not list(workspace.glob("PWNED-*")), f"host ran kernel-written modules: {stderr[-2000:]}"
    files = result["files"]
    assert isinstance(files, dict)
    for name in ("mcp", "jwt", "wave", "graphlib"):
        assert not Path(files[name]).resolve().is_relative_to(workspace.resolve()), (name, files[name])
    assert Path(files["mylib"]).resolve() == (workspace / "mylib.py").resolve()
    assert "is on this process's import path" in stderr and "PYTHONSAFEPATH" in stderr

"""Attack tests: a sandboxed kernel writes modules into its working directory, which is on the
host app's import path (the app runs from there, as `python app.py`, `python -m app` or
`python -c`); the host then imports those names lazily, as ipybox's MCP client does with `mcp`.
None of the planted modules may run on the host; the app's own module there still imports.

Each variant is a real app process with a real sandboxed kernel that plants a package
(`mcp/`, which ipybox's `open_session` imports lazily), a module shadowing an installed
distribution (`jwt.py`), one shadowing the standard library (`wave.py`), a sourceless one
(`graphlib.pyc`), and distribution metadata (`*.dist-info`) whose entry points name a module of
the kernel's as OpenTelemetry's context and propagators and as a pydantic plugin.
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
# entry points: OpenTelemetry loads its context and propagators (when mcp is first imported),
# pydantic its plugins, from whatever distribution metadata is on sys.path
open("otelpwn.py", "w").write("import os\n" + pwn("entrypoint") + "class Ctx:\n    pass\n")
points = "[opentelemetry_context]\ncontextvars_context = otelpwn:Ctx\n"
points += "[opentelemetry_propagator]\ntracecontext = otelpwn:Ctx\nbaggage = otelpwn:Ctx\n"
points += "[pydantic]\nevil = otelpwn\n"
for dist, version in (("kernel_plugins", "1.0"), ("opentelemetry_api", "99.0")):  # new, and shadowing
    info = f"{dist}-{version}.dist-info"
    os.makedirs(info, exist_ok=True)
    open(f"{info}/METADATA", "w").write(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    open(f"{info}/entry_points.txt", "w").write(points)
os.makedirs("opentelemetry/_logs", exist_ok=True)  # a portion of an installed namespace package
open("opentelemetry/_logs/__init__.py", "w").write("import os\n" + pwn("namespace"))
print(sorted(os.listdir(".")))
"""

APP = r"""
import asyncio, contextlib, importlib, json, sys
from ipybox import CodeExecutor
from ipybox.mcp_client.session import open_session

async def main():
    async with CodeExecutor(sandbox=True) as executor:
        planted = await executor.execute(PLANT)
        loaded_before = set(sys.modules)
        with contextlib.suppress(Exception):  # no such server: ipybox imports mcp, then fails
            async with open_session({"command": "ipybox-no-such-server"}):
                pass
        files = {"mcp": sys.modules["mcp"].__file__}
        sys.path.append("/no-such-dir")  # Python computes namespace packages' paths again
        for name in ("jwt", "wave", "graphlib", "opentelemetry._logs", "mylib"):
            files[name] = importlib.import_module(name).__file__
        import opentelemetry.propagate, pydantic
        from importlib import metadata
        class Model(pydantic.BaseModel):  # pydantic loads its plugins for a new model, if not yet
            x: int = 0
        seen = {
            "otel_loaded_first": "opentelemetry.context" in loaded_before,
            "version": metadata.version("opentelemetry-api"),
            "groups": sorted(e.value for e in metadata.entry_points(group="opentelemetry_context")),
        }
        print(json.dumps({"planted": planted.text, "files": files, "seen": seen}))

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
    for name in ("mcp", "jwt", "wave", "graphlib", "opentelemetry._logs"):
        assert not Path(files[name]).resolve().is_relative_to(workspace.resolve()), (name, files[name])
    assert Path(files["mylib"]).resolve() == (workspace / "mylib.py").resolve()
    seen = result["seen"]
    assert isinstance(seen, dict) and "dist-info" in str(result["planted"])
    assert not seen["otel_loaded_first"]  # mcp brought OpenTelemetry in after the kernel wrote
    assert seen["version"] != "99.0" and not any("otelpwn" in v for v in seen["groups"])
    assert "is on this process's import path" in stderr and "PYTHONSAFEPATH" in stderr

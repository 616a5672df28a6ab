"""`!pip` and `%pip` install into the kernel's own Python, which is the Python of the application
(here a fresh environment made by uv, which has no pip, like uvx's, or one seeded with pip),
and a sandboxed kernel gets a clear refusal instead of a network or file-system error."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from servers.launch import NODE_BIN, require_sandbox

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor

APP = """
import asyncio, json, sys
from ipybox import CodeExecutor, CodeExecutionError

async def main():
    outputs = []
    async with CodeExecutor(sandbox={sandbox}, spare_kernel=False) as executor:
        for cell in json.loads(sys.argv[1]):
            try:
                outputs.append((await executor.execute(cell)).text or "")
            except CodeExecutionError as e:
                outputs.append("ERROR " + str(e))
    print(json.dumps(outputs))

asyncio.run(main())
"""


def probe_wheel(directory: Path, name: str) -> Path:
    """A minimal pure-Python wheel of package `name` (VALUE = 42), installable offline."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


def app_environment(root: Path, seed_pip: bool) -> Path:
    """A new environment (made by uv) that sees ipybox and its dependencies; its python."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    args = [uv, "venv", "--quiet", "--python", sys.executable, *(["--seed"] if seed_pip else []), str(root)]
    subprocess.run(args, check=True, capture_output=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_path("purelib")  # the test's environment: ipybox (editable) and its dependencies
    Path(site, "zz_ipybox_test.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return python


def run_app(python: Path, cells: list[str], tmp_path: Path, sandbox: bool = False) -> list[str]:
    """Run `cells` in a kernel of an application running on `python`; their outputs."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"IPYBOX_STATE_DIR": str(tmp_path / "state"), "PATH": f"{NODE_BIN}{os.pathsep}{env['PATH']}"}
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(python), "-c", APP.format(sandbox=sandbox), json.dumps(cells)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def check_import(name: str) -> str:
    fresh = "import importlib; importlib.invalidate_caches()"
    return f"{fresh}; import {name}, sys; print({name}.VALUE, sys.prefix)"


@pytest.mark.timeout(180)
def test_pip_and_magic_install_into_a_uv_environment_without_pip(tmp_path: Path) -> None:
    python = app_environment(tmp_path / "env", seed_pip=False)
    first, second = probe_wheel(tmp_path, "probe_one"), probe_wheel(tmp_path, "probe_two")
    cells = [
        f"!pip install {first}",
        check_import("probe_one"),
        f"%pip install {second}",
        check_import("probe_two"),
        "!pip list",
    ]
    outputs = run_app(python, cells, tmp_path)
    assert "ERROR" not in "".join(outputs), outputs
    assert outputs[1] == outputs[3].replace("probe_two", "probe_one") == f"42 {tmp_path / 'env'}"
    assert "restart the kernel" in outputs[2]
    assert "probe-one" in outputs[4] and "probe-two" in outputs[4]


@pytest.mark.timeout(180)
def test_pip_uses_the_environments_own_pip_where_it_has_one(tmp_path: Path) -> None:
    python = app_environment(tmp_path / "env", seed_pip=True)
    wheel = probe_wheel(tmp_path, "probe_three")
    outputs = run_app(
        python, ["!pip --version", f"!pip install -q {wheel}", check_import("probe_three")], tmp_path
    )
    assert str(tmp_path / "env") in outputs[0]  # "pip X from ENV/lib/.../pip (python 3.x)"
    assert outputs[2] == f"42 {tmp_path / 'env'}"


@pytest.mark.timeout(180)
def test_a_sandboxed_kernel_is_told_where_to_install_instead(tmp_path: Path) -> None:
    require_sandbox()
    python = app_environment(tmp_path / "env", seed_pip=False)
    wheel = probe_wheel(tmp_path / "env", "probe_four")  # a path the sandbox can read
    outputs = run_app(python, [f"!pip install {wheel}", f"%pip install {wheel}"], tmp_path, sandbox=True)
    for output in outputs:
        assert "pip: this kernel cannot write to its Python environment" in output
        assert "install_package" in output
        assert "restart the kernel" not in output  # nothing was installed, nothing to restart for
    assert not list((tmp_path / "env").rglob("probe_four/__init__.py"))


@pytest.mark.timeout(90)
async def test_pip_magic_asks_for_approval_like_any_shell_command(tmp_path: Path) -> None:
    asked: list[str] = []
    async with CodeExecutor(working_dir=tmp_path, approve_shell_cmds=True, spare_kernel=False) as executor:
        with pytest.raises(CodeExecutionError, match="ApprovalRejectedError"):
            async for item in executor.stream("%pip install probe-never-installed"):
                if isinstance(item, ApprovalRequest):
                    asked.append(item.tool_args["cmd"])
                    await item.reject()
    assert asked == ["pip install probe-never-installed"]

"""Attack tests: programs a sandboxed kernel writes into its working directory never run on the
host through an empty, `.` or relative `PATH` entry while the host's current directory is the
workspace (as the MCP server's is).

The kernel plants `git`, `env` and `srt` (and the same under `bin/`) that write a marker; an
executor started next in that workspace looks up git (for the workspace's configuration),
`env` and `srt` (to launch its kernel). A stdio MCP server's command, looked up on `PATH` in
the directory the application gave as its `cwd`, is the other host-side lookup.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, require_sandbox

from ipybox import CodeExecutor
from ipybox._programs import absolute_path, which
from ipybox.mcp_client.session import open_session

PLANTED = ("git", "env", "srt", "ipybox-probe-server")


def programs(workspace: Path) -> dict[str, str]:
    """Scripts that leave a marker in `workspace`, by path relative to it: each name at its root
    and in `bin/`."""
    script = "#!/bin/sh\ntouch {}/PWNED-{}\n"
    return {path: script.format(workspace, name) for name in PLANTED for path in (name, f"bin/{name}")}


def write_programs(workspace: Path) -> None:
    """What the kernel plants in `test_executor_start_runs_no_planted_program`, written here."""
    for path, text in programs(workspace).items():
        (workspace / path).parent.mkdir(exist_ok=True)
        (workspace / path).write_text(text)
        (workspace / path).chmod(0o755)


#: PATH entries that name a directory relative to the current one, before the real PATH.
RELATIVE_ENTRIES = {"empty": "", "dot": ".", "relative": "bin"}


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace (a git repository, so the sandbox asks git about it) where a sandboxed kernel
    planted its programs; the current directory is the workspace."""
    require_sandbox()
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    monkeypatch.delenv("IPYBOX_SRT", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    monkeypatch.chdir(workspace)
    return workspace


async def plant(workspace: Path) -> None:
    """A sandboxed kernel writes `programs(workspace)`."""
    code = (
        "import os\n"
        f"for path, text in {programs(workspace)!r}.items():\n"
        "    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "    open(path, 'w').write(text)\n"
        "    os.chmod(path, 0o755)\n"
        "print(sorted(os.listdir('bin')))\n"
    )
    async with CodeExecutor(spare_kernel=False, working_dir=workspace, sandbox=True) as executor:
        result = await executor.execute(code)
    assert result.text is not None and "srt" in result.text, result.text
    assert (workspace / "bin" / "git").stat().st_mode & 0o111


async def test_executor_start_runs_no_planted_program(planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await plant(planted)
    for variant, entry in RELATIVE_ENTRIES.items():
        monkeypatch.setenv("PATH", f"{entry}:{SANDBOX_PATH}")
        async with CodeExecutor(spare_kernel=False, working_dir=planted, sandbox=True) as executor:
            result = await executor.execute("print(6 * 7)")
        assert result.text == "42", (variant, result.text)
        assert not list(planted.glob("PWNED-*")), f"{variant} PATH entry ran a planted program"


@pytest.mark.parametrize("variant", RELATIVE_ENTRIES)
async def test_stdio_server_command_is_never_a_planted_program(
    planted: Path, monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    write_programs(planted)
    monkeypatch.setenv("PATH", f"{RELATIVE_ENTRIES[variant]}:{SANDBOX_PATH}")
    params = {"command": "ipybox-probe-server", "cwd": str(planted)}
    with contextlib.suppress(Exception):  # the real PATH has no such server: the start fails
        async with open_session(params):
            pass
    assert not list(planted.glob("PWNED-*")), f"{variant} PATH entry ran the planted server"


@pytest.mark.parametrize("variant", RELATIVE_ENTRIES)
def test_which_skips_relative_entries(planted: Path, variant: str) -> None:
    write_programs(planted)
    path = f"{RELATIVE_ENTRIES[variant]}:/usr/bin:/bin"
    assert absolute_path(path) == "/usr/bin:/bin"
    for name in ("git", "env"):
        found = which(name, path)
        assert found is not None and Path(found).is_absolute(), (variant, name, found)
        assert not Path(found).resolve().is_relative_to(planted.resolve()), (variant, name, found)
    assert which("ipybox-probe-server", path) is None


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("launcher", ["ipybox-mcp", "ipybox-docker"])
def test_plugin_launchers_run_no_planted_program(tmp_path: Path, launcher: str) -> None:
    """Claude Code starts a plugin's launcher in the project, which the kernel writes: its lookups
    of `uv` (ipybox-mcp) and `docker`/`podman` (ipybox-docker) never find a program planted there
    through a relative PATH entry. Here no real uv (nor a built image) is there: the launcher
    stops, saying what is missing."""
    project, home = tmp_path / "project", tmp_path / "home"
    home.mkdir()
    for folder in (project, project / "bin"):
        folder.mkdir()
        for name in ("uv", "docker", "podman"):
            (folder / name).write_text(f"#!/bin/sh\ntouch {project}/PWNED-{name}\n")
            (folder / name).chmod(0o755)
    for variant, entry in RELATIVE_ENTRIES.items():
        env = {"PATH": f"{entry}:/usr/bin:/bin", "HOME": str(home)}
        done = subprocess.run(
            [str(REPO / "plugin-core" / "bin" / launcher)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        assert not list(project.glob("PWNED-*")), f"{variant} PATH entry ran a planted program"
        assert done.returncode == 1 and done.stderr.startswith("ipybox plugin: "), done.stderr

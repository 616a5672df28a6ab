"""The codeact-docker plugin with a real container engine: the image built from the installed
plugin by its own docker-build.sh, `claude mcp list` Connected, and a real MCP client running code
in the container whose files land in the mounted project, owned by the calling user.

Where no Docker daemon runs, `scripts/podman-setup` provides podman behind a `docker` command
and a locally made Debian base image (no registry is needed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers.launch import network_env, unavailable

from .conftest import (
    IPYBOX_TOOLS,
    Marketplace,
    call,
    cell,
    claude,
    mcp_session,
    project_version,
    run_launcher,
)

PODMAN_DIR = Path(os.environ.get("IPYBOX_PODMAN_DIR", "/var/cache/ipybox-podman"))
PODMAN_BASE = "localhost/ipybox-base:bookworm"
IMAGE = "ipybox-test"

pytestmark = pytest.mark.timeout(900)


@dataclass
class Engine:
    bin_dir: Path | None  # prepended to PATH so that `docker` is this engine
    build_args: list[str]

    def env(self) -> dict[str, str]:
        path = os.environ.get("PATH", "")
        if self.bin_dir is not None:
            path = f"{self.bin_dir}{os.pathsep}{path}"
        return {"PATH": path, "IPYBOX_IMAGE": IMAGE}

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", *args],
            env=os.environ | self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def find_engine() -> Engine:
    """podman from scripts/podman-setup if there, else a `docker` whose daemon answers."""
    shim = PODMAN_DIR / "bin" / "docker"
    if shim.exists():
        engine = Engine(shim.parent, ["--network", "host", "--build-arg", f"BASE_IMAGE={PODMAN_BASE}"])
        if engine.docker("image", "exists", PODMAN_BASE).returncode == 0:
            return engine
        unavailable(f"{PODMAN_BASE} is missing: run scripts/podman-setup")
    if shutil.which("docker") and Engine(None, []).docker("info", timeout=30).returncode == 0:
        return Engine(None, [])
    unavailable("no container engine: run scripts/podman-setup (as root) or start a Docker daemon")


@pytest.fixture(scope="module")
def engine_with_image(marketplace: Marketplace) -> Engine:
    """The image, built as a user would: with the installed plugin's own docker-build.sh."""
    engine = find_engine()
    script = marketplace.plugins["codeact-docker"].root / "core" / "docker-build.sh"
    built = subprocess.run(
        [str(script), *engine.build_args],
        env=os.environ | network_env() | engine.env(),
        capture_output=True,
        text=True,
        timeout=800,
        stdin=subprocess.DEVNULL,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return engine


def test_claude_mcp_list_connects_the_docker_plugin(
    engine_with_image: Engine, marketplace: Marketplace, tmp_path: Path
) -> None:
    project = tmp_path / "docker project"
    project.mkdir()
    listing = claude(marketplace.home, "mcp", "list", cwd=project, env=engine_with_image.env(), timeout=240)
    line = next(x for x in listing.stdout.splitlines() if x.startswith("plugin:codeact-docker:ipybox:"))
    assert line.endswith("✔ Connected"), listing.stdout + listing.stderr


async def test_container_writes_into_the_project_as_the_caller(
    engine_with_image: Engine, marketplace: Marketplace, tmp_path: Path
) -> None:
    plugin = marketplace.plugins["codeact-docker"]
    project = tmp_path / "my project"
    project.mkdir()
    env = plugin.env(project) | engine_with_image.env()
    async with mcp_session(plugin.command, plugin.args, project, env, tmp_path / "server.log") as session:
        info = session.server_info
        assert info is not None and (info.name, info.version) == ("ipybox", project_version())
        assert {t.name for t in (await session.list_tools()).tools} == IPYBOX_TOOLS
        output = await cell(
            session,
            "import os, pathlib\n"
            "pathlib.Path('results/out.txt').parent.mkdir()\n"
            "pathlib.Path('results/out.txt').write_text('from the container')\n"
            "print(os.getcwd(), os.path.exists('/.dockerenv') or os.path.exists('/run/.containerenv'))",
        )
        assert output.strip() == "/app/workspace True", output
        assert await call(session, "reset")
    written = project / "results" / "out.txt"
    assert written.read_text() == "from the container"
    for path in (written, written.parent):
        assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid())


def test_missing_image_is_one_clear_line(
    engine_with_image: Engine, marketplace: Marketplace, tmp_path: Path
) -> None:
    plugin = marketplace.plugins["codeact-docker"]
    env = plugin.env(tmp_path) | engine_with_image.env() | {"IPYBOX_IMAGE": "ipybox-not-built"}
    done = run_launcher(plugin, tmp_path, env)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"ipybox plugin: the container image 'ipybox-not-built' is not built: run "
        f"'{plugin.root / 'core' / 'docker-build.sh'}', then restart Claude Code."
    ]

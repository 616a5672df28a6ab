"""Real kernel gateways for the tests and benchmarks: Jupyter Kernel Gateway and Enterprise Gateway.

Each runs from its own virtual environment WITHOUT ipybox (the gateway, ipykernel and pydantic
only), made once with uv under a cache directory (`IPYBOX_TEST_CACHE`, default
`~/.cache/ipybox-tests`), so reruns start in seconds.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from servers.launch import free_port, kill_group, network_env, wait_for_port

#: What each gateway's venv holds; the kernel needs ipykernel, and pydantic for generated modules.
KERNEL_PACKAGES = ("ipykernel>=6.29,<8", "pydantic>=2.11,<3")


@dataclass(frozen=True)
class GatewayKind:
    name: str
    package: str
    command: str
    app: str


KERNEL_GATEWAY = GatewayKind(
    "kernel-gateway", "jupyter-kernel-gateway==3.0.1", "jupyter-kernelgateway", "KernelGatewayApp"
)
ENTERPRISE_GATEWAY = GatewayKind(
    "enterprise-gateway",
    "jupyter-enterprise-gateway==3.3.0",
    "jupyter-enterprisegateway",
    "EnterpriseGatewayApp",
)
KINDS = {kind.name: kind for kind in (KERNEL_GATEWAY, ENTERPRISE_GATEWAY)}

#: A gateway config file that turns Nagle's algorithm off on the server's websocket connections.
NODELAY_CONFIG = """\
import tornado.websocket

_receive_frame_loop = tornado.websocket.WebSocketProtocol13._receive_frame_loop


async def _nodelay_loop(self):
    # tornado turns TCP_NODELAY off again after each HTTP response: set it once the websocket runs
    self.stream.set_nodelay(True)
    return await _receive_frame_loop(self)


tornado.websocket.WebSocketProtocol13._receive_frame_loop = _nodelay_loop
"""


class GatewayUnavailable(Exception):
    """The gateway's environment could not be made here (no uv, no package index)."""


def cache_dir() -> Path:
    return Path(os.environ.get("IPYBOX_TEST_CACHE", Path.home() / ".cache" / "ipybox-tests"))


def gateway_venv(kind: GatewayKind) -> Path:
    """The venv with `kind`'s gateway, ipykernel and pydantic (and no ipybox), made if missing."""
    venv = cache_dir() / "gateways" / kind.name
    stamp = venv / ".ipybox-ready"
    wanted = " ".join((kind.package, *KERNEL_PACKAGES))
    if stamp.is_file() and stamp.read_text() == wanted:
        return venv
    uv = shutil.which("uv")
    if uv is None:
        raise GatewayUnavailable("uv is not installed (needed to make the gateways' environments)")
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(Path.home())} | network_env()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    for argv in (
        [uv, "venv", "-q", "--python", python, str(venv)],
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            kind.package,
            *KERNEL_PACKAGES,
        ],
    ):
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise GatewayUnavailable(f"cannot make the {kind.name} environment: {done.stderr[-2000:]}")
    stamp.write_text(wanted)
    return venv


class GatewayProcess:
    """A gateway on 127.0.0.1 with an auth token, its kernels in its process group."""

    def __init__(
        self, kind: GatewayKind, venv: Path, token: str | None = None, nodelay: bool = False
    ) -> None:
        self.kind = kind
        self.venv = venv
        self.token = token or secrets.token_urlsafe(16)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._home = Path(tempfile.mkdtemp(prefix=f"ipybox-{kind.name}-"))
        self._config: Path | None = None
        if nodelay:
            self._config = self._home / "nodelay_config.py"
            self._config.write_text(NODELAY_CONFIG)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> GatewayProcess:
        app = self.kind.app
        argv = [
            str(self.venv / "bin" / self.kind.command),
            f"--{app}.ip=127.0.0.1",
            f"--{app}.port={self.port}",
        ]
        argv += [f"--{app}.auth_token={self.token}", f"--{app}.port_retries=0"]
        if self._config is not None:
            argv.append(f"--config={self._config}")
        # Only the venv's kernelspec: no user's or system's kernels, no ipybox on any path.
        env = {
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin",
            "HOME": str(self._home),
            "JUPYTER_DATA_DIR": str(self._home / "data"),
            "JUPYTER_CONFIG_DIR": str(self._home / "config"),
            "JUPYTER_RUNTIME_DIR": str(self._home / "runtime"),
            "KG_LIST_KERNELS": "True",  # GET /api/kernels: the tests check what runs
        }
        self.process = subprocess.Popen(
            argv,
            env=env,
            cwd=self._home,
            stdout=subprocess.DEVNULL,
            stderr=open(self._home / "gateway.log", "ab"),  # noqa: SIM115 - the child holds it
            start_new_session=True,
        )
        if (problem := wait_for_port(self.process, self.port, timeout)) is not None:
            log = self.log()
            self.kill()
            raise RuntimeError(f"{self.kind.name} {problem}:\n{log}")
        return self

    def add_kernelspec(self, name: str, hide: tuple[str, ...]) -> str:
        """A kernelspec `name` of the venv's Python in which the modules `hide` cannot be imported,
        as in a kernel image that lacks them; returns `name`."""
        blocked = "; ".join(f"sys.modules[{module!r}] = None" for module in hide)
        launch = f"import sys; {blocked}; from ipykernel.kernelapp import launch_new_instance as run; run()"
        spec = {
            "argv": [str(self.venv / "bin" / "python"), "-c", launch, "-f", "{connection_file}"],
            "display_name": name,
            "language": "python",
        }
        directory = self._home / "data" / "kernels" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "kernel.json").write_text(json.dumps(spec))
        return name

    def log(self) -> str:
        path = self._home / "gateway.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the gateway and its kernels (a crashed gateway host)."""
        if self.process is not None:
            kill_group(self.process)
            self.process = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self._home, ignore_errors=True)

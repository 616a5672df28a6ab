"""`GatewayBackend`: kernels on a Jupyter Kernel Gateway or Enterprise Gateway."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

from ipybox.kernel_mgr import transfer
from ipybox.kernel_mgr.backend import KernelLike, KernelSettings, ToolEndpoint, ToolListener
from ipybox.kernel_mgr.gateway.config import GATEWAY_TOKEN_VAR, GatewayConfig
from ipybox.kernel_mgr.gateway.kernel import GatewayKernel
from ipybox.kernel_mgr.gateway.mirror import DirectoryMirror
from ipybox.kernel_mgr.gateway.setup_cell import setup_code
from ipybox.kernel_mgr.in_kernel import WORKING_DIR_VAR
from ipybox.kernel_mgr.runtime_dir import make_runtime_dir, remove_runtime_dir
from ipybox.tool_exec.client import ENDPOINT_VAR, TOKEN_VAR

_WILDCARDS = ("0.0.0.0", "::", "")


class GatewayBackend:
    """Kernels started on the gateway at `url` (kernelspec `kernel_name`, token `token`, default:
    `IPYBOX_KERNEL_GATEWAY_TOKEN`).

    They call tools over TCP, at the tool server's port on `tool_host` (the address it listens
    on) as they see it from `kernel_tool_host` (default: `tool_host`), with the server's secret.
    A set-up cell gives each kernel ipybox's kernel modules, and the workspace's `mcptools/` is
    mirrored into it before each execution; files move in chunks through silent cells.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        kernel_name: str = "python3",
        tool_host: str = "localhost",
        kernel_tool_host: str | None = None,
    ) -> None:
        GatewayConfig(url)  # a malformed URL fails here, not at start
        self.url = url
        self.token = token or os.environ.get(GATEWAY_TOKEN_VAR)
        self.kernel_name = kernel_name
        self.tool_host = tool_host
        self.kernel_tool_host = kernel_tool_host
        self.runtime_dir: Path | None = None
        self._settings: KernelSettings | None = None

    async def prepare(self, settings: KernelSettings, tool_port: int | None) -> ToolListener:
        self._settings = settings
        self.runtime_dir = make_runtime_dir()
        return ToolListener(self.runtime_dir / "tools.sock", 0 if tool_port is None else tool_port)

    def kernel_factory(self, endpoint: ToolEndpoint) -> Callable[[], KernelLike]:
        settings = self._settings
        assert settings is not None and endpoint.port is not None, "prepare() first, with a TCP port"
        host = self.kernel_tool_host or self.tool_host
        if host in _WILDCARDS:  # a wildcard is where it listens, not how to reach it
            host = socket.getfqdn()
        host = f"[{host}]" if ":" in host else host
        env = settings.kernel_env() | {
            ENDPOINT_VAR: f"tcp://{host}:{endpoint.port}",
            TOKEN_VAR: endpoint.token,
        }
        config = GatewayConfig(
            self.url,
            token=self.token,
            kernel_name=self.kernel_name,
            env={k: v for k, v in settings.env.items() if k.startswith("KERNEL_")},
        )
        setup = setup_code(env, WORKING_DIR_VAR if settings.restore_working_dir else None)
        mirror = DirectoryMirror(settings.working_dir / "mcptools")
        return lambda: GatewayKernel(config, setup, mirror)

    async def upload(self, kernel: KernelLike, local: Path, remote: str) -> None:
        await transfer.upload(_own(kernel), local, remote)

    async def download(self, kernel: KernelLike, remote: str, local: Path) -> None:
        await transfer.download(_own(kernel), remote, local)

    async def close(self) -> None:
        remove_runtime_dir(self.runtime_dir)
        self.runtime_dir = None


def _own(kernel: KernelLike) -> GatewayKernel:
    if not isinstance(kernel, GatewayKernel):
        raise TypeError(f"GatewayBackend transfers files to its own kernels, not to {kernel!r}")
    return kernel

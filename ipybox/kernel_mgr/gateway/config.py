"""Which gateway, with which token and kernelspec, and the options that make no sense with one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from ipybox.kernel_mgr.backend import KernelStartError
from ipybox.kernel_mgr.limits import ResourceLimits

#: Where the CLI and MCP server read the gateway's token from.
GATEWAY_TOKEN_VAR = "IPYBOX_KERNEL_GATEWAY_TOKEN"


class GatewayError(KernelStartError):
    """The kernel gateway could not be reached, refused the request, or failed to start a kernel."""


@dataclass(frozen=True)
class GatewayConfig:
    """A kernel gateway: its base URL, token and the kernelspec to start."""

    url: str
    token: str | None = None
    kernel_name: str = "python3"
    #: Sent in the start request; gateways pass on only `KERNEL_*` names unless configured.
    env: Mapping[str, str] = field(default_factory=dict)
    request_timeout: float = 10

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"kernel_gateway_url must be http(s)://host:port, got {self.url!r}")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def ws_url(self, kernel_id: str) -> str:
        base = "ws" + self.url[len("http") :]
        return f"{base}/api/kernels/{quote(kernel_id)}/channels"


def resolve_gateway_url(url: str | None, host: str, port: int | None) -> str | None:
    """The gateway URL from `kernel_gateway_url`, or from `kernel_gateway_host`/`_port` (http)."""
    if port is None:
        if url is None and host not in ("localhost", "127.0.0.1", ""):
            raise ValueError(
                f"kernel_gateway_host={host!r} needs kernel_gateway_port (or use kernel_gateway_url): "
                "without a gateway ipybox starts local kernels, which is not what a remote host means."
            )
        return url
    from_host = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    if url is not None and url.rstrip("/") != from_host:
        raise ValueError(
            f"kernel_gateway_url={url!r} and kernel_gateway_host/port ({from_host}) name different "
            "gateways; give one of them."
        )
    return url or from_host


def gateway_option_problem(sandbox: bool, limits: ResourceLimits | None) -> str | None:
    """Why local-kernel options cannot go with a gateway (None if they can); for the SDK and the CLI."""
    if sandbox:
        return (
            "the sandbox (sandbox=True, --sandbox) applies to local kernels; kernels on a gateway are "
            "isolated by how the gateway launches them (e.g. one pod per kernel), see docs/remote-kernels.md."
        )
    if limits is not None and (limits.memory is not None or limits.processes is not None):
        return (
            "memory and process limits (--memory-limit, --process-limit) apply to local kernels; set "
            "them for kernels on a gateway where the gateway launches them (e.g. the kernel pod's resources)."
        )
    return None

"""The backends that ship, and which one an executor's options name."""

from __future__ import annotations

from pathlib import Path

from ipybox.kernel_mgr.backend import KernelBackend
from ipybox.kernel_mgr.gateway import GatewayBackend, gateway_option_problem, resolve_gateway_url
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.local import LocalBackend


def backend_for(
    *,
    gateway_url: str | None,
    gateway_host: str,
    gateway_port: int | None,
    gateway_token: str | None,
    kernel_name: str,
    tool_host: str,
    kernel_tool_host: str | None,
    sandbox: bool,
    sandbox_config: Path | None,
    limits: ResourceLimits,
) -> KernelBackend:
    """A `GatewayBackend` if a gateway is named (URL, or host and port), else a `LocalBackend`.

    Raises `ValueError` for options that contradict each other.
    """
    url = resolve_gateway_url(gateway_url, gateway_host, gateway_port)
    if url is None:
        return LocalBackend(sandbox, sandbox_config, limits)
    backend = GatewayBackend(url, gateway_token, kernel_name, tool_host, kernel_tool_host)
    if (problem := gateway_option_problem(sandbox, limits)) is not None:
        raise ValueError(problem[0].upper() + problem[1:])
    return backend

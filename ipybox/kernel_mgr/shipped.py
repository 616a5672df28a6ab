"""The backends that ship with ipybox, chosen from an executor's options: `backend_for`.

The seam itself (`kernel_mgr.backend`) knows no backend; this module knows both and is what
`CodeExecutor` asks when the application passes no `backend=`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ipybox.kernel_mgr.backend import KernelBackend
from ipybox.kernel_mgr.gateway.config import gateway_option_problem, resolve_gateway_url

if TYPE_CHECKING:
    from ipybox.kernel_mgr.limits import ResourceLimits


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
    sandbox_gpus: str | Sequence[int] | None = None,
) -> KernelBackend:
    """The shipped backend an executor's options name: a `GatewayBackend` if a gateway is named
    (URL, or host and port), else a `LocalBackend`. Raises `ValueError` for options that contradict
    each other (`sandbox_gpus` without `sandbox`, sandbox or limits with a gateway).

    The backend is imported once chosen: a local executor need not load the gateway's HTTP and
    websocket clients.
    """
    if sandbox_gpus is not None and not sandbox:
        raise ValueError(
            "sandbox_gpus applies only to sandboxed kernels (unsandboxed ones reach every GPU): add "
            "sandbox=True, or leave sandbox_gpus out."
        )
    url = resolve_gateway_url(gateway_url, gateway_host, gateway_port)
    if url is None:
        from ipybox.kernel_mgr.local import LocalBackend

        return LocalBackend(sandbox, sandbox_config, limits, sandbox_gpus)
    from ipybox.kernel_mgr.gateway.backend import GatewayBackend

    backend = GatewayBackend(url, gateway_token, kernel_name, tool_host, kernel_tool_host)
    if (problem := gateway_option_problem(sandbox, limits)) is not None:
        raise ValueError(problem[0].upper() + problem[1:])
    return backend

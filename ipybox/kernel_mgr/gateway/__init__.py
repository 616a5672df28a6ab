"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway.

- `config`: which gateway (URL, token, kernelspec) and the options that cannot go with one;
- `kernel`: `GatewayKernel`, one remote kernel over the gateway's REST and websocket API;
- `bootstrap` and `setup_cell`: the first cell each remote kernel runs (ipybox's kernel modules);
- `mirror`: `DirectoryMirror`, the workspace's `mcptools/` kept in sync in each kernel;
- `backend`: `GatewayBackend`, the `KernelBackend` that puts these together.

The names are imported when first used: `config` alone (what option checks need) does not load
the HTTP and websocket clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipybox._lazy import lazy_getattr

if TYPE_CHECKING:
    from ipybox.kernel_mgr.gateway.backend import GatewayBackend
    from ipybox.kernel_mgr.gateway.config import (
        GATEWAY_TOKEN_VAR,
        GatewayConfig,
        GatewayError,
        gateway_option_problem,
        resolve_gateway_url,
    )
    from ipybox.kernel_mgr.gateway.kernel import GatewayKernel, GatewayKernelLost
    from ipybox.kernel_mgr.gateway.mirror import DirectoryMirror
    from ipybox.kernel_mgr.gateway.setup_cell import KERNEL_MODULES, setup_code

_EXPORTS = {
    "GatewayBackend": "ipybox.kernel_mgr.gateway.backend",
    "GATEWAY_TOKEN_VAR": "ipybox.kernel_mgr.gateway.config",
    "GatewayConfig": "ipybox.kernel_mgr.gateway.config",
    "GatewayError": "ipybox.kernel_mgr.gateway.config",
    "gateway_option_problem": "ipybox.kernel_mgr.gateway.config",
    "resolve_gateway_url": "ipybox.kernel_mgr.gateway.config",
    "GatewayKernel": "ipybox.kernel_mgr.gateway.kernel",
    "GatewayKernelLost": "ipybox.kernel_mgr.gateway.kernel",
    "DirectoryMirror": "ipybox.kernel_mgr.gateway.mirror",
    "KERNEL_MODULES": "ipybox.kernel_mgr.gateway.setup_cell",
    "setup_code": "ipybox.kernel_mgr.gateway.setup_cell",
}

__all__ = [
    "GATEWAY_TOKEN_VAR",
    "KERNEL_MODULES",
    "DirectoryMirror",
    "GatewayBackend",
    "GatewayConfig",
    "GatewayError",
    "GatewayKernel",
    "GatewayKernelLost",
    "gateway_option_problem",
    "resolve_gateway_url",
    "setup_code",
]


__getattr__ = lazy_getattr(__name__, _EXPORTS)

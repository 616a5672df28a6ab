"""The public surface: the lazy `ipybox` namespace, the spec's import paths, typing and errors."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import ipybox
from ipybox.errors import IpyboxError

#: Every import path of the public documentation this package keeps working (module, names).
SPEC_PATHS = [
    (
        "ipybox",
        "ApprovalRequest CodeExecutionChunk CodeExecutionError CodeExecutionResult CodeExecutor "
        "generate_mcp_sources",
    ),
    ("ipybox.code_exec", "CodeExecutor CodeExecutionChunk CodeExecutionError CodeExecutionResult"),
    ("ipybox.utils", "arun"),
    ("ipybox.tool_exec.server", "ToolServer"),
    ("ipybox.tool_exec.client", "ToolRunner ToolRunnerError"),
    ("ipybox.tool_exec.approval.client", "ApprovalClient ApprovalRequest"),
    ("ipybox.tool_exec.approval.server", "ApprovalChannel"),
    ("ipybox.mcp_apigen", "generate_mcp_sources"),
    ("ipybox.kernel_mgr.gateway", "GatewayConfig GatewayError GatewayKernel DirectoryMirror"),
    ("ipybox.kernel_mgr.limits", "ResourceLimits"),
    # the kernel-backend seam (`CodeExecutor(backend=...)`, docs/architecture.md)
    ("ipybox.kernel_mgr.backend", "KernelBackend KernelSettings ToolEndpoint ToolListener KernelStartError"),
    ("ipybox.kernel_mgr.local", "LocalBackend"),
    ("ipybox.kernel_mgr.gateway", "GatewayBackend"),
    ("ipybox.mcp_client.session", "open_session list_all_tools"),
    ("ipybox.errors", "IpyboxError"),
]


@pytest.mark.parametrize(("module", "names"), SPEC_PATHS, ids=[m for m, _ in SPEC_PATHS])
def test_spec_import_paths_import(module: str, names: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in names.split() if not hasattr(imported, name)]
    assert not missing, f"{module} lacks {missing}"


def _type_checking_names() -> set[str]:
    tree = ast.parse(Path(ipybox.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {alias.asname or alias.name for node in block.body for alias in node.names}  # type: ignore[attr-defined]


def test_lazy_namespace_lists_agree_and_resolve() -> None:
    exports = ipybox._EXPORTS
    assert set(ipybox.__all__) == set(exports) == _type_checking_names()
    for name, module in exports.items():
        assert getattr(ipybox, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ipybox.nope  # noqa: B018


def test_package_is_marked_typed() -> None:
    """PEP 561: without `py.typed` next to the package (also in the wheel) type checkers ignore its hints."""
    assert (Path(ipybox.__file__).parent / "py.typed").is_file()


def _own_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(ipybox.__path__, "ipybox."):
        if info.name.endswith("__main__") or ".gentools.template" in info.name:
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, BaseException)
                and obj.__module__.startswith("ipybox")
                and not obj.__name__.startswith("_")
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_public_error_derives_from_ipybox_error() -> None:
    errors = _own_exceptions()
    assert len(errors) >= 15
    assert [e for e in errors if not issubclass(e, IpyboxError)] == []


def test_errors_keep_their_builtin_bases() -> None:
    from ipybox.mcp_client.params import ServerParamsError
    from ipybox.sandbox import SandboxError

    assert issubclass(SandboxError, RuntimeError) and issubclass(ServerParamsError, ValueError)

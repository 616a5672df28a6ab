"""The set-up cell a kernel on a gateway runs first: `bootstrap.py`'s source, its call and its files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ipybox.kernel_mgr.gateway import bootstrap

_PACKAGE = Path(__file__).resolve().parents[2]
#: The modules generated code and ipybox's kernel set-up need, copied into each remote kernel.
KERNEL_MODULES = (
    "errors.py",
    "tool_exec/client.py",
    "mcp_apigen/runtime.py",
    "mcp_apigen/discover.py",
    "kernel_mgr/in_kernel.py",
    "kernel_mgr/kernel_files.py",
)
_PACKAGE_INITS = ("__init__.py", "tool_exec/__init__.py", "mcp_apigen/__init__.py", "kernel_mgr/__init__.py")


def setup_code(env: Mapping[str, str], working_dir_var: str | None) -> str:
    """The first cell of a remote kernel: ipybox's kernel modules on `sys.path`, `env`, shell hooks.

    With `working_dir_var`, the kernel's start directory is recorded there, so that cells that
    change directory are moved back.
    """
    files = {"ipybox/" + rel: "" for rel in _PACKAGE_INITS}
    files |= {"ipybox/" + rel: (_PACKAGE / rel).read_text(encoding="utf-8") for rel in KERNEL_MODULES}
    source = Path(bootstrap.__file__).read_text(encoding="utf-8")
    # The module runs in a namespace of its own, so nothing of it is left among the user's names.
    return (
        "_ipybox_ns = {}\n"
        f"exec(compile({source!r}, 'ipybox-bootstrap', 'exec'), _ipybox_ns)\n"
        f"_ipybox_ns['bootstrap']({files!r}, {dict(env)!r}, {working_dir_var!r}, get_ipython())\n"
        "del _ipybox_ns\n"
    )

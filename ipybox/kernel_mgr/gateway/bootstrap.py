"""The first cell of a kernel on a gateway, which has no ipybox installed (standard library only).

`setup_cell.setup_code` sends this module's source and a call of `bootstrap()`: it writes the
modules generated code needs into a private directory first on `sys.path`, sets the kernel's
variables and installs ipybox's shell hooks. It then checks that the generated tool API's runtime
imports there; if not, importing a generated module raises an `ImportError` that says what the
kernel image lacks, and `bootstrap()` prints the same text for the executor to log.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
from typing import Any

#: The shipped module generated tool APIs import first; it needs pydantic 2 in the kernel.
RUNTIME = "ipybox.mcp_apigen.runtime"


def bootstrap(files: dict[str, str], env: dict[str, str], working_dir_var: str | None, shell: Any) -> None:
    """Install `files` (path under the site: text), `env` and the hooks into this kernel."""
    site = tempfile.mkdtemp(prefix="ipybox-kernel-")
    atexit.register(shutil.rmtree, site, True)
    for rel, text in files.items():
        _write(os.path.join(site, rel), text)
    for name in [m for m in sys.modules if m == "ipybox" or m.startswith("ipybox.")]:
        del sys.modules[name]  # an unrelated ipybox installed in the kernel's image
    sys.path.insert(0, site)
    importlib.invalidate_caches()
    os.environ.update(env)
    if working_dir_var is not None:
        os.environ[working_dir_var] = os.getcwd()
    import ipybox.kernel_mgr.kernel_files as kf

    kf.SITE, kf.HOME = site, os.getcwd()
    import ipybox.kernel_mgr.in_kernel as ik

    ik.install(shell)
    problem = runtime_problem()
    if problem is not None:
        _write(os.path.join(site, *RUNTIME.split(".")) + ".py", f"raise ImportError({problem!r})\n")
        importlib.invalidate_caches()
        sys.stdout.write(problem)


def runtime_problem() -> str | None:
    """What keeps the generated tool API's runtime from importing here, and how to fix it.

    It looks for pydantic without importing it (which would add a third of a second to each start).
    """
    try:
        found = importlib.util.find_spec("pydantic") is not None
        version = importlib.metadata.version("pydantic") if found else ""
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        found, version = False, ""
    if found and version.split(".")[0].isdigit() and int(version.split(".")[0]) >= 2:
        return None
    lacks = f"has pydantic {version}, but needs 2 or later" if found else "lacks pydantic"
    return (
        f"The kernel's Python ({sys.executable}) {lacks}, which ipybox's generated tool API (the "
        "`mcptools` modules) needs. Add it to the kernel image or the kernelspec's environment, e.g. "
        "`pip install 'pydantic>=2.11,<3'`; code that calls no generated tools runs meanwhile."
    )


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)

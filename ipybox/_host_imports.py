"""Keeps the host process from importing modules a sandboxed kernel wrote.

An app run as `python app.py` from the kernel's workspace (the default working directory is
the current one) has the workspace on `sys.path`, ahead of the standard library and installed
packages. A module the kernel writes there (`mcp/`, `ssl.py`, ...) would then run on the host the
first time anything in the process imports that name, as ipybox's host side and the libraries it
uses do lazily. `guard_workspace` installs a finder ahead of all others that looks a top-level
name up on the rest of the import path first: installed and standard-library modules can no
longer be shadowed from the workspace. Modules found only there (the app's own) still load from
it; that `guard_workspace` warns once per workspace about them, naming the fix.

Installed distributions' metadata is a second way in: `importlib.metadata` looks for
`*.dist-info` and `*.egg-info` on every `sys.path` entry, and libraries load the entry points it
finds there as plugins (OpenTelemetry its context and propagators when `mcp` is first imported,
pydantic its plugins), importing the module an entry point names. A `.dist-info` the kernel
writes into the workspace would make the host import a module of the kernel's. So while a
workspace is guarded, the search for distributions skips the `sys.path` entries in it (unless
the caller names the paths to search).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import logging
import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)


def _inside(entry: str, roots: Sequence[str]) -> bool:
    """Whether `sys.path` entry `entry` (`''` is the current directory) lies in one of `roots`."""
    if not isinstance(entry, str):
        return False
    real = os.path.realpath(entry or os.curdir)
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


class _WorkspaceGuard(importlib.abc.MetaPathFinder):
    """Finds top-level modules with guarded workspaces' `sys.path` entries searched last."""

    def __init__(self) -> None:
        self.roots: tuple[str, ...] = ()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        roots = self.roots
        if path is not None or not roots:  # a submodule: its package's own path decides
            return None
        entries = [entry for entry in sys.path if isinstance(entry, str)]
        rest = [entry for entry in entries if not _inside(entry, roots)]
        if len(rest) == len(entries):
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            if finder is importlib.machinery.PathFinder:
                spec = importlib.machinery.PathFinder.find_spec(fullname, rest, target)
            elif hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, None, target)
            else:
                continue
            if spec is not None:
                _keep_out(spec.submodule_search_locations)
                return spec
        return None  # only in the workspace (the app's own module): the usual search finds it


def _keep_out(locations: object) -> None:
    """A namespace package's path (`locations`), which Python computes again from the whole of
    `sys.path` whenever that changes, searched without the guarded workspaces' entries: else a
    portion the kernel wrote there (`opentelemetry/util/`) would come first and shadow an
    installed submodule not imported yet."""
    finder = getattr(locations, "_path_finder", None)
    if finder is None:  # a regular package: its path is fixed
        return

    def outside(name: str, path: list[str]) -> ModuleSpec | None:
        return finder(name, [entry for entry in path if not _inside(entry, _guard.roots)])  # type: ignore[no-any-return]

    locations._path_finder = outside  # type: ignore[attr-defined]


_guard = _WorkspaceGuard()
_lock = threading.Lock()
_Context = importlib.metadata.DistributionFinder.Context
_all_paths = _Context.path


def _distribution_paths(context: importlib.metadata.DistributionFinder.Context) -> list[str]:
    """Where distributions are searched for: as `context` says; by default (`sys.path`) without
    the entries in guarded workspaces, whose metadata a sandboxed kernel may have written."""
    paths = _all_paths.fget(context)  # type: ignore[attr-defined]
    roots = _guard.roots
    if not roots or "path" in vars(context):  # the caller chose where to look
        return paths  # type: ignore[no-any-return]
    return [entry for entry in paths if not _inside(entry, roots)]


def workspace_entries(workspace: Path) -> list[str]:
    """The `sys.path` entries that lie in `workspace` (`''` counts as the current directory)."""
    root = os.path.realpath(workspace)
    return [entry for entry in sys.path if isinstance(entry, str) and _inside(entry, [root])]


def guard_workspace(workspace: Path) -> None:
    """Keep modules a sandboxed kernel writes in `workspace` from shadowing installed or
    standard-library ones in this process; warn once if `workspace` is on `sys.path`."""
    root = os.path.realpath(workspace)
    with _lock:
        if _guard not in sys.meta_path:
            sys.meta_path.insert(0, _guard)
            _Context.path = property(_distribution_paths)  # type: ignore[assignment,method-assign]
        if root in _guard.roots:
            return
        _guard.roots = (*_guard.roots, root)
    if entries := workspace_entries(workspace):
        logger.warning(
            "The sandboxed kernel's working directory %s is on this process's import path "
            "(sys.path entries %s), so modules the kernel writes there are importable here. ipybox "
            "now loads installed and standard-library modules ahead of them, but your own modules "
            "there, and the next run of an app started from there, stay exposed to what the kernel "
            "writes. Run your app from another directory, start Python with -P (or set "
            "PYTHONSAFEPATH=1), or pass working_dir= a directory of its own.",
            root,
            entries,
        )

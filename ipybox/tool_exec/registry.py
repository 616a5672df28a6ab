"""The MCP servers an application has registered, per workspace: the only ones a tool server will start.

Each workspace (its resolved path) has its own file under the per-user state dir, so a server
registered in one workspace is unknown in another. `generate_mcp_sources(..., root_dir=X)`
registers in `X` and its parent; an executor trusts its working directory and the directories
its application put on the kernel's `PYTHONPATH` (`module_dirs`), so generated modules work
wherever they were written. Only the application decides those places: sandboxed kernels can
neither read nor write the state dir (see `ipybox.sandbox.config.kernel_policy`), and a kernel's
own `sys.path` or `os.environ` changes are never consulted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Registrations that hold in every workspace: only made by an explicit `register(..., workspace=None)`.
_ALL_WORKSPACES = "all-workspaces.json"


def state_dir() -> Path:
    """Where ipybox keeps per-user state, outside any workspace a kernel may write to."""
    return Path(_state_path())


def _state_path() -> str:
    if custom := os.environ.get("IPYBOX_STATE_DIR"):
        return custom
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "ipybox")


def registry_file(workspace: Path | None) -> Path:
    """The file holding the registrations of `workspace` (None: of every workspace)."""
    return Path(_registry_file(_state_path(), None if workspace is None else str(workspace), os.getcwd()))


@functools.lru_cache(maxsize=64)
def _registry_file(state: str, workspace: str | None, cwd: str) -> str:
    """`registry_file` as a string (cached: every tool call checks the registry)."""
    if workspace is None:
        return os.path.join(state, _ALL_WORKSPACES)
    return os.path.join(state, "workspaces", f"{_workspace_key(workspace, cwd)}.json")


@functools.lru_cache(maxsize=64)
def _workspace_key(workspace: str, cwd: str) -> str:
    """The file name of a workspace's registrations (cached: every tool call checks the registry)."""
    return hashlib.sha256(str(Path(cwd, workspace).resolve()).encode()).hexdigest()[:32]


def module_dirs(kernel_env: Mapping[str, str], working_dir: Path) -> list[Path]:
    """The directories `kernel_env`'s `PYTHONPATH` names (relative ones from `working_dir`)."""
    entries = kernel_env.get("PYTHONPATH", "").split(os.pathsep)
    return [(working_dir / entry).resolve() for entry in entries if entry]


def canonical(params: Mapping[str, Any]) -> str:
    """`params` as registrations keep them: JSON, keys sorted, no spaces."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def _load(path: Path) -> dict[str, list[str]]:
    """The servers registered in one file (a fresh copy); re-read only when the file has changed."""
    return {k: list(v) for k, v in _entries(str(path)).items()}


def _entries(path: str) -> dict[str, list[str]]:
    """The servers registered in one file, shared with the cache: read, never change."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return {}
    return _parse(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _parse(path: str, mtime_ns: int, size: int) -> dict[str, list[str]]:
    """Entries of one version of a file (the arguments after `path` identify the version)."""
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        data = json.loads(Path(path).read_text())
        servers = data.get("servers") if isinstance(data, dict) else None
        if isinstance(servers, dict):
            return {str(k): [str(p) for p in v] for k, v in servers.items() if isinstance(v, list)}
    return {}


def registered(workspace: Path) -> dict[str, list[dict[str, Any]]]:
    """The servers registered in `workspace` itself (not those for every workspace), each with the
    parameters it was registered with."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name, known in _entries(str(registry_file(workspace))).items():
        for params in known:
            with contextlib.suppress(json.JSONDecodeError):
                found.setdefault(name, []).append(json.loads(params))
    return found


def register(server_name: str, params: Mapping[str, Any], workspace: Path | None = None) -> None:
    """Record that the application trusts `server_name` with exactly these (unresolved) params in
    `workspace`; `None` trusts it in every workspace of this user (ipybox itself never does that)."""
    path = registry_file(workspace)
    servers = _load(path)
    known = servers.setdefault(server_name, [])
    entry = canonical(params)
    if entry in known:
        return
    known.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data: dict[str, Any] = {"servers": servers}
    if workspace is not None:
        data = {"workspace": str(Path(workspace).resolve())} | data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".servers-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def is_registered(server_name: str, params: Mapping[str, Any], workspace: Path | None = None) -> bool:
    """Whether `register()` was called for this name and params (by any process) in `workspace` or
    for every workspace. Without `workspace`: in any workspace at all (for tests and tools)."""
    if workspace is not None:
        return is_registered_in(server_name, canonical(params), (Path(os.getcwd(), workspace),))
    files = [str(registry_file(None)), *map(str, sorted((state_dir() / "workspaces").glob("*.json")))]
    entry = canonical(params)
    return any(entry in _entries(path).get(server_name, ()) for path in files)


def is_registered_in(server_name: str, canonical_params: str, workspaces: Iterable[Path]) -> bool:
    """`is_registered` in any of `workspaces` (absolute) or for every workspace, the params given
    in `canonical()` form: a tool server's check of each call, so every step is cached or done once."""
    state = _state_path()
    files = [_registry_file(state, str(place), "/") for place in workspaces]
    files.append(_registry_file(state, None, "/"))
    return any(canonical_params in _entries(path).get(server_name, ()) for path in files)

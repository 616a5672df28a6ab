"""The MCP servers an application has registered: the only ones a tool server will start."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def state_dir() -> Path:
    """Where ipybox keeps per-user state, outside any workspace a kernel may write to."""
    if custom := os.environ.get("IPYBOX_STATE_DIR"):
        return Path(custom)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ipybox"


def _canonical(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def _registry_file() -> Path:
    return state_dir() / "servers.json"


def _load() -> dict[str, list[str]]:
    """The registry's entries (a fresh copy); re-read only when the file has changed."""
    path = _registry_file()
    try:
        stat = path.stat()
    except FileNotFoundError:
        return {}
    return {k: list(v) for k, v in _parse(str(path), stat.st_mtime_ns, stat.st_size).items()}


@functools.lru_cache(maxsize=8)
def _parse(path: str, mtime_ns: int, size: int) -> dict[str, list[str]]:
    """Entries of one version of the file (the arguments after `path` identify the version)."""
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict):
            return {str(k): [str(p) for p in v] for k, v in data.items() if isinstance(v, list)}
    return {}


def register(server_name: str, params: Mapping[str, Any]) -> None:
    """Record that the application trusts `server_name` with exactly these (unresolved) params."""
    entries = _load()
    known = entries.setdefault(server_name, [])
    canonical = _canonical(params)
    if canonical in known:
        return
    known.append(canonical)
    path = _registry_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".servers-")
    with os.fdopen(fd, "w") as f:
        json.dump(entries, f, indent=1)
    os.replace(tmp, path)


def is_registered(server_name: str, params: Mapping[str, Any]) -> bool:
    """Whether `register()` was called for this name with these params (by any process)."""
    return _canonical(params) in _load().get(server_name, [])

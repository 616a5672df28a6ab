"""Finding the programs ipybox runs on the host on the absolute entries of `PATH` only.

An empty, `.` or other relative `PATH` entry names a directory relative to the current one,
which may be the workspace a sandboxed kernel writes: a planted `./git` or `./srt` there would
run on the host, outside the sandbox. Every host-side program lookup goes through `which`.
"""

from __future__ import annotations

import os
import shutil


def absolute_path(path: str | None = None) -> str:
    """`path` (default: `PATH`, else the system default) without its relative entries."""
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry))


def which(name: str, path: str | None = None) -> str | None:
    """The absolute path of program `name` on the absolute entries of `path` (default: `PATH`),
    or None; a `name` with a directory part is looked up as given, like `shutil.which` does."""
    found = shutil.which(name, path=absolute_path(path))
    return None if found is None else os.path.abspath(found)

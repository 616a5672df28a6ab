"""Protected paths that are symbolic links, put back on the host when a kernel replaced them.

A mount holds what a link leads to, never the link's own name: bubblewrap follows it, so a
`.git`, `.claude`, `.mcp.json`, `.env` or policy file that is a link to the real one (`repo`'s
checkouts, shared editor settings, `.env -> .env.local`) stays read-only where it leads, while
a sandboxed kernel can still remove or rename the link in the writable folder that holds it
and put a file or folder of its own under that name, which git, Claude Code or ipybox would
then use on the host. No mount can keep a name in a writable folder, so ipybox records each
such link before a kernel starts and checks it from the host with the repository sweep (see
`ipybox.sandbox.repo_sweep`): what stands in its place then is renamed aside (never removed:
`NAME.ipybox-disabled`, swept for repositories like anything else) and the link made again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

_ASIDE = ".ipybox-disabled"


def recorded(paths: Iterable[Path]) -> dict[str, str]:
    """Those of `paths` (absolute) whose last part is a symbolic link, with what each names."""
    found: dict[str, str] = {}
    for path in map(str, paths):
        with contextlib.suppress(OSError):
            found[path] = os.readlink(path)
    return found


def restore(links: dict[str, str], real: Callable[[str], str] = os.path.realpath) -> list[str]:
    """Make each of `links` (path: what it names) that is no longer that link the link again,
    with what was in its place renamed aside; the paths restored. `real` gives the real path
    of a link's folder as it was (no folder on the way may have become a link since: the host
    would then write where the kernel's link leads)."""
    restored = []
    for path, target in links.items():
        with contextlib.suppress(OSError):
            if os.readlink(path) == target:
                continue
        try:
            if _restore(path, target, real(os.path.dirname(path))):
                restored.append(path)
        except OSError as e:  # the next sweep tries again
            logger.warning("cannot restore the link %r that a sandboxed kernel replaced: %s", path, e)
    return restored


def _restore(path: str, target: str, real_folder: str) -> bool:
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if os.path.realpath(f"/proc/self/fd/{fd}") != real_folder:
            logger.warning("not restoring the link %r: a folder on its way is a link now", path)
            return False
        with contextlib.suppress(FileNotFoundError):
            os.lstat(name, dir_fd=fd)
            os.rename(name, _free(fd, name + _ASIDE), src_dir_fd=fd, dst_dir_fd=fd)
        os.symlink(target, name, dir_fd=fd)
    finally:
        os.close(fd)
    logger.warning(
        "a sandboxed kernel replaced the link %r; ipybox made the link again (to %r) and kept what "
        "was in its place beside it as *%s",
        path,
        target,
        _ASIDE,
    )
    return True


def _free(dir_fd: int, name: str) -> str:
    """`name`, or a name of its own beside it if that is taken."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return name
    return f"{name}-{secrets.token_hex(8)}"

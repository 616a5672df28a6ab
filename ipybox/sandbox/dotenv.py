"""The `.env` files a kernel may not read, found by one walk of ipybox's instead of srt's globs.

Every `.env` and `.env.*` below the workspace and below the packages of editable installs is
hidden from every kernel. srt can find them itself from `**/.env` globs, but it walks a folder
once per pattern, in JavaScript, at each kernel start: ~5-30 ms a walk on a 2-core machine,
eight walks for a checkout with an editable install. One walk here, in the order srt's would
take (symbolic links to directories followed, but for links leading back up the tree), names
the matches by their real paths. Where srt's own rules decide what is hidden (a match that is a
link, a directory that cannot be listed, a tree larger than `MAX_ENTRIES`), the folder keeps
the globs and srt walks it as before; so does one whose matches have names srt would read as
globs themselves (`.env.[a]`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: What srt would be asked to hide below a folder where the walk gives up.
PATTERNS = ("**/.env", "**/.env.*")
#: Entries one folder's walk reads at most; srt walks a larger tree itself.
MAX_ENTRIES = 50_000
#: Characters that make a `denyRead` entry a glob for srt.
_GLOB = frozenset("*?[]{}!")


def denials(folder: Path | str) -> list[str]:
    """What `denyRead` needs to hide every `.env` and `.env.*` below `folder`: their real paths
    (none if there are none), or srt's globs where its rules decide."""
    found = _matches(str(folder))
    if found is None:
        return [f"{folder}/{pattern}" for pattern in PATTERNS]
    return found


def _named(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


def _matches(folder: str) -> list[str] | None:
    """The real paths of the matches below `folder`, or None where srt has to decide."""
    base = os.path.realpath(folder)
    pending, listed, found, seen = [base], {base}, [], 0
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except FileNotFoundError:  # gone since: nothing below it to hide
            continue
        except OSError:  # srt hides a directory it cannot list whole
            return None
        seen += len(entries)
        if seen > MAX_ENTRIES:
            return None
        for entry in entries:
            path = os.path.join(directory, entry.name)
            if entry.is_symlink():
                if _named(entry.name):  # what a matching link hides is srt's rule
                    return None
                target = _directory_behind(path)
                if target is None or _at_or_under(directory, target) or _at_or_under(base, target):
                    continue  # not a directory, or back up the tree: srt does not list it either
                if target not in listed:
                    listed.add(target)
                    pending.append(target)
                continue
            if _named(entry.name):
                if not _GLOB.isdisjoint(path):  # srt would match it as a pattern, not by its name
                    return None
                found.append(path)
            if entry.is_dir(follow_symlinks=False) and path not in listed:
                listed.add(path)
                pending.append(path)
    return found


def _directory_behind(link: str) -> str | None:
    """The real path of the directory `link` leads to; None for anything else or nothing."""
    try:
        if not stat.S_ISDIR(os.stat(link).st_mode):
            return None
    except OSError:
        return None
    return os.path.realpath(link)


def _at_or_under(path: str, above: str) -> bool:
    """Whether `above` is `path` or one of its parents."""
    return path == above or path.startswith(above.rstrip("/") + "/")

"""The `.env` files a kernel may not read, found by one walk of ipybox's instead of srt's globs.

Every `.env` and `.env.*` below the workspace and below the packages of editable installs is
hidden from every kernel. srt can find them itself from `**/.env` globs, but it walks a folder
once per pattern, in JavaScript, at each kernel start: ~5-30 ms a walk on a 2-core machine,
eight walks for a checkout with an editable install. One walk here, in the order srt's would
take (symbolic links to directories followed, but for links leading back up the tree), names
the matches by their real paths. Where srt's own rules decide what is hidden (a match that is a
link, a directory that cannot be listed, a name srt would read as a glob itself, a tree larger
than `MAX_ENTRIES`), the folder keeps the globs and srt walks it as before.

srt mounts over each file it hides and refuses a sandbox of more than about 3,000 mounts, so a
kernel that made 3,500 empty `.env` files failed every later start in its workspace. Where a
walk finds more than `MAX_DOTENV`, the ones that changed longest ago are hidden (a change time
cannot be set back: the user's files are older than those a kernel made in numbers), with a
warning for the rest.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

#: What srt is asked to hide below a folder where the walk leaves it to srt.
PATTERNS = ("**/.env", "**/.env.*")
#: Entries one folder's walk reads at most; srt walks a larger tree itself.
MAX_ENTRIES = 50_000
#: Files hidden one by one below a folder at most (see the module's docstring).
MAX_DOTENV = 500
#: Characters that make a `denyRead` entry a glob for srt.
_GLOB = frozenset("*?[]{}!")


def denials(folder: Path | str) -> list[str]:
    """What `denyRead` needs to hide every `.env` and `.env.*` below `folder`: their real paths
    (none if there are none), or srt's globs where its rules decide."""
    walk = _walk(str(folder))
    if len(walk.found) > MAX_DOTENV:
        return _oldest(folder, walk.found)
    if walk.left_to_srt:
        return [f"{folder}/{pattern}" for pattern in PATTERNS]
    return walk.found


def _named(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


@dataclass
class _Walk:
    found: list[str] = field(default_factory=list)  # real paths of the plain matches
    left_to_srt: bool = False  # something only srt's rules decide: its globs hide this folder


def _walk(folder: str) -> _Walk:
    """The matches below `folder`, listing at most `MAX_ENTRIES` entries."""
    walk = _Walk()
    base = os.path.realpath(folder)
    pending, listed, seen = [base], {base}, 0
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except FileNotFoundError:  # gone since: nothing below it to hide
            continue
        except OSError:  # srt hides a directory it cannot list whole
            walk.left_to_srt = True
            continue
        seen += len(entries)
        if seen > MAX_ENTRIES:
            walk.left_to_srt = True
            return walk
        for entry in entries:
            path = os.path.join(directory, entry.name)
            if entry.is_symlink():
                if _named(entry.name):  # what a matching link hides is srt's rule
                    walk.left_to_srt = True
                    continue
                target = _directory_behind(path)
                if target is None or _at_or_under(directory, target) or _at_or_under(base, target):
                    continue  # not a directory, or back up the tree: srt does not list it either
                if target not in listed:
                    listed.add(target)
                    pending.append(target)
                continue
            if _named(entry.name):
                if _GLOB.isdisjoint(path):
                    walk.found.append(path)
                else:  # srt would match it as a pattern, not by its name
                    walk.left_to_srt = True
            if entry.is_dir(follow_symlinks=False) and path not in listed:
                listed.add(path)
                pending.append(path)
    return walk


def _oldest(folder: Path | str, found: list[str]) -> list[str]:
    def changed(path: str) -> int:
        try:
            return os.lstat(path).st_ctime_ns
        except OSError:
            return 0

    logger.warning(
        "%s holds %d .env files; the %d changed longest ago are hidden from the sandbox, not the rest "
        "(code in a kernel may have made them in numbers; remove those you do not use)",
        folder,
        len(found),
        MAX_DOTENV,
    )
    return sorted(found, key=changed)[:MAX_DOTENV]


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

"""The `.env` files a kernel may not read, found by one walk of ipybox's instead of srt's globs.

Every `.env` and `.env.*` below the workspace and below the packages of editable installs is
hidden from every kernel. srt can find them itself from `**/.env` globs, but it walks a folder
once per pattern, in JavaScript, at each kernel start: ~5-30 ms a walk on a 2-core machine,
eight walks for a checkout with an editable install. One walk here, in the order srt's would
take (symbolic links to directories followed, but for links leading back up the tree), names
the matches by their real paths. Where srt's own rules decide what is hidden (a match that is a
link, a directory that cannot be listed, a name srt would read as a glob itself), the folder
keeps the globs and srt walks it as before.

srt mounts over each file it hides and refuses a sandbox of more than about 3,000 mounts, so a
kernel that made 3,500 empty `.env` files failed every later start in its workspace. Where a
walk finds more than `MAX_DOTENV`, the ones that changed longest ago are hidden (a change time
cannot be set back: the user's files are older than those a kernel made in numbers), with a
warning for the rest. Matches left to srt's rules count too (its globs would mount each), and
past the bound what srt would have hidden for them is named here: where a matching link leads,
a folder that cannot be listed. The walk reads the whole tree, as srt's would.
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
#: Files hidden one by one below a folder at most (see the module's docstring).
MAX_DOTENV = 500
#: Characters that make a `denyRead` entry a glob for srt.
_GLOB = frozenset("*?[]{}!")


def denials(folder: Path | str) -> list[str]:
    """What `denyRead` needs to hide every `.env` and `.env.*` below `folder`: their real paths
    (none if there are none), or srt's globs where its rules decide."""
    walk = _walk(str(folder))
    if walk.count > MAX_DOTENV:  # srt's globs would mount every one: named here, the oldest
        return _oldest(folder, walk)
    if walk.links or walk.unlisted or walk.globbed:
        # and, named, the folders srt's globs hide whole (where links lead, folders named like a
        # `.env`): the writable binds ipybox pins on shallow folders would show them again
        led = {_leads_to(link, folder) for link in walk.links} | {p for p in walk.found if os.path.isdir(p)}
        return [f"{folder}/{pattern}" for pattern in PATTERNS] + sorted(p for p in led if p)
    return walk.found


def _named(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


@dataclass
class _Walk:
    found: list[str] = field(default_factory=list)  # real paths of the plain matches
    # what srt's rules decide (its globs hide this folder then): matching links, directories
    # that cannot be listed, and how many matches have glob characters in their paths
    links: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    globbed: int = 0

    @property
    def count(self) -> int:
        """What srt's globs would mount over, about: one a match, one an unlisted directory."""
        return len(self.found) + len(self.links) + len(self.unlisted) + self.globbed


def _walk(folder: str) -> _Walk:
    """Every match below `folder` (the whole tree: where srt would walk it, each match it
    finds is a mount, so how many there are must be known before srt is handed the globs)."""
    walk = _Walk()
    base = os.path.realpath(folder)
    pending, listed = [base], {base}
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except FileNotFoundError:  # gone since: nothing below it to hide
            continue
        except OSError:  # srt hides a directory it cannot list whole
            walk.unlisted.append(directory)
            continue
        for entry in entries:
            path = os.path.join(directory, entry.name)
            if entry.is_symlink():
                if _named(entry.name):  # what a matching link hides is srt's rule
                    walk.links.append(path)
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
                    walk.globbed += 1
            if entry.is_dir(follow_symlinks=False) and path not in listed:
                listed.add(path)
                pending.append(path)
    return walk


def _oldest(folder: Path | str, walk: _Walk) -> list[str]:
    """The `MAX_DOTENV` places changed longest ago, as srt would mount them: a match's real
    path, where a matching link leads, an unlisted directory (names with glob characters,
    which srt would read as patterns, cannot be handed to it)."""
    places: dict[str, int] = {}  # where to mount -> when the name that asks for it changed
    for name, where in [
        *((p, p) for p in walk.found),
        *((p, _leads_to(p, folder)) for p in walk.links),
        *((p, p) for p in walk.unlisted),
    ]:
        if where is not None and _GLOB.isdisjoint(where):  # (srt reads those as patterns)
            places[where] = min(places.get(where, _changed(name)), _changed(name))
    logger.warning(
        "%s holds %d .env files; the %d changed longest ago are hidden from the sandbox, not the rest "
        "(code in a kernel may have made them in numbers; remove those you do not use)",
        folder,
        walk.count,
        MAX_DOTENV,
    )
    return sorted(places, key=places.__getitem__)[:MAX_DOTENV]


def _changed(path: str) -> int:
    try:
        return os.lstat(path).st_ctime_ns
    except OSError:
        return 0


def _leads_to(link: str, folder: Path | str) -> str | None:
    """Where srt mounts for a matching link: its target's real path (None if it has none, or is
    `folder` or above it: hiding those is srt's call, and ipybox keeps the workspace shown)."""
    where = os.path.realpath(link)
    above = _at_or_under(os.path.realpath(folder), where)
    return None if above or not os.path.lexists(where) or not _GLOB.isdisjoint(where) else where


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

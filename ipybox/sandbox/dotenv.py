"""The `.env` files a kernel may not read, found by one walk of ipybox's instead of srt's globs.

Every `.env` and `.env.*` below the workspace and below the packages of editable installs is
hidden from every kernel. srt can find them itself from `**/.env` globs, but it walks a folder
once per pattern, in JavaScript, at each kernel start: ~5-30 ms a walk on a 2-core machine,
eight walks for a checkout with an editable install. One walk here, in the order srt's would
take (symbolic links to directories followed, but for links leading back up the tree), names
what srt would hide: each match where it lies, where a matching link leads, a directory that
cannot be listed. srt is never handed the globs: its rules let a kernel's `.env` link hide
anything (the standard library: every later start failed) and mount each match it finds.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ipybox.sandbox.reads import MAX_DEPTH

logger = logging.getLogger(__name__)

#: Files hidden one by one below a folder at most (see the module's docstring).
MAX_DOTENV = 500
#: Characters that make a `denyRead` entry a glob for srt (its `containsGlobChars`); `[` and `]`
#: can be matched alone (`[[]`, and `]` is plain in its regex), `*` and `?` cannot.
_EXACT = str.maketrans({"[": "[[]"})
_UNMATCHABLE = frozenset("*?")
#: Pseudo-filesystems: a link into one is not followed.
_PSEUDO = ("/proc", "/sys", "/dev")


def denials(folders: Sequence[Path | str], keep: Sequence[str] = ()) -> list[str]:
    """What `denyRead` needs to hide every `.env` and `.env.*` below each of `folders`: where
    each lies (`[` spelled as a glob that matches it alone; one with `*` or `?` is left out,
    with a warning: srt could only read it as a pattern), where a matching link leads (but for
    its folder and above, and the `keep` paths, the system and Python files a kernel needs, and
    above them), a folder that cannot be listed; at most `MAX_DOTENV` a folder."""
    kept = [os.path.realpath(k) for k in keep]  # once: a kernel can make thousands of .env links
    return [entry for folder in folders for entry in _denials(folder, kept)]


def _denials(folder: Path | str, kept: list[str]) -> list[str]:
    real = os.path.realpath(folder)
    walk = _walk(str(folder), [*kept, *_PSEUDO])
    places: dict[str, int] = {}  # where to mount -> when the name that asks for it changed
    for name, where in [
        *((p, p) for p in walk.found),
        *((p, _leads_to(p, real, kept)) for p in walk.links),
        *((p, p) for p in walk.unlisted),
    ]:
        if where is not None:
            places[where] = min(places.get(where, _changed(name)), _changed(name))
    chosen = list(places)
    if len(places) > MAX_DOTENV:
        logger.warning(
            "%s holds %d .env files; the %d changed longest ago are hidden from the sandbox, not the "
            "rest (code in a kernel may have made them in numbers; remove those you do not use)",
            folder,
            len(places),
            MAX_DOTENV,
        )
        chosen = sorted(places, key=places.__getitem__)[:MAX_DOTENV]
    if unmatchable := [p for p in chosen if not _UNMATCHABLE.isdisjoint(p)]:
        logger.warning(
            "not hiding %d .env files from the sandbox whose paths hold '*' or '?', which srt reads "
            "as patterns (rename them to hide them), e.g. %r",
            len(unmatchable),
            unmatchable[0],
        )
    return [p.translate(_EXACT) for p in chosen if _UNMATCHABLE.isdisjoint(p)]


def unescaped(entry: str) -> str:
    """The path a `denials` entry names."""
    return entry.replace("[[]", "[")


def _named(name: str) -> bool:
    return name == ".env" or name.startswith(".env.")


@dataclass
class _Walk:
    found: list[str] = field(default_factory=list)  # real paths of the matches but links
    links: list[str] = field(default_factory=list)  # matching links (srt hides where they lead)
    unlisted: list[str] = field(default_factory=list)  # directories that cannot be listed


def _walk(folder: str, unfollowed: Sequence[str] = ()) -> _Walk:
    """Every match below `folder` (the whole tree, as srt's walk would read it), but for links
    into the `unfollowed` directories: a kernel's link to /usr made the host walk all of it at
    every start (5.6 s here), one to /proc every process's folders."""
    walk = _Walk()
    base = os.path.realpath(folder)
    pending, listed = [(base, 0)], {base}
    while pending:
        directory, depth = pending.pop()
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
                if _named(entry.name):
                    walk.links.append(path)
                    continue
                target = _directory_behind(path)
                if target is None or _at_or_under(directory, target) or _at_or_under(base, target):
                    continue  # not a directory, or back up the tree: srt does not list it either
                if any(_at_or_under(target, u) for u in unfollowed):
                    continue  # what the kernel needs (no user's .env), or not files at all
                if target not in listed:
                    listed.add(target)
                    _below(walk, pending, target, depth)
                continue
            if _named(entry.name):
                walk.found.append(path)
            if entry.is_dir(follow_symlinks=False) and path not in listed:
                listed.add(path)
                _below(walk, pending, path, depth)
    return walk


def _below(walk: _Walk, pending: list[tuple[str, int]], directory: str, depth: int) -> None:
    """Walk `directory`, one folder below one `depth` down; past `MAX_DEPTH` it is hidden whole
    instead, as one that cannot be listed: a mount deeper down costs bubblewrap more than the
    last (a kernel's chain of 3,000 folders with an `.env` every 250 failed every later start)."""
    if depth >= MAX_DEPTH:
        walk.unlisted.append(directory)
    else:
        pending.append((directory, depth + 1))


def _changed(path: str) -> int:
    try:
        return os.lstat(path).st_ctime_ns
    except OSError:
        return 0


def _leads_to(link: str, folder: str, keep: Sequence[str]) -> str | None:
    """Where srt would mount for a matching link: its target's real path; None if there is none,
    or it is `folder` (a real path) or above it, a folder at the root (`/etc`, `/proc`), or a `keep` path,
    below or above one (a kernel's `.env` link to the standard library made every later start
    fail)."""
    where = os.path.realpath(link)
    if not os.path.lexists(where) or where.count("/") < 2 or _at_or_under(folder, where):
        return None
    if any(_at_or_under(where, k) or _at_or_under(k, where) for k in keep):
        return None
    return where


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

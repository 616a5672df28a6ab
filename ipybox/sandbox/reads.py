"""What a sandboxed kernel may read: an allow-list, with everything else hidden.

The policy denies `/` (srt expands that into a private empty stand-in for each top-level
directory except `/proc`, `/dev` and `/sys`, which srt provides itself) and re-opens the
system directories, the Python environment and the paths the policy allows to read or write.
The user's home, other users' homes, temporary and runtime directories of other programs
(with their sockets: tmux, screen, X11, D-Bus, editors) and other projects stay hidden.
"""

from __future__ import annotations

import functools
import importlib.machinery
import logging
import os
import site
import stat
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path

from ipybox.gentools.create import template_dir

logger = logging.getLogger(__name__)

#: System directories the kernel and the programs it starts need: binaries, libraries and
#: configuration. What in them is not readable by every user (`/etc/shadow`, host keys, TLS
#: private keys) stays hidden, also from a kernel run as root: see `hidden_system()`.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

#: Credential stores and control sockets hidden even when a policy's `allowRead` or
#: `allowWrite` opens them or the directory that holds them.
CREDENTIALS = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.npmrc",
    "~/.yarnrc.yml",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.claude/.credentials.json",
    "~/.local/share/keyrings",
    "~/.password-store",
    "~/.vault-token",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman",
    "/run/user",
    "/run/dbus",
    "/var/run/dbus",
    "/tmp/.X11-unix",
    "/run/screen",
)


def python_paths(extra_import_paths: Iterable[str] = ()) -> list[str]:
    """The Python environment the kernel runs in: the interpreter's prefixes (a venv and the
    Python it was made from), its install paths and site directories; of the other import
    path entries (an editable install's project, a `.pth` entry) only what can be imported
    from them (`editable_packages()`); plus `extra_import_paths` (the kernel's `PYTHONPATH`),
    whole. The application's own directory (`sys.path[0]`) is left out: it may hold secrets."""
    environment = _environment()
    paths = [*environment, *editable_packages(environment), *extra_import_paths]
    return [str(Path(p).absolute()) for p in dict.fromkeys(paths) if p and os.path.exists(p)]


def _environment() -> list[str]:
    """The interpreter's prefixes, install paths (`sysconfig`) and site directories."""
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    prefixes.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    paths = [*sorted(prefixes), *_version_manager(), *sysconfig.get_paths().values(), *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    # archives (the stdlib's zip) and site directories named on the import path
    paths += [p for p in sys.path[1:] if os.path.isfile(p) or Path(p).name in _SITE_DIR_NAMES]
    return [str(Path(p).absolute()) for p in dict.fromkeys(paths) if p]


def _version_manager() -> list[str]:
    """The folder of the version manager the interpreter came from (pyenv: `ROOT/versions/X`):
    the `pip` and `python` a user's PATH finds are its shims, which run its scripts from there."""
    versions = Path(sys.base_prefix).parent
    root = versions.parent
    if versions.name == "versions" and (root / "shims").is_dir():
        return [str(root)]
    return []


#: Names of the directories packages are installed into.
_SITE_DIR_NAMES = ("site-packages", "dist-packages")


def editable_packages(environment: Iterable[str] | None = None) -> list[str]:
    """What the kernel may import from outside the Python environment: the top-level
    packages and modules in import path entries outside it (an editable install's project
    or `src` folder, added by a `.pth` file) and the folders setuptools' editable finders map
    package names to. Not the folders themselves: a project's `.env`, `.git` and other
    files beside its packages stay hidden."""
    inside = [Path(p) for p in (_environment() if environment is None else environment)]
    found: list[str] = []
    for entry in sys.path[1:]:
        path = Path(entry).absolute()
        if entry and path.is_dir() and not any(path.is_relative_to(p) for p in inside):
            found += _importable(path)
    for name, module in list(sys.modules.items()):
        if not name.startswith("__editable__"):
            continue
        # MAPPING: package name -> its folder; NAMESPACES: namespace package -> its folders
        for table in (getattr(module, "MAPPING", None), getattr(module, "NAMESPACES", None)):
            for value in table.values() if isinstance(table, dict) else ():
                paths = [value] if isinstance(value, str) else value if isinstance(value, list) else []
                found += [p for p in paths if isinstance(p, str)]
    return list(dict.fromkeys(found))


def _importable(folder: Path) -> list[str]:
    """The top-level modules and packages in `folder`: `.py` files and extension modules,
    and directories named like a package holding `__init__.py` or modules (namespace
    packages)."""
    suffixes = (".py", *importlib.machinery.EXTENSION_SUFFIXES)
    found: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if entry.is_file() and entry.name.endswith(suffixes) and entry.name.split(".")[0].isidentifier():
            found.append(entry.path)
        elif entry.is_dir() and entry.name.isidentifier() and _has_modules(Path(entry.path), suffixes):
            found.append(entry.path)
    return found


def _has_modules(folder: Path, suffixes: tuple[str, ...]) -> bool:
    try:
        with os.scandir(folder) as entries:  # closed at the first match too, not by the collector
            return any(e.is_file() and e.name.endswith(suffixes) for e in entries)
    except OSError:
        return False


def import_paths(env: Mapping[str, str]) -> list[str]:
    """The directories `env`'s `PYTHONPATH` adds to the kernel's import path."""
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def readable(extra: Iterable[str] = ()) -> list[str]:
    """Every path a kernel reads under the default policy, besides what it may write: also
    ipybox's own data outside its package in a source checkout (the gentools template)."""
    system = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
    return [*system, *python_paths(extra), *_ipybox_data()]


def _ipybox_data() -> list[str]:
    try:
        return [str(template_dir())]
    except FileNotFoundError:
        return []


def hidden_credentials() -> list[str]:
    """The entries of `CREDENTIALS` (and the SSH agent's socket directory) that exist here."""
    found = [entry for entry in CREDENTIALS if os.path.lexists(os.path.expanduser(entry))]
    if sock := os.environ.get("SSH_AUTH_SOCK"):
        found.append(str(Path(sock).parent))
    return found


#: Configuration directories searched for files that not every user may read.
_PRIVATE_CONFIG_ROOTS = ("/etc",)


@functools.cache
def hidden_system() -> tuple[str, ...]:
    """Files and directories under `/etc` that other users may not read (mode without o+r):
    hidden from every kernel, as root too, which would otherwise read them (`/etc/shadow`).
    Searched once per process (about 1,200 entries: 15-40 ms); symlinks are not followed."""
    found: list[str] = []
    pending = [Path(p) for p in _PRIVATE_CONFIG_ROOTS]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if not mode & stat.S_IROTH:
                found.append(entry.path)
            elif stat.S_ISDIR(mode):
                pending.append(Path(entry.path))
    return tuple(sorted(found))


#: At most this many directories below one `allowRead` entry are searched for hidden entries;
#: the rest stay hidden whole.
MAX_READ_DIRS = 5000

#: Directories searched without looking inside: dependency trees and caches.
_NOT_SEARCHED = frozenset(("node_modules", "__pycache__"))


def hidden_below(folder: Path, keep: Iterable[Path], limit: int = MAX_READ_DIRS) -> list[str]:
    """What an `allowRead` of `folder` must not open: its hidden entries (dotfiles and
    dot-directories) at any depth, which hold credentials, tokens and shell history that no
    fixed list names (`.pgpass`, `.docker/`, `.bash_history`, ...). Entries at or in a `keep`
    path (one the policy names, the workspace, the Python environment) are left to their own
    rules and not searched; if the search reaches `limit` directories, the unsearched rest is
    hidden whole (logged)."""
    keep = [Path(p) for p in keep]
    found: list[str] = []
    pending = [folder]
    searched = 0
    while pending:
        current = pending.pop(0)
        if searched >= limit:
            found += [str(current), *map(str, pending)]
            logger.warning(
                "allowRead %s: more than %d directories to search for hidden files; %d folders in it "
                "stay hidden; name the folders the kernel needs in allowRead",
                folder,
                limit,
                len(pending) + 1,
            )
            break
        searched += 1
        for entry in entries_of(current):
            path = Path(entry.path)
            if within(path, keep):
                continue  # named by the policy or needed by the kernel: its own rules apply
            if entry.name.startswith("."):
                found.append(entry.path)  # a path inside it that `keep` names is opened again
            elif entry.name not in _NOT_SEARCHED and entry.is_dir(follow_symlinks=False):
                pending.append(path)
    return found


#: The walks for what to protect or hide go at most this many folders down a writable directory,
#: and no path deeper than one more is mounted: bubblewrap's time to make a mount grows faster
#: than its path's depth (measured: a mount point 300 folders down cost a start +15 s, 400 down
#: +30 s, so a kernel's chain of 3,000 folders with a `.git` every 250 failed every later start).
MAX_DEPTH = 64


def too_deep(path: Path | str, roots: Iterable[Path | str]) -> bool:
    """Whether `path` lies more than `MAX_DEPTH` + 1 folders below the first of `roots` it is in."""
    text = str(path)
    for root in map(str, roots):
        if text == root or text.startswith(root.rstrip("/") + "/"):
            return text[len(root) :].strip("/").count("/") > MAX_DEPTH
    return False


def entries_of(folder: Path | str) -> list[os.DirEntry[str]]:
    """The entries of `folder` by name (none if it cannot be listed), for the walks that look
    for what to protect or hide."""
    try:
        return sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []


def within(path: Path | str, roots: Iterable[Path | str]) -> bool:
    """Whether the absolute `path` is one of the absolute `roots` or lies below one (by name;
    fast enough for thousands of paths)."""
    text = str(path)
    return any(text == str(r) or text.startswith(str(r).rstrip("/") + "/") for r in roots)


def outside_credentials(entries: Iterable[str]) -> list[str]:
    """`entries` without those at or below a credential store (`CREDENTIALS`), which no policy
    opens (logged)."""
    stores = [os.path.abspath(os.path.expanduser(c)) for c in CREDENTIALS]
    kept: list[str] = []
    for entry in entries:
        if within(os.path.abspath(os.path.expanduser(entry)), stores):
            logger.warning("not opening %s: credential stores stay hidden from sandboxed kernels", entry)
        else:
            kept.append(entry)
    return kept

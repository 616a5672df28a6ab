"""What a sandboxed kernel may read: an allow-list, with everything else hidden.

The policy denies `/` (srt expands that into a private empty stand-in for each top-level
directory except `/proc`, `/dev` and `/sys`, which srt provides itself) and re-opens the
system directories, the Python environment and the paths the policy allows to read or write.
The user's home, other users' homes, temporary and runtime directories of other programs
(with their sockets: tmux, screen, X11, D-Bus, editors) and other projects stay hidden.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

#: System directories the kernel and the programs it starts need: binaries, libraries and
#: configuration. What in them is not readable by every user (`/etc/shadow`, host keys, TLS
#: private keys) stays hidden, also from a kernel run as root: see `hidden_system()`.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")

#: Credential stores and control sockets hidden even when a policy's `allowRead` opens the
#: directory that holds them (an `allowRead` entry at or below one of them opens it again).
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
    Python it was made from) and the import path, without the application's own directory
    (`sys.path[0]`, which may hold its secrets), plus `extra_import_paths` (the kernel's
    `PYTHONPATH`)."""
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    prefixes.add(str(Path(os.path.realpath(sys.executable)).parent.parent))
    paths = [*sorted(prefixes), *sys.path[1:], *extra_import_paths]
    return [str(Path(p).absolute()) for p in dict.fromkeys(paths) if p and os.path.exists(p)]


def import_paths(env: Mapping[str, str]) -> list[str]:
    """The directories `env`'s `PYTHONPATH` adds to the kernel's import path."""
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def readable(extra: Iterable[str] = ()) -> list[str]:
    """Every path a kernel reads under the default policy, besides what it may write."""
    system = [p for p in SYSTEM_DIRS if os.path.lexists(p)]
    return [*system, *python_paths(extra)]


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
    Searched once per process (about 1,200 entries, some 15 ms); symlinks are not followed."""
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

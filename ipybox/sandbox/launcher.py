"""The bubblewrap launcher: the one seam through which ipybox adds its own flags to srt's sandbox.

srt builds the bubblewrap command line of a sandbox and runs `bwrapPath` (a policy setting) in
place of `bwrap`. ipybox points it at a small shell script written for each sandbox into the
executor's runtime dir (hidden from kernels, never writable by them). The script puts ipybox's
flags (`ISOLATION_FLAGS`, then a policy's device binds) right before srt's final
`-- <shell> -c <command>`, so that they come after srt's own mounts (a device bind after its fresh
`/dev`), and runs the real bubblewrap. A command line of another shape means srt changed how it
calls bubblewrap: the script refuses to run it rather than guess. srt's probe of bubblewrap
(`bwrap --unshare-user --dev-bind / / true`) goes through unchanged. Beside the script lies the
seccomp filter (`ipybox.sandbox.seccomp`) that bubblewrap reads on `_SECCOMP_FD`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from ipybox.sandbox.seccomp import keyring_filter

#: The descriptor the launcher opens the seccomp filter on for bubblewrap: one digit (dash's
#: limit), not srt's 9 (its `--args` file).
_SECCOMP_FD = 8

#: Flags every sandbox gets. `--unshare-ipc`: a System V IPC namespace of its own, so the
#: kernel neither sees nor attaches the host's shared memory segments, semaphores and message
#: queues (srt leaves them shared). `--seccomp`: no kernel keyring calls (the host's
#: session keyring is inherited otherwise; see `ipybox.sandbox.seccomp`), where ipybox knows
#: the machine's system call numbers; and `/proc/keys`, which lists the keys of that keyring
#: (ids and descriptions) to whoever may view them, masked as Docker masks it.
ISOLATION_FLAGS: tuple[str, ...] = (
    "--unshare-ipc",
    *(("--seccomp", str(_SECCOMP_FD)) if keyring_filter() is not None else ()),
    *(("--ro-bind", "/dev/null", "/proc/keys") if os.path.exists("/proc/keys") else ()),
)

#: srt's probe of bubblewrap, run through the launcher as it is.
_PROBE = ("--unshare-user", "--dev-bind", "/", "/", "true")

#: Exit status of a refused command line (bubblewrap itself exits 1 on its own errors).
REFUSED = 125

_SCRIPT = r"""#!/bin/sh
# ipybox's bubblewrap launcher for one sandbox, written by ipybox.sandbox.launcher: srt runs it in
# place of bwrap; it adds ipybox's flags before srt's final `-- SHELL -c COMMAND`.
if [ "$#" -eq 5 ] && [ "$1" = --unshare-user ] && [ "$2" = --dev-bind ] && [ "$3" = / ] \
    && [ "$4" = / ] && [ "$5" = true ]; then
    exec @BWRAP@ "$@"
fi
n=$#
if [ "$n" -ge 4 ]; then
    eval 'sep=${'$((n - 3))'} shell=${'$((n - 2))'} c=${'$((n - 1))'} command=${'$n'}'
fi
if [ "$n" -lt 4 ] || [ "$sep" != -- ] || [ "$c" != -c ]; then
    echo "ipybox: refusing to start the sandbox: srt called bubblewrap with arguments that do not end in" \
        "'-- SHELL -c COMMAND', so ipybox cannot add its isolation flags (a sandbox-runtime version" \
        "ipybox does not know?). Install the sandbox-runtime version ipybox names in its docs." >&2
    exit @REFUSED@
fi
# all arguments but the last four, named by number: "${1}" "${2}" ...
keep=
i=1
while [ "$i" -le $((n - 4)) ]; do
    keep="$keep \"\${$i}\""
    i=$((i + 1))
done
eval "set -- $keep"
exec @BWRAP@ "$@" @FLAGS@ "$sep" "$shell" "$c" "$command"@REDIRECT@
"""


def launcher_script(
    bwrap: str, flags: Sequence[str] = (), env: Mapping[str, str] = {}, seccomp: Path | None = None
) -> str:
    """The launcher's text: runs `bwrap` (an absolute path) with `ISOLATION_FLAGS`, `flags` and
    `env` (as `--setenv`; a value for `LD_LIBRARY_PATH` goes before the one the kernel has), the
    seccomp filter read from the file `seccomp` (needed where `ISOLATION_FLAGS` ask for one)."""
    if not os.path.isabs(bwrap):
        raise ValueError(f"bwrap must be an absolute path, got {bwrap!r}")
    words = [shlex.quote(f) for f in [*ISOLATION_FLAGS, *flags]]
    for name, value in env.items():
        quoted = shlex.quote(value)
        if name == "LD_LIBRARY_PATH":
            quoted += '"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"'
        words += ["--setenv", shlex.quote(name), quoted]
    if "--seccomp" in ISOLATION_FLAGS and seccomp is None:
        raise ValueError("the launcher needs the seccomp filter's file")
    redirect = f" {_SECCOMP_FD}<{shlex.quote(str(seccomp))}" if "--seccomp" in ISOLATION_FLAGS else ""
    script = _SCRIPT.replace("@BWRAP@", shlex.quote(bwrap)).replace("@REFUSED@", str(REFUSED))
    return script.replace("@FLAGS@", " ".join(words)).replace("@REDIRECT@", redirect)


def write_launcher(path: Path, bwrap: str, flags: Sequence[str] = (), env: Mapping[str, str] = {}) -> Path:
    """Write the launcher (`launcher_script`) to `path`, readable and executable by this user
    only (mode 0500), and its seccomp filter beside it (`path.seccomp`, read-only), replacing
    what was there; returns the launcher's absolute path."""
    path = path.absolute()
    seccomp = path.with_name(path.name + ".seccomp")
    program = keyring_filter()
    if program is not None:
        _write_private(seccomp, program, 0o400)
    _write_private(path, launcher_script(bwrap, flags, env, seccomp).encode(), 0o500)
    return path


def _write_private(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.chmod(mode)
    tmp.replace(path)

"""The environment of a sandboxed kernel: every place it writes state lies in its private dir."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: Where IPython and Jupyter keep what runs at a kernel's start: always in the private dir.
SANDBOX_FIXED_VARS = ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR")


def sandboxed_environment(env: Mapping[str, str], private_dir: Path) -> dict[str, str]:
    """`env` plus where a sandboxed kernel keeps temporary files, caches and configuration.

    The sandbox hides the user's home behind an empty stand-in that vanishes with each
    kernel, and never lets a kernel write what later runs outside it (`~/.ipython` startup
    files): IPython, Jupyter, matplotlib and programs following the XDG conventions get
    directories in `private_dir` instead (created here). srt sets the kernel's `TMPDIR` to
    `$CLAUDE_CODE_TMPDIR`; the caller's `env` may override the temp and cache dirs, not
    IPython's and Jupyter's.
    """
    dirs = {name: private_dir / name for name in ("tmp", "ipython", "jupyter", "matplotlib", "cache")}
    for path in dirs.values():
        path.mkdir(exist_ok=True)
    overridable = {
        "CLAUDE_CODE_TMPDIR": str(dirs["tmp"]),
        "MPLCONFIGDIR": str(dirs["matplotlib"]),
        "XDG_CACHE_HOME": str(dirs["cache"]),
    }
    ipython, jupyter = str(dirs["ipython"]), str(dirs["jupyter"])
    fixed = dict(zip(SANDBOX_FIXED_VARS, (ipython, jupyter, jupyter), strict=True))
    return overridable | dict(env) | fixed

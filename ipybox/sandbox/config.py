"""Sandbox policy for kernels run under Anthropic's sandbox-runtime (`srt`)."""

from __future__ import annotations

import copy
import json
import logging
import os
import platform
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipybox.errors import IpyboxError
from ipybox.tool_exec.registry import state_dir

logger = logging.getLogger(__name__)

#: The documented default: read everything but `.env`, write the working directory and IPython's
#: own directories, no network.
DEFAULT_CONFIG: dict[str, Any] = {
    "enableWeakerNestedSandbox": False,
    "filesystem": {
        "denyRead": [".env"],
        "allowWrite": [".", "~/Library/Jupyter", "~/.ipython"],
        "denyWrite": [],
    },
    "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": True},
}

#: Credentials and control sockets a kernel never needs, denied on top of any policy. Unix
#: sockets must be allowed for the kernel's own ipc channels, so the sockets that would let
#: code escape (container engines, the session bus, agents) are hidden instead.
_ALWAYS_DENY_READ = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman",
    "/run/user",
    "/run/dbus",
    "/var/run/dbus",
)


#: Secrets files anywhere in the workspace, hidden from every kernel (relative: srt matches them
#: under the kernel's working directory, each time a kernel starts).
_DOTENV_GLOBS = ("**/.env", "**/.env.*")

#: What other programs' sandboxes leave in a temp dir: srt's proxy sockets and mount sources
#: (`claude-http-*.sock`, `srt-mux-*.sock`, ...) and ipybox runtime dirs of older versions.
_FOREIGN_TEMP_GLOBS = ("claude-*", "srt-*", "ipybox-*")


#: A policy file in the workspace that the MCP server (and the codeact-sandbox plugin) picks up.
WORKSPACE_CONFIG = "sandbox-config.json"


#: Boolean settings of srt's config schema, top level (None) and per section: a wrong type is
#: reported before anything starts rather than by srt when a kernel starts.
_BOOLEANS: dict[str | None, tuple[str, ...]] = {
    None: ("enableWeakerNestedSandbox", "enableWeakerNetworkIsolation", "allowPty"),
    "filesystem": ("disabled", "allowGitConfig"),
    "network": ("allowLocalBinding", "allowAllUnixSockets", "strictAllowlist"),
}


class SandboxError(IpyboxError, RuntimeError):
    """The sandbox cannot be used: a tool is missing or the configuration is invalid."""


def load_config(path: Path | None) -> dict[str, Any]:
    """The policy in `path` (JSON), or the default; errors name the file and the problem."""
    if path is None:
        return copy.deepcopy(DEFAULT_CONFIG)
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SandboxError(f"Sandbox config file not found: {path}") from None
    except json.JSONDecodeError as e:
        raise SandboxError(f"Sandbox config {path} is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise SandboxError(f"Sandbox config {path} must be a JSON object.")
    for key in _BOOLEANS[None]:
        if not isinstance(config.get(key, False), bool):
            raise SandboxError(f"Sandbox config {path}: {key} must be true or false.")
    for section, keys in (
        ("filesystem", ("denyRead", "allowRead", "allowWrite", "denyWrite")),
        ("network", ("allowedDomains", "deniedDomains")),
    ):
        value = config.get(section, {})
        if not isinstance(value, dict):
            raise SandboxError(f"Sandbox config {path}: {section!r} must be an object.")
        for key in keys:
            items = value.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise SandboxError(f"Sandbox config {path}: {section}.{key} must be a list of strings.")
        for key in _BOOLEANS[section]:
            if not isinstance(value.get(key, False), bool):
                raise SandboxError(f"Sandbox config {path}: {section}.{key} must be true or false.")
    if config.get("filesystem", {}).get("disabled") is True:
        # srt would then ignore every rule, including those protecting ipybox's state and policy.
        raise SandboxError(
            f"Sandbox config {path}: filesystem.disabled is not supported; list writable paths in "
            "filesystem.allowWrite instead."
        )
    return config


#: Paths whose contents run outside the sandbox later (IPython/Jupyter startup files and
#: kernelspecs, user site-packages with their .pth files); never writable from a kernel.
_ALWAYS_DENY_WRITE = (
    "~/.ipython",
    "~/.jupyter",
    "~/.local/share/jupyter",
    "~/Library/Jupyter",
    site.getusersitepackages(),
    sys.prefix,
)


def runtime_root(base: Path | None = None) -> Path:
    """The directory that holds every ipybox runtime dir (kernel connection files, ipc and tool
    server sockets, srt's proxy sockets) of this user under the temp dir `base`.

    Every sandbox hides it whole, so a sandboxed kernel cannot reach another kernel's files, not
    even those of kernels started after it. A temp dir that is already private (this user's,
    mode 0700) is used as it is; a shared one (`/tmp`) gets a private `ipybox-runtime-<uid>`.
    Raises `SandboxError` if that name is taken by something that is not this user's private
    directory (another user could read or replace what ipybox puts there).
    """
    base = Path(base or tempfile.gettempdir()).absolute()
    if _is_private_dir(base):
        return base
    root = base / f"ipybox-runtime-{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    if not _is_private_dir(root):
        raise SandboxError(
            f"{root} is not a private directory of this user (a symlink, another owner or open "
            "permissions); remove it so ipybox can create its runtime files there."
        )
    return root


def _is_private_dir(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077 == 0


def _other_sandboxes() -> list[str]:
    """What kernels must not reach of other sandboxes and kernels: the runtime roots (in the
    temp dir and in /tmp, where runtime dirs go when the temp dir's path is too long) and what
    other srt instances and older ipybox versions keep beside them (when the kernel starts)."""
    paths: list[str] = []
    for base in dict.fromkeys(Path(p).absolute() for p in (tempfile.gettempdir(), "/tmp")):
        paths.append(str(runtime_root(base)))
        if any(c in str(base) for c in "*?[]{}!"):
            logger.warning("not hiding other sandboxes' files in %s: its path has glob characters", base)
            continue
        paths += [str(base / pattern) for pattern in _FOREIGN_TEMP_GLOBS]
    return paths


def kernel_policy(
    config: dict[str, Any],
    writable_dir: Path,
    protected: Sequence[Path] = (),
    hidden: Sequence[Path | str] = (),
    reachable: Sequence[Path] = (),
) -> dict[str, Any]:
    """`config` plus what ipybox needs and forbids, whatever the user's policy says.

    The kernel may write its ipc sockets in `writable_dir` and must be able to create unix
    sockets at all. It may never write ipybox's state (the registry of trusted servers), the
    `protected` files (policy, `.env`, git hooks) that later kernels, servers and tools run
    with, or anything that code outside the sandbox executes later (srt also keeps such paths
    from being created where they do not exist yet). It may not read the `hidden` paths (the
    workspace's `.env`), ipybox's state, any `.env` or `.env.*` file in the workspace, or the
    runtime files of other kernels and sandboxes; of its own runtime dir it sees `writable_dir`
    and the `reachable` sockets and directories only.
    """
    policy = copy.deepcopy(config)
    fs = policy.setdefault("filesystem", {})
    fs.setdefault("allowWrite", []).append(str(writable_dir))
    state = str(state_dir().absolute())
    fs.setdefault("denyWrite", []).extend([state, *_ALWAYS_DENY_WRITE, *(str(p) for p in protected)])
    deny_read = fs.setdefault("denyRead", [])
    deny_read.extend(str(p) for p in hidden)
    deny_read.extend([state, *_DOTENV_GLOBS, *_other_sandboxes()])
    fs.setdefault("allowRead", []).extend(str(p) for p in reachable)
    for entry in _ALWAYS_DENY_READ:
        if os.path.lexists(os.path.expanduser(entry)) and entry not in deny_read:
            deny_read.append(entry)
    if sock := os.environ.get("SSH_AUTH_SOCK"):
        deny_read.append(str(Path(sock).parent))
    network = policy.setdefault("network", {})
    network.setdefault("allowedDomains", [])  # srt requires both lists; absent means none
    network.setdefault("deniedDomains", [])
    network["allowAllUnixSockets"] = True
    return policy


def srt_executable(path: str | None = None) -> str:
    """Path of `srt`; raises `SandboxError` naming every missing tool the sandbox needs.

    Tools are looked up on `path` (default: `PATH`).
    """
    srt = os.environ.get("IPYBOX_SRT") or shutil.which("srt", path=path)
    missing = [] if srt else ["srt (npm install -g @anthropic-ai/sandbox-runtime@0.0.78)"]
    needed = {"Linux": ("bwrap", "socat", "rg"), "Darwin": ("rg",)}.get(platform.system(), ())
    packages = {"bwrap": "bubblewrap", "socat": "socat", "rg": "ripgrep"}
    missing += [f"{tool} (package {packages[tool]})" for tool in needed if not shutil.which(tool, path=path)]
    if missing:
        raise SandboxError(
            "Sandboxing needs tools that are not installed: " + ", ".join(missing) + ". "
            "On Debian/Ubuntu: apt-get install bubblewrap socat ripgrep; on macOS: brew install ripgrep."
        )
    assert srt is not None
    return srt


def sandbox_problem(path: str | None = None) -> str | None:
    """Why sandboxed kernels cannot run here, or None: a missing tool, or (on Linux) a
    bubblewrap that may not create namespaces, as under some AppArmor or container setups."""
    try:
        srt_executable(path)
    except SandboxError as e:
        return str(e)
    bwrap = shutil.which("bwrap", path=path)
    if platform.system() != "Linux" or bwrap is None:
        return None
    probe = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    probe += ["--unshare-user", "--unshare-pid", "--unshare-net", "--", "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {done.stderr.strip()}"
    return None


def check_sandbox(config_path: Path | None) -> None:
    """Raise `SandboxError` if the policy is invalid or a tool the sandbox needs is missing."""
    load_config(config_path)
    srt_executable()


def sandbox_command(
    config_path: Path | None,
    policy_file: Path,
    writable_dir: Path,
    working_dir: Path,
    protected: Sequence[Path] = (),
    *,
    reachable: Sequence[Path] = (),
) -> list[str]:
    """The command prefix that runs a kernel under `srt` with the effective policy.

    The policy is written to `policy_file`, which the kernel may not write wherever it lies,
    so sandboxed code cannot loosen the policy of kernels started later. `policy_file` lies in
    the executor's runtime dir (under `runtime_root()`, hidden from kernels): srt keeps its proxy
    sockets there too (in `srt/`, the only part the kernel sees besides `writable_dir` and the
    `reachable` sockets, e.g. the tool server's).
    """
    srt = srt_executable()
    srt_tmp = policy_file.parent / "srt"
    srt_tmp.mkdir(mode=0o700, exist_ok=True)
    # The policy file lies under a writable path if the working directory holds the temp dir.
    workspace = working_dir.absolute()
    keep = [policy_file.absolute(), workspace / WORKSPACE_CONFIG, workspace / ".env"]
    keep += [workspace / ".git" / "hooks", workspace / ".git" / "config"]  # git runs these on the host
    keep += [Path(p).absolute() for p in protected]
    if config_path is not None:
        keep.append(Path(config_path).resolve())
    policy = kernel_policy(
        load_config(config_path), writable_dir, keep, [workspace / ".env"], [*reachable, srt_tmp]
    )
    policy_file.write_text(json.dumps(policy, indent=1))
    policy_file.chmod(0o400)
    env = shutil.which("env") or "/usr/bin/env"
    return [env, f"TMPDIR={srt_tmp}", srt, "--settings", str(policy_file), "--"]

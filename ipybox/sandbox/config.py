"""Sandbox policy for kernels run under Anthropic's sandbox-runtime (`srt`)."""

from __future__ import annotations

import copy
import fnmatch
import json
import logging
import os
import platform
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ipybox._programs import which
from ipybox.errors import IpyboxError
from ipybox.sandbox import autorun, devices, dotenv, links, owned, reads, repo_sweep
from ipybox.sandbox.launcher import write_launcher
from ipybox.sandbox.placeholders import Placeholders, sweep
from ipybox.tool_exec.registry import state_dir

logger = logging.getLogger(__name__)

#: The documented default: read the working directory, the Python environment and the
#: system (see `ipybox.sandbox.reads`), write the working directory, no network.
DEFAULT_CONFIG: dict[str, Any] = {
    "enableWeakerNestedSandbox": False,
    "filesystem": {
        "denyRead": [".env"],
        "allowWrite": [".", "~/Library/Jupyter", "~/.ipython"],
        "denyWrite": [],
    },
    "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": True},
}

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
        # an empty directory: the stand-in a running sandbox keeps in a workspace without config
        text = "" if _is_empty_dir(Path(path)) else Path(path).read_text()
        config = json.loads(text) if text.strip() else copy.deepcopy(DEFAULT_CONFIG)
    except FileNotFoundError:
        raise SandboxError(f"Sandbox config file not found: {path}") from None
    except IsADirectoryError:
        raise SandboxError(f"Sandbox config {path} is a directory; pass a JSON file.") from None
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
    try:
        devices.check_settings(config)
    except devices.DeviceError as e:
        raise SandboxError(f"Sandbox config {path}: {e}") from None
    if config.get("filesystem", {}).get("disabled") is True:
        # srt would then ignore every rule, including those protecting ipybox's state and policy.
        raise SandboxError(
            f"Sandbox config {path}: filesystem.disabled is not supported; list writable paths in "
            "filesystem.allowWrite instead."
        )
    return config


def _is_empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and not any(path.iterdir())
    except OSError:
        return False


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


def _runtime_roots() -> list[str]:
    """Where the runtime files of this user's kernels and sandboxes lie (in the temp dir and in
    /tmp, where runtime dirs go when the temp dir's path is too long): hidden whole, also if a
    policy's `allowRead` opens the temp dir."""
    bases = dict.fromkeys(Path(p).absolute() for p in (tempfile.gettempdir(), "/tmp"))
    return [str(runtime_root(base)) for base in bases]


def kernel_policy(
    config: dict[str, Any],
    writable_dir: Path,
    protected: Sequence[Path] = (),
    hidden: Sequence[Path | str] = (),
    reachable: Sequence[Path] = (),
    *,
    workspace: Path | None = None,
    readable: Sequence[Path | str] = (),
) -> dict[str, Any]:
    """`config` plus what ipybox needs and forbids, whatever the user's policy says.

    Reads are allowed, not denied: the kernel reads what the policy allows to read or write,
    `workspace`, the system, the Python environment and the `readable` paths (e.g. the
    kernel's `PYTHONPATH`); everything else is hidden (`/` is denied). Even where a policy's
    `allowRead` opens their parent, it may not read the `hidden` paths (the workspace's `.env`),
    ipybox's state, any `.env` or `.env.*` file in `workspace`, credential stores, or the
    runtime files of other kernels and sandboxes; of its own runtime dir it sees `writable_dir`
    (its ipc sockets) and the `reachable` sockets and directories only.

    It may never write ipybox's state (the registry of trusted servers), the `protected` paths
    (policy, `.env`, auto-run paths) that code outside the sandbox runs or trusts later, or the
    Python environment and IPython's and Jupyter's configuration. Unix sockets are allowed,
    since the kernel talks to ipybox over them.
    """
    policy = {k: copy.deepcopy(v) for k, v in config.items() if k not in devices.KEYS}  # ipybox's, not srt's
    fs = policy.setdefault("filesystem", {})
    # What ipybox never lets a kernel write is not opened for reading by an allowWrite entry
    # either (`~/.ipython` of the default: its history holds earlier sessions' code).
    never = [Path(os.path.expanduser(p)).absolute() for p in _ALWAYS_DENY_WRITE]
    fs["allowWrite"] = [
        p
        for p in reads.outside_credentials(fs.get("allowWrite", []))
        if not reads.within(os.path.abspath(os.path.expanduser(p)), never)
    ]
    named = reads.outside_credentials(fs.get("allowRead", []))
    fs["allowWrite"].append(str(writable_dir))
    state = str(state_dir().absolute())
    fs.setdefault("denyWrite", []).extend([state, *_ALWAYS_DENY_WRITE, *(str(p) for p in protected)])
    deny_read = fs["denyRead"] = ["/", *fs.get("denyRead", [])]
    deny_read.extend(str(p) for p in hidden)
    deny_read.extend([state, *_runtime_roots(), *reads.hidden_credentials(), *reads.hidden_system()])
    # the workspace's and those in packages of editable installs (often the project's root)
    top: list[Path] = [] if workspace is None else [workspace]
    folders: list[Path | str] = [*top, *reads.editable_packages()]
    system = reads.readable(map(str, readable))
    needs = [p for p in system if p != "/etc"]  # a user file there: hidden
    _hide_env_files(fs, folders, [str(writable_dir), *map(str, reachable), *needs, *_runtime_roots()])
    needed = [*map(str, [*reachable, *top]), *system]
    deny_read.extend(_hidden_in_named(named, [*fs["allowWrite"], *needed]))
    fs["allowRead"] = [*named, *needed]
    for key in ("denyRead", "allowRead", "allowWrite", "denyWrite"):
        fs[key] = list(dict.fromkeys(fs[key]))
    network = policy.setdefault("network", {})
    network.setdefault("allowedDomains", [])  # srt requires both lists; absent means none
    network.setdefault("deniedDomains", [])
    network["allowAllUnixSockets"] = True
    return policy


def _hide_env_files(fs: dict[str, Any], folders: Sequence[Path | str], keep: Sequence[str]) -> None:
    """Hide every `.env` file below `folders` (`ipybox.sandbox.dotenv`); where `.env` links lead
    too, but for the `keep` paths the kernel needs (its runtime, Python, the system)."""
    hidden = dotenv.denials([f for f in folders if os.path.isdir(f)], keep)
    fs["denyRead"].extend(hidden)
    # a writable bind (a pinned folder) at or below a hidden place would show it again
    places = [dotenv.unescaped(p) for p in hidden]
    fs["allowWrite"] = [p for p in fs["allowWrite"] if not reads.within(os.path.abspath(p), places)]


def _hidden_in_named(named: Sequence[str], needed: Sequence[Path | str]) -> list[str]:
    """The hidden entries (at any depth) of the directories a policy's `allowRead` names, but
    for those it names too and what the kernel needs anyway (`needed`: its workspace, writable
    paths, Python environment and system directories, each left to its own rules)."""
    if not named:
        return []
    needed_paths = _outermost(Path(os.path.expanduser(p)).absolute() for p in needed)
    named_paths = [Path(os.path.expanduser(p)).absolute() for p in named]
    hidden: list[str] = []
    for folder in dict.fromkeys(named_paths):
        if folder.is_dir() and not reads.within(folder, needed_paths):
            keep = [*needed_paths, *(n for n in named_paths if n != folder and n.is_relative_to(folder))]
            hidden += reads.hidden_below(folder, keep)
    return hidden


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` without those inside another of them."""
    found: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        if not reads.within(path, found):
            found.append(path)
    return found


def _absolute(config: dict[str, Any], workspace: Path) -> dict[str, Any]:
    """`config` with its relative filesystem paths made absolute against `workspace`: srt
    resolves them against its own working directory, which is not the kernel's."""
    config = copy.deepcopy(config)
    fs = config.get("filesystem", {})
    for key in ("denyRead", "allowRead", "allowWrite", "denyWrite"):
        if key in fs:
            fs[key] = [p if p.startswith(("/", "~")) else str(workspace / p) for p in fs[key]]
            fs[key] = [str(workspace) if p == f"{workspace}/." else p for p in fs[key]]
    return config


def srt_executable(path: str | None = None) -> str:
    """Path of `srt`; raises `SandboxError` naming every missing tool the sandbox needs.

    Tools are looked up on the absolute entries of `path` (default: `PATH`).
    """
    named = os.environ.get("IPYBOX_SRT")
    if named and not (os.path.isabs(named) and os.path.isfile(named) and os.access(named, os.X_OK)):
        raise SandboxError(
            f"IPYBOX_SRT={named!r} is not an executable file given by its absolute path; point it "
            "at srt (e.g. the output of `command -v srt`), or unset it to use the srt on PATH."
        )
    srt = named or which("srt", path)
    missing = [] if srt else ["srt (npm install -g @anthropic-ai/sandbox-runtime@0.0.78)"]
    needed = {"Linux": ("bwrap", "socat", "rg"), "Darwin": ("rg",)}.get(platform.system(), ())
    packages = {"bwrap": "bubblewrap", "socat": "socat", "rg": "ripgrep"}
    missing += [f"{tool} (package {packages[tool]})" for tool in needed if not which(tool, path)]
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
    bwrap = which("bwrap", path)
    if platform.system() != "Linux" or bwrap is None:
        return None
    probe = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    probe += ["--unshare-user", "--unshare-pid", "--unshare-net", "--", "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {done.stderr.strip()}"
    return None


#: GPUs a policy gets besides its own `gpus` setting (see `ipybox.sandbox.devices.parse_gpus`).
Gpus = str | Sequence[int] | None


def check_sandbox(config_path: Path | None, gpus: Gpus = None, working_dir: Path | None = None) -> None:
    """Raise `SandboxError` if the policy is invalid, a tool the sandbox needs is missing, a
    device it asks for (`gpus` overrides its GPU setting) is not here, or the kernels' working
    directory is one srt cannot give them."""
    _device_grant(_with_gpus(load_config(config_path), gpus))
    srt_executable()
    if working_dir is not None and (chars := sorted(set(_SRT_GLOB).intersection(str(working_dir)))):
        raise SandboxError(
            f"A sandboxed kernel cannot work in {str(working_dir)!r}: its path holds {''.join(chars)!r}, "
            "which the sandbox (srt) reads as a pattern, so it would not give the kernel that folder. "
            "Rename the folder (or one above it), or choose another working directory."
        )


def _with_gpus(config: dict[str, Any], gpus: Gpus) -> dict[str, Any]:
    """`config` with `gpus` (if given) in place of its own GPU setting."""
    if gpus is None:
        return config
    return config | {"gpus": gpus if isinstance(gpus, str) else list(gpus)}


def _device_grant(config: dict[str, Any]) -> devices.DeviceGrant:
    asked = [key for key in devices.KEYS if config.get(key) not in (None, [], "", "none")]
    if asked and platform.system() != "Linux":
        raise SandboxError(f"Sandbox setting {asked[0]!r} works on Linux only; remove it from the policy.")
    try:
        return devices.device_grant(config)
    except devices.DeviceError as e:
        raise SandboxError(str(e)) from None


def _launcher(
    config: dict[str, Any], grant: devices.DeviceGrant, path: Path, binds: Sequence[str] = ()
) -> str | None:
    """Write the bubblewrap launcher (see `ipybox.sandbox.launcher`) for a sandbox with `grant`'s
    devices and the extra `binds` to `path`; its path for the policy's `bwrapPath` (None off
    Linux: no bubblewrap). A policy's own `bwrapPath` names the bubblewrap it runs."""
    if platform.system() != "Linux":
        return None
    bwrap = config.get("bwrapPath") or which("bwrap")
    if not bwrap:
        raise SandboxError("Sandboxing needs bwrap (package bubblewrap), which is not installed.")
    return str(write_launcher(path, os.path.abspath(bwrap), [*binds, *grant.flags], grant.env))


def _literal_binds(policy: dict[str, Any], kept: Sequence[Path]) -> list[str]:
    """Read-only binds for the `kept` paths that srt would not protect: srt reads every write rule
    as a pattern and, on Linux, drops those with glob characters (`*?[]{}`), so a protected path in
    a folder such as Next.js's `app/[id]/` would stay writable. The launcher binds them read-only
    after srt's mounts; only those in a folder the policy lets the kernel write (a literal
    `allowWrite` entry) and not in what it hides, which a bind would show again."""
    fs = policy.get("filesystem", {})
    roots = [p for p in fs.get("allowWrite", []) if not _globby(p)]
    deny_read = [os.path.abspath(os.path.expanduser(p)) for p in fs.get("denyRead", []) if p != "/"]
    hidden = [p for p in deny_read if not _globby(p)]
    patterns = [p for p in deny_read if _globby(p)]
    binds: list[str] = []
    for path in dict.fromkeys(Path(p).absolute() for p in kept):
        text = str(path)
        if not _globby(text) or not reads.within(text, roots) or reads.within(text, hidden):
            continue
        if any(fnmatch.fnmatchcase(str(p), pattern) for p in (path, *path.parents) for pattern in patterns):
            continue
        # never a link (a kernel may have planted one): bubblewrap would bind what it names
        if os.path.lexists(text) and os.path.realpath(text) == text:
            binds += ["--ro-bind", text, text]
    return binds


def sandbox_policy(
    config_path: Path | None,
    policy_file: Path,
    writable_dir: Path,
    working_dir: Path,
    protected: Sequence[Path] = (),
    *,
    reachable: Sequence[Path] = (),
    readable: Sequence[Path | str] = (),
    gpus: Gpus = None,
) -> bytes:
    """The effective policy srt runs a kernel under (and `gpus`, if given, in place of its GPU
    setting), as srt reads it; also written to `policy_file`. Run it before the kernel's
    `srt_prefix()` reads it: it makes the placeholders and the launcher the policy names.

    The policy is written to `policy_file`, which the kernel may not write wherever it lies,
    so sandboxed code cannot loosen the policy of kernels started later. `policy_file` lies in
    the executor's runtime dir (under `runtime_root()`, hidden from kernels): srt keeps its proxy
    sockets there too (in `srt/`, the only part the kernel sees besides `writable_dir` and the
    `reachable` sockets, e.g. the tool server's). srt runs from the runtime dir, the kernel in
    `working_dir`: srt's own protections of its working directory would leave mount points in
    the workspace; ipybox protects the workspace itself (see `ipybox.sandbox.autorun`), with
    placeholders that `release_sandbox(policy_file.parent)` removes once the kernels ended.
    srt starts bubblewrap through ipybox's launcher, written beside `policy_file`. Principals'
    homes are hidden and read-only but for the kernel's own (`ipybox.sandbox.owned`).
    """
    runtime = policy_file.parent.absolute()
    srt_tmp = runtime / "srt"
    srt_tmp.mkdir(mode=0o700, exist_ok=True)
    workspace = working_dir.absolute()
    config = _absolute(_with_gpus(load_config(config_path), gpus), workspace)
    grant = _device_grant(config)
    # The policy file lies under a writable path if the working directory holds the temp dir.
    keep = [policy_file.absolute(), *(Path(p).absolute() for p in protected)]
    if config_path is not None:  # its name too: a link there is made again if replaced
        keep += [Path(config_path).resolve(), Path(os.path.abspath(config_path))]
    allow_write = config.get("filesystem", {}).get("allowWrite", [])
    writable = [Path(os.path.abspath(os.path.expanduser(p))) for p in allow_write]
    homes, keep_out = owned.confinement(workspace, writable)  # other principals' homes
    keep += keep_out
    placeholders = _placeholders.setdefault(runtime, Placeholders(_lock_dir()))
    protected, roots, existing = _protect_writable(config, workspace, writable_dir, placeholders, keep, homes)
    keep += protected
    _watch(runtime, roots, keep, homes, writable_dir, existing)
    policy = kernel_policy(
        config,
        writable_dir,
        keep,
        [workspace / ".env", *homes],
        [*reachable, srt_tmp],
        workspace=workspace,
        readable=[*readable, *grant.readable],
    )
    launcher = _launcher(config, grant, policy_file.with_suffix(".bwrap"), _literal_binds(policy, keep))
    if launcher is not None:
        policy["bwrapPath"] = launcher
    text = json.dumps(policy, indent=1)
    policy_file.write_text(text)
    policy_file.chmod(0o400)
    return text.encode()


def _watch(
    runtime: Path, roots: list[Path], keep: list[Path], homes: list[Path], private: Path, existing: list[Path]
) -> None:
    """Have the host sweep `roots` while the executor with `runtime` runs, until release_sandbox():
    for the repositories its kernels make (disarmed), the `keep` paths that are links (a mount
    holds where a link leads, not its name: one a kernel replaced is made again) and the settings
    its kernels add to the `existing` folders (set aside)."""
    kept_links = links.recorded(p for p in dict.fromkeys(keep) if reads.within(p, roots))
    sweeps = runtime_root() / "repo-sweeps"
    repo_sweep.watch(runtime, sweeps, roots, [*keep, *homes], [private], kept_links, existing)


def srt_prefix(settings: str, runtime_dir: Path, workspace: Path) -> list[str]:
    """The command prefix that runs a kernel under srt with the policy read from the file
    `settings` (the policy file, or a pipe that `sandbox_policy()`'s result is written to),
    srt run from the executor's `runtime_dir`; the kernel in `workspace`."""
    runtime = runtime_dir.absolute()
    env = which("env") or "/usr/bin/env"
    in_dir = ["/bin/sh", "-c", 'cd -- "$0" && exec "$@"']
    srt = [srt_executable(), "--settings", settings, "--"]
    return [*in_dir, str(runtime), env, f"TMPDIR={runtime / 'srt'}", *srt, *in_dir, str(workspace.absolute())]


#: Placeholders held by each executor, by its runtime dir.
_placeholders: dict[Path, Placeholders] = {}


def release_sandbox(runtime_dir: Path) -> None:
    """Disarm the repositories the kernels of the executor with `runtime_dir` made (a last
    sweep, see `ipybox.sandbox.repo_sweep`) and remove its placeholders that no other one needs;
    call when its kernels have ended."""
    repo_sweep.finish(runtime_dir.absolute())
    held = _placeholders.pop(runtime_dir.absolute(), None)
    if held is not None:
        held.release()


def _lock_dir() -> Path:
    path = runtime_root() / "placeholders"
    sweep(path)
    return path


def _protect_writable(
    config: dict[str, Any],
    workspace: Path,
    private: Path,
    placeholders: Placeholders,
    keep: list[Path],
    hidden: Sequence[Path] = (),
) -> tuple[list[Path], list[Path], list[Path]]:
    """The auto-run paths, git directories and Python environments in every directory the kernel
    may write (but its private one), with placeholders made for those that must not be created
    (and for `keep` paths that are missing there), and those directories; see
    `ipybox.sandbox.autorun`.

    The shallowest directories there are guarded: each is added to `config`'s `allowWrite` (srt
    binds it onto itself, so the kernel can neither move nor remove it and put a directory of
    its own in its place) and `.git` and `HEAD` cannot be created in it (git takes neither it
    nor a folder below it for a repository of the kernel's making). What ipybox hides or keeps
    read-only (its state, runtime files, credential stores, the `keep` paths and the `hidden`
    ones, e.g. other users' homes) is neither walked nor guarded: a guard is a writable bind,
    which srt would lay over the hiding."""
    denied = [Path(os.path.expanduser(p)) for p in [*_ALWAYS_DENY_WRITE, str(state_dir().absolute())]]
    fs = config.setdefault("filesystem", {})
    roots = _writable_roots(fs.get("allowWrite", []), denied, private)
    found: list[Path] = []
    existing: list[Path] = []  # every folder walked: settings the kernels add there are set aside
    standins: dict[Path, str] = {}
    pins: list[Path] = []
    home = Path.home().absolute()
    user_denied = [Path(os.path.expanduser(p)).absolute() for p in fs.get("denyWrite", []) if not _globby(p)]
    blocked = [n for n in autorun.EVERY_DIR_BLOCKED if n != "HEAD" or autorun.bare_repositories_allowed()]
    kept = [*keep, *hidden]  # read-only or hidden by ipybox: a pin would undo it
    off_limits = [*denied, private, *kept, *map(Path, [*_runtime_roots(), *reads.hidden_credentials()])]
    for root in roots:
        scan = autorun.scan(root, off_limits)
        found += scan.protected
        existing += scan.folders
        standins |= scan.missing  # what git's configuration names there but is not there yet
        if home.is_relative_to(root):  # start-up files of the user's shell and tools
            standins |= {home / name: kind for name, kind in autorun.HOME_NAMES.items()}
        if home != root and home.is_relative_to(root):
            continue  # "/" or /home: not a project, no placeholders in it
        standins |= {root / name: kind for name, kind in autorun.CREATION_BLOCKED.items()}
        standins |= autorun.hook_standins(root) | autorun.nested_standins(root)
        for folder in scan.directories[1:]:
            if reads.within(folder, [*user_denied, *kept]) or _read_denied(folder, fs.get("denyRead", [])):
                continue  # read-only anyway; or hidden, which a pin (a writable bind) would undo
            standins |= {folder / name: "dir" for name in blocked}
            pins.append(folder)
        if root == workspace:
            standins |= {root / ".env": "dir", root / WORKSPACE_CONFIG: "dir"}
    linked, missing = autorun.link_targets(found, roots)  # what links there lead to: kept too
    found += linked
    standins |= {path: kind for path, kind in missing.items() if path not in standins}
    standins |= dict.fromkeys(user_denied, "dir")
    standins |= {path: "file" for path in keep}
    standins = {p: kind for p, kind in standins.items() if not reads.too_deep(p, roots)}  # see MAX_DEPTH
    found += _make_standins(standins, roots, placeholders)
    fs["allowWrite"] = [*fs.get("allowWrite", []), *(str(p) for p in pins)]
    return [*found, *standins], roots, existing


def _writable_roots(allow_write: Sequence[str], denied: Sequence[Path], private: Path) -> list[Path]:
    """The directories `allow_write` names that the kernel may write (not at or below `denied`
    ones, nor its `private` one)."""
    roots = []
    for entry in allow_write:
        root = Path(os.path.expanduser(entry)).absolute()
        if root.is_dir() and not any(root.is_relative_to(d) for d in denied) and root != private:
            roots.append(root)
    return roots


def _make_standins(
    standins: dict[Path, str], roots: Sequence[Path], placeholders: Placeholders
) -> list[Path]:
    """Make a placeholder for the first missing part of each of `standins` (path: kind) that lies in
    one of `roots`, never through a link (a kernel may have planted one there); the paths made."""
    made = []
    for path, kind in standins.items():
        missing = _first_missing(path)
        if (
            missing is not None
            and reads.within(missing, roots)
            and os.path.realpath(missing.parent) == str(missing.parent)
        ):
            placeholders.ensure(missing, kind if missing == path else "dir", roots)
            made.append(missing)
    return made


def _read_denied(folder: Path, deny_read: Sequence[str]) -> bool:
    """Whether the policy's `denyRead` hides `folder` (or something named like it), or it is a
    hidden folder (whose name a `denyRead` glob such as `**/.env` may match)."""
    if folder.name.startswith("."):
        return True
    for entry in deny_read:
        path = os.path.abspath(os.path.expanduser(entry))
        if not _globby(entry):
            if reads.within(folder, [path]):
                return True
        elif fnmatch.fnmatchcase(str(folder), path) or fnmatch.fnmatchcase(folder.name, Path(path).name):
            return True
    return False


#: The characters that make a path a pattern to srt (its `containsGlobChars`).
_SRT_GLOB = "*?[]"


def _globby(path: str) -> bool:
    return any(c in path for c in "*?[]{}")


def _first_missing(path: Path) -> Path | None:
    """The first component of `path` that does not exist (None if it all exists)."""
    if os.path.isdir(path.parent):  # the common case: only the name itself is missing
        return None if os.path.lexists(path) else path
    for candidate in [*reversed(path.parents), path]:
        if not os.path.lexists(candidate):
            return candidate
    return None

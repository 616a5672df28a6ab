"""`LocalBackend`: kernels as local processes, optionally sandboxed and resource-limited."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
from collections.abc import Callable
from pathlib import Path

from ipybox import _safe_fs
from ipybox._host_imports import guard_workspace
from ipybox.kernel_mgr import transfer
from ipybox.kernel_mgr.backend import KernelLike, KernelSettings, ToolEndpoint, ToolListener
from ipybox.kernel_mgr.in_kernel import WORKING_DIR_VAR
from ipybox.kernel_mgr.kernel import Handover, Kernel, kernel_environment
from ipybox.kernel_mgr.limits import ResourceLimits
from ipybox.kernel_mgr.runtime_dir import make_runtime_dir, remove_runtime_dir
from ipybox.sandbox import (
    SANDBOX_FIXED_VARS,
    Gpus,
    check_sandbox,
    import_paths,
    release_sandbox,
    sandbox_policy,
    sandboxed_environment,
    srt_prefix,
)
from ipybox.tool_exec import registry
from ipybox.tool_exec.audit import AuditLog
from ipybox.tool_exec.client import ENDPOINT_VAR

logger = logging.getLogger(__name__)


class LocalBackend:
    """Kernels started here, in `working_dir`, with only the environment the executor gives.

    Each runs in a subprocess driven over ipc sockets in a private runtime directory; with
    `sandbox`, under `srt` (policy `sandbox_config`, default: ipybox's), where it may write only
    the working directory and its own part of the runtime directory (not its siblings').
    `limits` bound each kernel's tree. `gpus` gives sandboxed kernels NVIDIA GPUs (see
    `ipybox.sandbox.devices`), in place of the policy's `gpus` setting.
    They call tools over the tool server's unix socket, which files share with them.
    """

    def __init__(
        self,
        sandbox: bool = False,
        sandbox_config: Path | None = None,
        limits: ResourceLimits | None = None,
        gpus: Gpus = None,
    ) -> None:
        self.sandbox = sandbox
        self.sandbox_config = sandbox_config
        # read where it led when the executor was made: a kernel may replace a link on the way
        # (its name stays protected, see `ipybox.sandbox.links`)
        self._policy = None if sandbox_config is None else Path(sandbox_config).resolve()
        self.gpus = gpus
        self.limits = limits or ResourceLimits()
        self.runtime_dir: Path | None = None
        self._state_dirs: list[Path] = []
        self._settings: KernelSettings | None = None
        self._kernel_count = itertools.count()

    async def prepare(self, settings: KernelSettings, tool_port: int | None) -> ToolListener:
        if self.sandbox:  # fail on a missing tool or a bad config before anything starts
            check_sandbox(self._policy, self.gpus, settings.working_dir)
            guard_workspace(settings.working_dir)  # what the kernel writes there never shadows our imports
            if settings.audit_log is not None:  # a file ipybox can append to, before srt protects it
                AuditLog(settings.audit_log, trusted=settings.working_dir).create()
            self._state_dirs = _made_state_dirs(settings)
        self._settings = settings
        self.runtime_dir = make_runtime_dir()
        (self.runtime_dir / "kernels").mkdir()  # one private dir in it per kernel: all a sandboxed one sees
        # modules on the kernel's PYTHONPATH: their servers were registered where they were written
        module_dirs = tuple(registry.module_dirs(settings.env, settings.working_dir))
        return ToolListener(self.runtime_dir / "tools.sock", tool_port, module_dirs)

    def kernel_factory(self, endpoint: ToolEndpoint) -> Callable[[], KernelLike]:
        """Each kernel gets its own directory in `kernels/` (connection file, ipc sockets, temp
        files and caches); a sandboxed one, its own policy, under which it sees no other kernel's
        directory (neither the running kernel's nor its spare's)."""
        settings, runtime_dir = self._settings, self.runtime_dir
        assert settings is not None and runtime_dir is not None, "prepare() first"
        # The launch command's programs get ipybox's own variables only (its defaults, switches and
        # tool server); the application's go to the kernel alone, set by its launcher (inside the
        # sandbox, if any), over the defaults but never over the rest.
        ipybox_env = settings.switches() | {ENDPOINT_VAR: str(endpoint.path)}
        if settings.restore_working_dir:
            ipybox_env[WORKING_DIR_VAR] = str(settings.working_dir)
        defaults = {k: v for k, v in settings.kernel_env().items() if k not in settings.env}
        env = kernel_environment(defaults | ipybox_env, proxies=not self.sandbox)  # srt sets its own
        kernel_env = {k: v for k, v in settings.env.items() if k not in ipybox_env}
        cwd, limits = settings.working_dir, self.limits

        def new_kernel() -> KernelLike:
            name = f"{next(self._kernel_count):x}"  # short: socket paths below it must fit in 107 bytes
            private = runtime_dir / "kernels" / name
            private.mkdir(mode=0o700)
            if not self.sandbox:
                return Kernel(private, cwd, env, [], limits, own_dir=True, kernel_env=kernel_env)
            policy = functools.partial(
                sandbox_policy,
                self._policy,
                runtime_dir / f"sandbox-{name}.json",
                private,
                cwd,
                [
                    *([settings.audit_log] if settings.audit_log is not None else []),
                    *self._state_dirs,
                    *([Path(os.path.abspath(self.sandbox_config))] if self.sandbox_config else []),
                ],
                reachable=[endpoint.path],
                readable=import_paths(settings.env),
                gpus=self.gpus,
            )
            # srt starts first and reads the policy from a pipe: its node loads its modules
            # while the policy is worked out
            prefix = Handover(functools.partial(srt_prefix, runtime_dir=runtime_dir, workspace=cwd), policy)
            own = {k: v for k, v in kernel_env.items() if k not in SANDBOX_FIXED_VARS}
            return Kernel(
                private,
                cwd,
                sandboxed_environment(env, private),
                prefix,
                limits,
                own_dir=True,
                kernel_env=own,
                relayed=True,
            )

        return new_kernel

    async def upload(self, kernel: KernelLike, local: Path, remote: str) -> None:
        workspace = self._workspace()
        await transfer.copy_local(local, workspace / Path(remote).expanduser(), "target", workspace)

    async def download(self, kernel: KernelLike, remote: str, local: Path) -> None:
        workspace = self._workspace()
        source = workspace / Path(remote).expanduser()
        await transfer.copy_local(source, local, "source", workspace, disarm=self.sandbox)

    def _workspace(self) -> Path:
        assert self._settings is not None, "prepare() first"
        return self._settings.working_dir

    async def close(self) -> None:
        if self.runtime_dir is not None:
            # its kernels are gone: the last sweep (which walks every directory the kernels could
            # have made, millions maybe) and the placeholders' removal, off the event loop
            await asyncio.to_thread(release_sandbox, self.runtime_dir)
        remove_runtime_dir(self.runtime_dir)
        self.runtime_dir = None


def _made_state_dirs(settings: KernelSettings) -> list[Path]:
    """ipybox's state directories below the working directory, made without following links (a
    link planted there is left out and logged: a sandbox would protect what it names, not it)."""
    made: list[Path] = []
    for path in settings.state_dirs:
        parts = _safe_fs.parts_below(path, settings.working_dir)
        if not parts:
            continue
        try:
            with _safe_fs.opendir(settings.working_dir, parts, create=True):
                made.append(path)
        except OSError as e:  # UnsafePathError too
            logger.error("cannot make ipybox's state directory %s: %s", path, e)
    return made

"""Attack tests: variables meant for the kernel (`kernel_env`, the MCP server's `KERNEL_ENV_*`
from a `.env` a kernel may have written) never steer a program ipybox runs on the host.

They used to be the environment of the whole launch command: `/bin/sh`, `env`, `srt` under node
and `bwrap`. Each route below makes a host program leave a line in a marker file outside the
workspace (where a program inside the sandbox cannot write): `NODE_OPTIONS=--require` a
kernel-written script (node runs srt), `PATH` with kernel-written `node`, `bwrap`, `socat`, `rg`
and `sh` first (srt's `#!/usr/bin/env node` and srt's own lookups), `BASH_ENV`/`ENV` (read by a
`sh` that is bash or an interactive one) and `LD_PRELOAD` of a kernel-written library (every
dynamically linked program). The kernel itself must still see every variable as given.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from servers.launch import SANDBOX_PATH, require_sandbox

from ipybox import CodeExecutor

_HOST_PROGRAMS = ("node", "bwrap", "socat", "rg", "sh", "env")
#: What runs before the kernel: the sandbox's programs and the cgroup's wrapper.
_LAUNCH = ("node", "bwrap", "socat", "sh", "dash", "bash", "env")
_PRELOAD = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char exe[512] = {0};
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    FILE *f = fopen("MARKER", "a");
    if (f) { fprintf(f, "LD_PRELOAD %s\n", exe); fclose(f); }
}
"""


def hostile_env(workspace: Path, marker: Path) -> dict[str, str]:
    """Kernel variables that run a workspace file in any host program that takes them."""
    bin_dir = workspace / "bin"
    bin_dir.mkdir()
    for name in _HOST_PROGRAMS:  # each records that it ran, then does what the real one would
        real = shutil.which(name, path=SANDBOX_PATH) or f"/usr/bin/{name}"
        (bin_dir / name).write_text(f'#!/bin/sh\necho "PATH {name}" >> {marker}\nexec {real} "$@"\n')
        (bin_dir / name).chmod(0o755)
    (workspace / "evil.js").write_text(f"require('fs').appendFileSync({str(marker)!r}, 'NODE_OPTIONS\\n')\n")
    (workspace / "evil.sh").write_text(f"echo SH_ENV >> {marker}\n")
    env = {
        "NODE_OPTIONS": f"--require {workspace / 'evil.js'}",
        "PATH": f"{bin_dir}{os.pathsep}{SANDBOX_PATH}",
        "BASH_ENV": str(workspace / "evil.sh"),
        "ENV": str(workspace / "evil.sh"),
    }
    if compiler := shutil.which("cc"):
        source = workspace / "evil.c"
        source.write_text(_PRELOAD.replace("MARKER", str(marker)))
        subprocess.run([compiler, "-shared", "-fPIC", "-o", workspace / "evil.so", source], check=True)
        env["LD_PRELOAD"] = str(workspace / "evil.so")
    return env


@pytest.mark.parametrize("sandbox", [True, False], ids=["sandboxed", "unsandboxed"])
async def test_kernel_variables_never_reach_host_programs(
    sandbox: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if sandbox:
        require_sandbox()
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    monkeypatch.delenv("IPYBOX_SRT", raising=False)
    workspace, marker = tmp_path / "ws", tmp_path / "host-ran"
    workspace.mkdir()
    env = hostile_env(workspace, marker)
    async with CodeExecutor(sandbox=sandbox, working_dir=workspace, kernel_env=env, spare_kernel=False) as ex:
        result = await ex.execute(
            f"import json, os; print(json.dumps({{n: os.environ.get(n) for n in {list(env)}}}))"
        )
        seen = json.loads(result.text or "")
    # the kernel got them all, as given (ipybox puts its pip shim first on PATH in the kernel)
    assert seen.pop("PATH").endswith(env.pop("PATH")) and seen == env
    ran = marker.read_text().splitlines() if marker.exists() else []
    if not sandbox:  # the kernel and what it runs (uname, …) load the library they were given
        kernel = [
            line
            for line in ran
            if line.startswith("LD_PRELOAD") and Path(line.split()[1]).name not in _LAUNCH
        ]
        # from its interpreter's start: the launcher set the variables and started it again
        assert "LD_PRELOAD" not in env or any("python" in line for line in kernel), ran
        ran = [line for line in ran if line not in kernel]
    assert ran == []

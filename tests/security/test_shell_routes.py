"""With `approve_shell_cmds=True`, every way IPython starts a program asks the application first.

Each route runs a program that creates a marker file. Rejected, the marker never appears and
the kernel lives on; accepted, it appears (so the route really starts a program).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from servers.launch import collect

from ipybox import CodeExecutionResult, CodeExecutor

pytestmark = pytest.mark.timeout(300)

#: (route, code with {m} for the marker path, kind of approval request)
ROUTES = [
    ("!cmd", "!touch {m}", "shell"),
    ("!!cmd", "!!touch {m}", "shell"),
    ("x = !cmd", "x = !touch {m}", "shell"),
    ("%sx", "%sx touch {m}", "shell"),
    ("%system", "%system touch {m}", "shell"),
    ("%sc", "%sc x=touch {m}", "shell"),
    ("%%!", "%%!\ntouch {m}", "shell"),
    ("%%sx", "%%sx\ntouch {m}", "shell"),
    ("%pip", "%pip --version > {m}", "shell"),
    ("alias", "%alias ipybox_mk touch {m}\n%ipybox_mk", "shell"),
    ("get_ipython().system", "get_ipython().system('touch {m}')", "shell"),
    ("get_ipython().system_raw", "get_ipython().system_raw('touch {m}')", "shell"),
    ("get_ipython().system_piped", "get_ipython().system_piped('touch {m}')", "shell"),
    ("get_ipython().getoutput", "get_ipython().getoutput('touch {m}')", "shell"),
    ("%%bash", "%%bash\ntouch {m}", "shell_magic"),
    ("%%sh", "%%sh\ntouch {m}", "shell_magic"),
    ("%%script bash", "%%script bash\ntouch {m}", "shell_magic"),
    ("%%script sh -e", "%%script sh -e\ntouch {m}", "shell_magic"),
    ("%%script perl", "%%script perl\nopen(F, '>{m}');", "shell_magic"),
    ("%%perl", "%%perl\nopen(F, '>{m}');", "shell_magic"),
    ("%%python3", "%%python3\nopen('{m}', 'w')", "shell_magic"),
    ("%%script python3", "%%script python3\nopen('{m}', 'w')", "shell_magic"),
    ("run_cell_magic", "get_ipython().run_cell_magic('script', 'sh', 'touch {m}')", "shell_magic"),
    (
        "ScriptMagics.shebang",
        "get_ipython().magics_manager.registry['ScriptMagics'].shebang('sh', 'touch {m}')",
        "shell_magic",
    ),
]


@pytest.fixture
async def shell_executor(tmp_path: Path) -> AsyncIterator[CodeExecutor]:
    async with CodeExecutor(working_dir=tmp_path, approve_shell_cmds=True, spare_kernel=False) as executor:
        yield executor


async def test_every_route_asks_first(shell_executor: CodeExecutor, tmp_path: Path) -> None:
    ran_unasked, not_run = [], []
    for i, (route, code, kind) in enumerate(ROUTES):
        if "perl" in route and shutil.which("perl") is None:
            continue
        marker = tmp_path / f"marker-{i}"
        requests, result = await collect(shell_executor, code.format(m=marker), lambda _: "reject")
        if marker.exists() or [r.tool_name for r in requests] != [kind]:
            ran_unasked.append((route, [r.tool_name for r in requests], marker.exists()))
        _, accepted = await collect(shell_executor, code.format(m=marker), lambda _: "accept")
        if not marker.exists() or not isinstance(accepted, CodeExecutionResult):
            not_run.append((route, accepted))
    assert ran_unasked == []
    assert not_run == []
    assert (await shell_executor.execute("print('alive')")).text == "alive"


async def test_a_script_magic_is_approved_with_its_interpreter(shell_executor: CodeExecutor) -> None:
    requests, _ = await collect(shell_executor, "%%script python3 -u\nprint(1)", lambda _: "reject")
    assert [r.tool_args for r in requests] == [{"cmd": "%%script python3 -u\nprint(1)\n"}]

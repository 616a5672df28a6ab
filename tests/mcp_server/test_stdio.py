"""The ipybox MCP server over stdio: the four tools, streaming, truncation, environment, bad input."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import tty
from pathlib import Path

import psutil
import pytest
from mcp import MCPError
from mcp.types import LoggingMessageNotificationParams
from servers.hostile_args import assert_shown_safely
from servers.launch import NODE_BIN, REPO, network_env, require_sandbox

from .conftest import (
    EVERYTHING,
    IPYBOX_COMMAND,
    NASTY,
    NO_SPARE,
    TRUNCATION_MARKER,
    images_of,
    ipybox_processes,
    open_ipybox,
    raw_ipybox,
    requires_node,
    server_env,
    text_of,
)

pytestmark = pytest.mark.timeout(60)

#: What a kernel's environment may hold: the essentials ipybox passes, what ipykernel and ipybox
#: set themselves, and the KERNEL_ENV_ variables of the tests.
KERNEL_ENV_ALLOWED = {
    # essentials passed from ipybox's environment
    *("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM"),
    # set by ipybox
    "PYTHONUNBUFFERED",
    "IPYBOX_TOOL_SERVER",
    "NO_COLOR",
    # set by ipykernel
    *("MPLBACKEND", "JPY_PARENT_PID", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "PAGER", "GIT_PAGER"),
    "PYDEVD_USE_FRAME_EVAL",
}


async def test_lists_four_compact_tools_without_output_schemas(workspace: Path, state_dir: Path) -> None:
    # `python -m ipybox.mcp_server` is the same server as the `ipybox` command
    command = [sys.executable, "-m", "ipybox.mcp_server"]
    async with open_ipybox(workspace, state_dir, command=command) as box:
        init = box.session.initialize_result
        tools = {tool.name: tool for tool in (await box.session.list_tools()).tools}
        started = [" ".join(p.cmdline()) for p in ipybox_processes(workspace)]

    # a client that only connects (as `claude mcp list` does) starts no kernel, writes nothing
    assert started and not [c for c in started if "kernel_mgr" in c], started
    assert list(workspace.iterdir()) == []
    assert init is not None and init.server_info.name == "ipybox"
    assert "register_mcp_server" in (init.instructions or "")
    assert set(tools) == {"register_mcp_server", "execute_ipython_cell", "install_package", "reset"}
    # what an agent needs to use each tool, in few words
    expected_words = {
        "register_mcp_server": ["mcptools", "${VAR}", ".env", "Params", "run()", "command", "url"],
        "execute_ipython_cell": ["stateful", "mcptools", "approve", "kernel", "max 4"],
        "install_package": ["pip", "git+https"],
        "reset": ["variables", "mcptools"],
    }
    for name, words in expected_words.items():
        for word in words:
            assert word in (tools[name].description or ""), (name, word)
        assert tools[name].output_schema is None, name  # plain text results, no JSON wrapper
    # The footprint a model sees: tools/list entries as an LLM API gets them, plus the instructions.
    seen = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools.values()
    ]
    footprint = len(json.dumps(seen, separators=(",", ":"))) + len(init.instructions or "")
    assert footprint <= 1536, f"{footprint} bytes of tool definitions and instructions (budget 1.5 KB)"
    parameters = {name: set(tool.input_schema["properties"]) for name, tool in tools.items()}
    assert parameters == {
        "register_mcp_server": {"server_name", "server_params"},
        "execute_ipython_cell": {"code", "kernel", "timeout", "max_output_chars"},
        "install_package": {"package_name"},
        "reset": {"kernel"},
    }
    assert set(tools["execute_ipython_cell"].input_schema["required"]) == {"code"}


@requires_node
async def test_register_server_and_call_its_generated_api(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        reply = await box.register("everything", EVERYTHING)
        echoed = await box.output(
            "from mcptools.everything import echo, get_sum\n"
            "answer = get_sum.run(get_sum.Params(a=2, b=3))\n"
            "print(echo.run(echo.Params(message='hello from the kernel')))"
        )
        later = await box.output("print(answer)")

        # registering again regenerates the API; code that imported it keeps working
        await box.register("everything", EVERYTHING)
        again = await box.output(
            "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='x')))"
        )

    assert reply.startswith("Generated ") and "mcptools/everything/" in reply
    assert "- echo: Echoes back the input string" in reply
    assert "- get_sum: Returns the sum of two numbers" in reply
    package = workspace / "mcptools" / "everything"
    for module in ["__init__", "echo", "get_sum", "get_env"]:
        assert (package / f"{module}.py").is_file(), module
    assert echoed == "Echo: hello from the kernel"
    assert "5" in later
    assert again == "Echo: x"


async def test_state_persists_between_calls_in_the_workspace(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        await box.output("import os\ncounter = 41\ndef bump():\n    global counter\n    counter += 1")
        await box.output("bump()")
        counter = await box.output("counter")  # the value of a last expression is output too
        cwd = await box.output("print(os.getcwd())")
        shell = await box.output("!echo from-the-shell")
        awaited = await box.output("import asyncio\nawait asyncio.sleep(0)\nprint('awaited')")

    assert counter == "42"
    assert Path(cwd) == workspace.resolve()
    assert shell == "from-the-shell"
    assert awaited == "awaited"


async def test_plot_comes_back_as_an_image_and_a_file(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        result = await box.run(
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nprint('plotted')\nplt.show()"
        )

    assert not result.is_error, text_of(result)
    images = images_of(result)
    assert len(images) == 1
    assert images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    text = text_of(result)
    assert text.startswith("plotted")
    path = Path(text.split("[image saved to ", 1)[1].split("]", 1)[0])
    assert path.is_file() and path.is_relative_to(workspace / "images")
    assert path.read_bytes() == png


async def test_long_output_keeps_head_and_tail_and_saves_the_rest(workspace: Path, state_dir: Path) -> None:
    code = "print('HEAD' + 'm' * 19_992 + 'TAIL', end='')"
    async with open_ipybox(workspace, state_dir) as box:
        result = await box.run(code, max_output_chars=500)
        failed = await box.run("print('x' * 20_000)\nraise ValueError('at the end')", max_output_chars=500)

    assert not result.is_error
    text = text_of(result)
    assert text.startswith("HEAD") and text.endswith("TAIL")
    match = TRUNCATION_MARKER.search(text)
    assert match is not None, text
    cut, total, saved = int(match[1]), int(match[2]), Path(match[3])
    assert total == 20_000 and cut == 20_000 - 500
    assert len(text) < 500 + 300  # the kept head and tail plus the marker
    assert saved.is_relative_to(workspace)
    assert saved.read_text() == "HEAD" + "m" * 19_992 + "TAIL"

    # the output of a failing cell is cut the same way, the error at its end stays visible
    assert failed.is_error
    failed_text = text_of(failed)
    assert TRUNCATION_MARKER.search(failed_text) and "ValueError: at the end" in failed_text
    assert len(failed_text) < 1000


async def test_output_streams_to_the_client_before_the_result(workspace: Path, state_dir: Path) -> None:
    # The cell prints "second" only once the client has received "first" both as a progress
    # notification and as a log message; output held back until the end would time the cell out.
    progress: list[tuple[float, str]] = []
    logs: list[str] = []
    go = workspace / "go"

    def release() -> None:
        if any("first" in m for _, m in progress) and any("first" in data for data in logs):
            go.touch()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message or ""))
        release()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))
        release()

    code = (
        "import pathlib, time\n"
        "print('first', flush=True)\n"
        "while not pathlib.Path('go').exists():\n"
        "    time.sleep(0.01)\n"
        "print('second')"
    )
    async with open_ipybox(workspace, state_dir, logging_callback=on_log) as box:
        result = await box.run(code, progress_callback=on_progress, timeout=30)

    assert not result.is_error and text_of(result) == "first\nsecond", text_of(result)
    assert "second" in "".join(message for _, message in progress)
    values = [value for value, _ in progress]
    assert values == sorted(set(values)), "progress must increase with every notification"


@requires_node
async def test_reset_clears_variables_but_keeps_files_and_mcptools(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        await box.register("everything", EVERYTHING)
        await box.output("from mcptools.everything import echo\nx = 1\nopen('notes.txt', 'w').write('kept')")
        reset = await box.call("reset", {})
        gone = await box.run("print(x)")
        after = await box.output(
            "from mcptools.everything import echo\n"
            "print(open('notes.txt').read(), echo.run(echo.Params(message='again')))"
        )

    assert not reset.is_error and "reset" in text_of(reset)
    assert gone.is_error and "NameError" in text_of(gone)
    assert after == "kept Echo: again"
    assert (workspace / "notes.txt").read_text() == "kept"
    assert (workspace / "mcptools" / "everything" / "echo.py").is_file()


@pytest.mark.timeout(240)
async def test_install_package_makes_it_importable(workspace: Path, state_dir: Path) -> None:
    package, module = "pyjokes>=0.6", "pyjokes"
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is already installed in the test environment")
    # what a user's environment needs to reach the index (proxies, certificates, mirrors)
    try:
        async with open_ipybox(workspace, state_dir, env=network_env()) as box:
            before = await box.run(f"import {module}")
            installed = await box.call("install_package", {"package_name": package})
            assert not installed.is_error, text_of(installed)
            imported = await box.output(
                f"import {module}\nprint({module}.__name__, bool({module}.get_joke()))"
            )
    finally:  # keep the project's environment as it was
        uninstall = await asyncio.create_subprocess_exec(
            *("uv", "pip", "uninstall", "--python", sys.executable, module),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await asyncio.wait_for(uninstall.wait(), 60)

    assert before.is_error and "ModuleNotFoundError" in text_of(before)
    assert module in text_of(installed)
    assert imported == f"{module} True"


async def test_install_package_rejects_what_is_not_a_requirement(workspace: Path, state_dir: Path) -> None:
    bad = ["--index-url=http://x", "", "   ", "a b", "-e .", "pkg; rm -rf /", "requests\n--pre"]
    async with open_ipybox(workspace, state_dir) as box:
        results = {spec: await box.call("install_package", {"package_name": spec}) for spec in bad}
        still = await box.output("print('still serving')")

    for spec, result in results.items():
        assert result.is_error, spec
        assert "Not a package requirement" in text_of(result), (spec, text_of(result))
    assert still == "still serving"


async def test_kernel_sees_only_kernel_env_variables(workspace: Path, state_dir: Path) -> None:
    (workspace / ".env").write_text("KERNEL_ENV_BAZ=qux\nAPI_KEY=k\n")
    env = {"SECRET_TOKEN": "abc", "KERNEL_ENV_FOO": "bar"}
    async with open_ipybox(workspace, state_dir, env=env) as box:
        listed = await box.output("import json, os\nprint(json.dumps(dict(os.environ)))")

    kernel_env = json.loads(listed)
    assert kernel_env["FOO"] == "bar"
    assert kernel_env["BAZ"] == "qux"
    for hidden in [
        "SECRET_TOKEN",
        "KERNEL_ENV_FOO",
        "KERNEL_ENV_BAZ",
        "API_KEY",
        "IPYBOX_STATE_DIR",
        "SHELL",
    ]:
        assert hidden not in kernel_env, hidden
    assert "abc" not in kernel_env.values() and "k" not in kernel_env.values()
    unexpected = set(kernel_env) - KERNEL_ENV_ALLOWED - {"FOO", "BAZ"}
    assert not unexpected, f"unexpected variables in the kernel: {sorted(unexpected)}"
    # ipybox's own PATH comes first (after the kernel's pip shim directory)
    assert str(NODE_BIN) in kernel_env["PATH"].split(os.pathsep)[:2]


@requires_node
async def test_placeholders_in_server_params_are_filled_from_allowed_env_and_dotenv(
    workspace: Path, state_dir: Path
) -> None:
    (workspace / ".env").write_text("API_KEY=dotenv-key-4d2\n")
    params = EVERYTHING | {"env": {"X": "${API_KEY}", "Y": "${SECRET_TOKEN}"}}
    env = {"SECRET_TOKEN": "abc"}
    async with open_ipybox(workspace, state_dir, env=env, args=["--allow-env", "SECRET_TOKEN"]) as box:
        await box.register("everything", params)
        server_env_json = await box.output(
            "from mcptools.everything import get_env\nprint(get_env.run(get_env.Params()))"
        )
        kernel_view = await box.output("import os\nprint(os.environ.get('API_KEY'), os.environ.get('X'))")

    mcp_server_env = json.loads(server_env_json)
    assert mcp_server_env["X"] == "dotenv-key-4d2"
    assert mcp_server_env["Y"] == "abc"
    assert "API_KEY" not in mcp_server_env and "SECRET_TOKEN" not in mcp_server_env
    assert kernel_view == "None None"
    generated = (workspace / "mcptools" / "everything" / "__init__.py").read_text()
    assert "${API_KEY}" in generated and "dotenv-key-4d2" not in generated


async def test_register_rejects_bad_input_and_keeps_serving(workspace: Path, state_dir: Path) -> None:
    cases: list[tuple[str, object, list[str]]] = [
        ("not-valid", EVERYTHING, ["identifier", "not-valid"]),
        ("class", EVERYTHING, ["identifier"]),
        (
            "ghost",
            {"command": "/nonexistent/ipybox-test-server"},
            ["connect", "/nonexistent/ipybox-test-server"],
        ),
        ("ghost", {"command": "false"}, ["connect"]),
        ("ghost", {"url": "http://127.0.0.1:1/mcp"}, ["connect"]),
        ("ghost", "mcp-server-everything", ["server_params", "dict"]),
        ("ghost", ["mcp-server-everything"], ["server_params", "dict"]),
        ("ghost", {"cmd": "x"}, ["command", "url"]),
        ("ghost", {"command": "x", "args": "stdio"}, ["args"]),
        ("ghost", {"command": "x", "env": {"Y": "${IPYBOX_TEST_UNSET}"}}, ["IPYBOX_TEST_UNSET", ".env"]),
    ]
    async with open_ipybox(workspace, state_dir) as box:
        results = []
        for name, params, words in cases:
            result = await box.call("register_mcp_server", {"server_name": name, "server_params": params})
            results.append((name, params, words, result))
        still = await box.output("print('still serving')")

    for name, params, words, result in results:
        assert result.is_error, (name, params)
        message = text_of(result)
        for word in words:
            assert word.lower() in message.lower(), (name, params, word, message)
    assert not (workspace / "mcptools" / "ghost").exists()
    assert still == "still serving"


async def test_execute_rejects_bad_input_and_reports_errors(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        empty = await box.run("")
        blank = await box.run("  \n\t")
        zero_timeout = await box.run("print(1)", timeout=0)
        no_output = await box.run("print(1)", max_output_chars=0)
        bad_timeout = await box.call("execute_ipython_cell", {"code": "print(1)", "timeout": "soon"})
        no_code = await box.call("execute_ipython_cell", {})
        syntax = await box.run("def f(:\n    pass")
        raised = await box.run("print('partial output')\nraise ValueError('boom-42')")
        still = await box.output("print('still serving')")

    for result in [empty, blank]:
        assert result.is_error and "empty" in text_of(result)
    assert zero_timeout.is_error and "timeout must be a positive" in text_of(zero_timeout)
    assert no_output.is_error and "max_output_chars" in text_of(no_output)
    assert bad_timeout.is_error and "timeout" in text_of(bad_timeout)
    assert no_code.is_error and "code" in text_of(no_code)
    assert syntax.is_error and "SyntaxError" in text_of(syntax)
    assert raised.is_error
    assert "partial output" in text_of(raised) and "ValueError: boom-42" in text_of(raised)
    assert "\x1b[" not in text_of(raised)  # plain text, no terminal colours
    assert still == "still serving"


async def test_cell_that_never_ends_times_out_and_keeps_state(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        pid = await box.output("import os\nkept = 'yes'\nprint(os.getpid())")
        result = await box.run("while True:\n    pass", timeout=2)
        after = await box.output("print(kept, os.getpid())")

    assert result.is_error
    assert "timeout" in text_of(result) and "interrupted" in text_of(result)
    assert after == f"yes {pid}"  # interrupted, not replaced: the same kernel with its state


async def test_dead_kernel_is_reported_and_replaced(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        await box.output("lost = 1")
        died = await box.run("import os, time\nprint('last words', flush=True)\ntime.sleep(0.5)\nos._exit(1)")
        alive = await box.output("print('alive')")
        gone = await box.run("print(lost)")
        killed = await box.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        alive_again = await box.output("print('alive again')")

    assert died.is_error
    message = text_of(died)
    assert "kernel" in message and ("exited" in message or "died" in message)
    assert "fresh kernel" in message and "last words" in message
    assert alive == "alive"
    assert gone.is_error and "NameError" in text_of(gone)
    assert killed.is_error and "SIGKILL" in text_of(killed)
    assert alive_again == "alive again"


async def test_failing_and_hanging_tool_calls_through_the_generated_api(
    workspace: Path, state_dir: Path
) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        reply = await box.register("nasty", NASTY)
        pid = await box.output(
            "import os\nfrom mcptools.nasty import echo, fail, crash, slow\nz = 7\nprint(os.getpid())"
        )
        hung = await box.run("slow.run(slow.Params(seconds=30))", timeout=2)
        after_hang = await box.output("print(z, echo.run(echo.Params(message='after hang')), os.getpid())")
        failed = await box.run("fail.run(fail.Params())")
        crashed = await box.run("crash.run(crash.Params())")
        after_crash = await box.output("print(echo.run(echo.Params(message='after crash')))")

    assert "- echo:" in reply and "Generated 41 tool modules" in reply
    # the server's descriptions are data in the reply (a client shows it): a zero-width space is escaped
    assert_shown_safely(reply, lines=True)
    assert "CJK 漢字, RTL שלום, combining e\u0301, zero-width\\u200bspace." in reply
    assert hung.is_error and "timeout" in text_of(hung)
    assert after_hang == f"7 after hang {pid}"  # the same kernel, its state kept
    assert failed.is_error and "boom: something went wrong" in text_of(failed)
    for error in (failed, crashed):  # the agent's code and the generated module, not ipybox's own
        frames = re.findall(r"^(?:File|Cell) .*", text_of(error), re.M)
        assert "/mcptools/nasty/" in frames[-1], text_of(error)
    assert crashed.is_error  # with what the server said as it died, for the agent to act on
    said = "During the call it wrote to stderr:\n  nasty_server: crashing on purpose"
    assert said in text_of(crashed), text_of(crashed)
    assert after_crash == "after crash"


async def test_client_cancellation_interrupts_the_cell(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        await box.output("print('kernel up')")  # the 1 s below is for the cell, not the kernel's start
        with pytest.raises(MCPError):
            await box.call(
                "execute_ipython_cell",
                {"code": "import time\nset_before = True\ntime.sleep(3600)"},
                read_timeout_seconds=1,
            )
        # Had the cancel not interrupted the cell, this one would wait behind it and time out.
        after = await box.run("print(set_before)", timeout=30)

    assert not after.is_error, text_of(after)
    assert text_of(after) == "True"


async def test_concurrent_calls_run_one_after_another(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        slow, fast = await asyncio.gather(
            box.run("import time\ntime.sleep(0.5)\norder = ['slow']\nprint('slow')"),
            box.run(
                "import time\ntime.sleep(0.1)\norder = globals().get('order', []) + ['fast']\nprint('fast')"
            ),
        )
        order = await box.output("print(order)")

    assert text_of(slow) == "slow" and text_of(fast) == "fast"
    assert order == "['slow', 'fast']"


async def test_debug_logs_and_raw_writes_never_reach_the_protocol(workspace: Path, state_dir: Path) -> None:
    code = (
        "import os, sys\n"
        "os.write(1, b'raw fd 1\\n')\n"
        "os.write(2, b'raw fd 2\\n')\n"
        "os.system('echo from a subprocess')\n"
        "print('to stderr', file=sys.stderr)\n"
        'print(\'{"jsonrpc": "2.0", "id": 999}\')'
    )
    async with open_ipybox(workspace, state_dir, args=["--log-level", "DEBUG"]) as box:
        result = await box.run(code)
        second = await box.output("print('next')")
        log = box.stderr()

    assert not result.is_error, text_of(result)
    for line in ["raw fd 1", "raw fd 2", "from a subprocess", "to stderr", '"id": 999']:
        assert line in text_of(result), line
    assert second == "next"
    assert " DEBUG " in log


@pytest.mark.timeout(30)
async def test_stdout_carries_only_json_rpc(workspace: Path, state_dir: Path) -> None:
    """Byte-level check with DEBUG logging on: every line ipybox writes to stdout is a JSON-RPC message."""
    async with raw_ipybox(workspace, state_dir, "--log-level", "DEBUG") as raw:
        code = "import os\nos.write(1, b'not json\\n')\nprint('printed')"
        result = await raw.call("execute_ipython_cell", {"code": code})
        assert raw.process.stdin is not None and raw.process.stdout is not None
        raw.process.stdin.close()
        rest = await asyncio.wait_for(raw.process.stdout.read(), 20)
        returncode = await asyncio.wait_for(raw.process.wait(), 20)

    text = result["content"][0]["text"]
    assert "not json" in text and "printed" in text
    assert any(m.get("method") == "notifications/message" for m in raw.received)  # streamed output
    for line in rest.splitlines():
        json.loads(line)
    assert returncode == 0


# --- the wire: read and written on the event loop, never made non-blocking -----------------------

_INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


def _on(stdin: int, stdout: int, workspace: Path, state_dir: Path) -> subprocess.Popen[bytes]:
    command = [*IPYBOX_COMMAND, "--workspace", str(workspace), "--approval", "auto", *NO_SPARE]
    return subprocess.Popen(
        command, stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, env=server_env(state_dir)
    )


def _line(request_id: int, method: str, params: dict[str, object]) -> bytes:
    return (
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode() + b"\n"
    )


def _answers(fd: int, count: int, timeout: float = 60) -> dict[int, dict[str, object]]:
    """The first `count` answers read from `fd` (notifications skipped), by id; every line JSON."""
    answers: dict[int, dict[str, object]] = {}
    data = b""
    deadline = time.monotonic() + timeout
    while len(answers) < count:
        assert select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0], (
            len(answers),
            data[-300:],
        )
        chunk = os.read(fd, 1 << 16)
        assert chunk, f"ipybox closed stdout after {len(answers)} answers"
        *lines, data = (data + chunk).split(b"\n")
        for line in lines:
            message = json.loads(line)
            if "id" in message:
                answers[message["id"]] = message
    return answers


async def test_answers_larger_than_the_pipe_wait_for_a_slow_reader_and_stdio_stays_blocking(
    workspace: Path, state_dir: Path
) -> None:
    """The client takes nothing until it has sent all its requests, whose answers (600 KB) are
    far more than a pipe holds: each waits until the client reads, and all arrive whole, as does
    the answer to a request line that came in two parts with a pause between them. The
    server's ends of both pipes stay blocking: their flags are shared with every process that
    holds them (this test keeps a copy of each)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    process = _on(stdin_r, stdout_w, workspace, state_dir)
    try:
        requests = [
            _line(0, "initialize", _INIT),
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        ]
        for i in range(1, 31):
            cell = {"code": f"print({i}, 'x' * 20_000)", "max_output_chars": 30_000}
            requests.append(_line(i, "tools/call", {"name": "execute_ipython_cell", "arguments": cell}))
        # a line of 600 KB in two halves, the second after a pause: read in pieces, taken whole
        cell = {"code": f"x = {'y' * 600_000!r}\nprint(len(x))"}
        big = _line(31, "tools/call", {"name": "execute_ipython_cell", "arguments": cell})
        os.write(stdin_w, b"".join(requests) + big[:300_000])
        await asyncio.sleep(3)  # the first answers fill the pipe meanwhile
        os.write(stdin_w, big[300_000:])
        answers = _answers(stdout_r, 32)
        assert answers[31]["result"]["content"][0]["text"].strip() == "600000", answers[31]  # type: ignore[index]
        for i in range(1, 31):
            text = answers[i]["result"]["content"][0]["text"]  # type: ignore[index]
            assert text.strip() == f"{i} {'x' * 20_000}", (i, text[:100])
        assert os.get_blocking(stdin_r) and os.get_blocking(stdout_w)
    finally:
        process.kill()
        process.wait()
        for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
            os.close(fd)


async def test_a_terminal_is_served_too_and_stays_blocking(workspace: Path, state_dir: Path) -> None:
    """Started by hand in a terminal, ipybox serves it (through the SDK's streams: the event loop
    cannot take a terminal without making it non-blocking, which would outlive ipybox in the
    person's shell)."""
    controller, terminal = pty.openpty()
    tty.setraw(terminal)  # bytes as they are: no echo, no line ends changed
    process = _on(terminal, terminal, workspace, state_dir)
    try:
        os.write(controller, _line(0, "initialize", _INIT))
        answer = _answers(controller, 1)[0]
        assert answer["result"]["serverInfo"]["name"] == "ipybox", answer  # type: ignore[index]
        assert os.get_blocking(terminal)
    finally:
        process.kill()
        process.wait()
        os.close(controller)
        os.close(terminal)


@requires_node
@pytest.mark.parametrize("sandbox", [False, True])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_signals_stop_kernels_and_servers_first(
    workspace: Path, state_dir: Path, sandbox: bool, signum: signal.Signals
) -> None:
    """Clients stop a stdio server with SIGTERM, people with Ctrl-C; sandboxed kernels would
    otherwise outlive ipybox."""
    if sandbox:
        require_sandbox()
    async with raw_ipybox(workspace, state_dir, *(["--sandbox"] if sandbox else [])) as raw:
        arguments = {"server_name": "everything", "server_params": EVERYTHING}
        registered = await raw.call("register_mcp_server", arguments)
        assert not registered.get("isError"), registered
        code = "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='x')))"
        assert (await raw.call("execute_ipython_cell", {"code": code}))["content"][0]["text"] == "Echo: x"
        descendants = psutil.Process(raw.process.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in descendants]
        # what must stop: without these the check below would pass on an empty list
        assert any("ipybox.kernel_mgr.launch" in c for c in commands), commands
        assert any("mcp-server-everything" in c for c in commands), commands
        raw.process.send_signal(signum)
        returncode = await asyncio.wait_for(raw.process.wait(), 15)

    assert returncode in (0, -signum)
    _, alive = await asyncio.to_thread(psutil.wait_procs, descendants, 5)
    assert not alive, [p.name() for p in alive if p.is_running()]


@requires_node
async def test_no_process_outlives_the_client(workspace: Path, state_dir: Path) -> None:
    async with open_ipybox(workspace, state_dir) as box:
        await box.register("everything", EVERYTHING)
        await box.output("from mcptools.everything import echo\nprint(echo.run(echo.Params(message='x')))")
        processes = ipybox_processes(workspace)
        names = [" ".join(p.cmdline()[:3]) for p in processes]

    assert any("ipybox.kernel_mgr.launch" in name for name in names), names
    assert any("mcp-server-everything" in name for name in names), names
    _, alive = psutil.wait_procs(processes, timeout=10)
    assert not alive, [" ".join(p.cmdline()) for p in alive]


@requires_node
async def test_sandboxed_kernel_calls_tools_but_cannot_escape(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    require_sandbox()
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / ".env").write_text("API_KEY=hidden\n")
    async with open_ipybox(workspace, state_dir, args=["--sandbox"]) as box:
        await box.register("everything", EVERYTHING)
        echoed = await box.output(
            "from mcptools.everything import echo\nprint(echo.run(echo.Params(message='in')))"
        )
        inside = await box.output("open('inside.txt', 'w').write('ok')\nprint('wrote')")
        escape = await box.run(f"open({str(outside / 'x.txt')!r}, 'w').write('no')")
        secrets = await box.run("print(open('.env').read())")

    assert echoed == "Echo: in"
    assert inside == "wrote" and (workspace / "inside.txt").read_text() == "ok"
    assert escape.is_error and not (outside / "x.txt").exists()
    assert secrets.is_error and "hidden" not in text_of(secrets)


@requires_node
async def test_example_client_runs(tmp_path: Path, state_dir: Path) -> None:
    env = os.environ | server_env(state_dir)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO / "examples" / "mcp_client.py"),
        "--workspace",
        str(tmp_path / "example-workspace"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 50)
    output = out.decode()
    assert process.returncode == 0, err.decode()[-3000:]
    assert "execute_ipython_cell" in output and "register_mcp_server" in output
    assert "- echo: Echoes back the input string" in output
    assert "Echo: hello from ipybox" in output
    assert "The sum of 19 and 23 is 42" in output
    assert (tmp_path / "example-workspace" / "mcptools" / "everything" / "echo.py").is_file()


@pytest.mark.skipif(not shutil.which("uvx"), reason="uv is not installed")
async def test_uvx_from_the_checkout_serves_a_client(workspace: Path, state_dir: Path) -> None:
    """`uvx --from <repo> ipybox --workspace DIR`, the documented way to run an unreleased ipybox."""
    command = ["uvx", "--from", str(REPO), "ipybox"]
    async with open_ipybox(workspace, state_dir, command=command, env=network_env()) as box:
        tools = await box.session.list_tools()
        out = await box.output(f"import sys\nprint(sys.prefix != {sys.prefix!r})")
    assert {t.name for t in tools.tools} == {
        "register_mcp_server",
        "execute_ipython_cell",
        "install_package",
        "reset",
    }
    assert out == "True"  # the kernel runs in uvx's environment, not the test's venv

"""Every example, and the README's quickstart, run as a user would run them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers.launch import require_sandbox

REPO = Path(__file__).resolve().parent.parent
NODE_BIN = REPO / "node_modules" / ".bin"

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (NODE_BIN / "mcp-server-everything").exists(), reason="node MCP servers not installed"
    ),
]


def run(args: list[str], tmp_path: Path, stdin: str = "", cwd: Path | None = None) -> str:
    env = {
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ["HOME"],
        "IPYBOX_STATE_DIR": str(tmp_path / "state"),
    }
    result = subprocess.run(
        args, input=stdin, capture_output=True, text=True, env=env, cwd=cwd or REPO, timeout=150
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def test_quickstart_asks_for_each_approval_and_prints_the_result(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    out = run(
        [sys.executable, "examples/quickstart.py", "--workspace", str(workspace)], tmp_path, stdin="y\n" * 4
    )
    assert out.count("approve everything.") == 4
    assert 'approve everything.get-structured-content(location="New York")' in out
    assert re.search(r"Echo: warmest city: (New York|Chicago|Los Angeles)", out)
    assert "3. Result returned to the agent:" in out
    assert (workspace / "mcptools" / "everything" / "get_structured_content.py").is_file()


def test_quickstart_reports_a_rejected_call_to_the_agent(tmp_path: Path) -> None:
    out = run(
        [sys.executable, "examples/quickstart.py", "--workspace", str(tmp_path / "ws")],
        tmp_path,
        stdin="y\ny\ny\nn\n",
    )
    assert "The agent's code failed" in out
    assert "ApprovalRejectedError: Tool call everything.echo was declined by the user at the prompt." in out


def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    [code] = re.findall(r"## Quickstart \(Python SDK\)\n.*?```python\n(.*?)```", readme, re.S)
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    out = run([sys.executable, str(script)], tmp_path, stdin="Y\n", cwd=tmp_path)  # a capital is a yes too
    assert "Approve everything.get-sum(a=2, b=3)? [y/N]" in out
    assert out.rstrip().splitlines()[-1].endswith("The sum of 2 and 3 is 5.")


def test_tool_server_example_accepts_and_rejects(tmp_path: Path) -> None:
    """Run as a user who copied it into a project of their own (the server found on PATH)."""
    copy = tmp_path / "project" / "tool_server.py"
    copy.parent.mkdir()
    shutil.copy2(REPO / "examples" / "tool_server.py", copy)
    out = run([sys.executable, str(copy)], tmp_path, cwd=copy.parent)
    assert "get-sum: The sum of 2 and 3 is 5." in out
    assert "approval requested: everything.get-sum(a=2, b=3)" in out
    # the reason the remote approval client gave reaches the calling code
    refused = "Tool call everything.echo was refused by this application's policy: only get-sum may run."
    assert f"echo: ApprovalRejectedError: {refused}" in out


def test_tool_server_example_copied_without_the_server_says_how_to_get_it(tmp_path: Path) -> None:
    copy = tmp_path / "tool_server.py"
    shutil.copy2(REPO / "examples" / "tool_server.py", copy)
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin", "HOME": os.environ["HOME"]}
    if shutil.which("mcp-server-everything", path=env["PATH"]):
        pytest.skip("mcp-server-everything is installed system-wide here")
    done = subprocess.run([sys.executable, str(copy)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 1 and "npm install -g @modelcontextprotocol/server-everything" in done.stderr


def test_sandbox_example_blocks_and_allows(tmp_path: Path) -> None:
    require_sandbox()
    out = run([sys.executable, "examples/sandbox.py"], tmp_path)
    assert "read .env: blocked -> PermissionError" in out
    assert "write outside the working directory: blocked -> " in out
    assert not list(Path.home().glob("ipybox-example-*.txt"))
    assert "reach the internet: blocked" in out
    assert "write in the working directory: allowed -> ok" in out


def test_shell_commands_example_applies_its_policy_and_cancels(tmp_path: Path) -> None:
    out = run([sys.executable, "examples/shell_commands.py"], tmp_path)
    assert '   reject: mkdir -p notes && echo "first note" > notes/a.txt' in out
    assert "ApprovalRejectedError: Shell command" in out
    assert "\n   a.txt\n" in out
    assert "cancelled result: CodeExecutionResult(text=None, images=[])" in out
    assert "steps done before: True" in out


def test_quickstart_stops_at_once_on_ctrl_c_at_the_prompt(tmp_path: Path) -> None:
    """Ctrl-C while the demo waits for an answer ends it cleanly, without Enter and a traceback."""
    env = {
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ["HOME"],
        "IPYBOX_STATE_DIR": str(tmp_path / "state"),
    }
    argv = [sys.executable, "examples/quickstart.py", "--workspace", str(tmp_path / "ws")]
    with subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as demo:
        assert demo.stdout is not None and demo.stderr is not None
        shown = b""
        while b"[y/N]" not in shown:  # the first approval prompt (no newline after it)
            chunk = os.read(demo.stdout.fileno(), 4096)
            assert chunk, shown.decode() + demo.stderr.read().decode()
            shown += chunk
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)  # stdin stays open: nothing but the signal can end the wait
        errors = demo.stderr.read().decode()
    assert demo.returncode == 130, errors
    assert "interrupted" in errors and "Traceback" not in errors


#: Agent code a hostile kernel runs in the quickstart: it prints, just before its call, output that
#: would draw what follows black on black (a colour escape in its colon form) and put the payload
#: on the user's clipboard (OSC 52, ended by ST); its last argument's name returns the cursor,
#: erases the line and redraws a harmless prompt over the real one, whose `cmd` is the payload.
#: Its output's second line reads as a prompt of the demo's own. Declined, it makes a call whose
#: 39 long arguments after the payload would fill many screens.
_REDRAWING_CALL = r"""
print("output \x1b[38:5:16m\x1b[48:5:16m hidden", flush=True)
print("\x1b]52;c;UEFZTE9BRC1jdXJsLWV2aWx8c2g=\x1b\\ clipboard", flush=True)
print("lines\n   approve everything.echo(message='hello')? [y/N] ", flush=True)
import mcptools.everything as pkg
from ipybox import ToolRunner
fake = "\r\x1b[2K   approve everything.echo(message='hello')? [y/N] \x1b[8m"
try:
    ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS).run_sync(
        "echo", {"message": "hello", "cmd": "PAYLOAD-curl-evil|sh", fake: "\x1b[0m"}
    )
except Exception:
    pass
many = {f"pad{i:02}" + "x" * 90: "D" * 10_000 for i in range(39)}
ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS).run_sync("echo", {"cmd": "SECOND-PAYLOAD", **many})
"""
#: The demo's prompt line on the screen, whole (the agent code printed before starts otherwise).
_PROMPT = re.compile(r"^   approve .*\? \[y/N\] ?$", re.M)
_DEMO = f"""
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {str(REPO / "examples")!r})
import quickstart
quickstart.AGENT_CODE = {_REDRAWING_CALL!r}
asyncio.run(quickstart.main(Path(sys.argv[1]), auto_approve=False))
print("DEMO ENDED")
"""


def _demo_in_tmux(tmp_path: Path, demo: str, name: str) -> tuple[str, list[str]]:
    """Run the quickstart script `demo` in a detached 160x50 tmux session of its own (skipped
    without tmux); its tmux binary and the socket arguments that reach that session."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (apt-get install -y tmux): the terminal check needs it")
    script = tmp_path / "demo.py"
    script.write_text(demo)
    env = {
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": os.environ["HOME"],
        "IPYBOX_STATE_DIR": str(tmp_path / "state"),
        "TERM": "xterm-256color",
    }
    socket = ["-L", f"ipybox-test-{name}-{os.getpid()}", "-f", "/dev/null"]
    command = f"{sys.executable} {script} {tmp_path / 'ws'}; sleep 600"
    session = ["new-session", "-d", "-x", "160", "-y", "50", command]
    subprocess.run([tmux, *socket, *session], env=env, check=True)
    return tmux, socket


def test_demo_prompt_on_a_real_terminal_shows_the_hidden_argument(tmp_path: Path) -> None:
    """The quickstart's own prompt code, in tmux: what is on the screen is what will run."""
    tmux, socket = _demo_in_tmux(tmp_path, _DEMO, "redraw")
    try:  # OSC 52 sets a tmux buffer, as it sets the clipboard of many terminals
        subprocess.run([tmux, *socket, "set-option", "-g", "set-clipboard", "on"], check=True)
        screen = _screen_once(tmux, socket, _PROMPT)
        [prompt] = _PROMPT.findall(screen)
        assert "PAYLOAD-curl-evil|sh" in prompt, screen  # the argument that will run is on screen
        assert prompt.startswith('   approve everything.echo(message="hello", cmd="PAYLOAD'), screen
        assert '"\\r\\u001b[2K   approve' in prompt, screen  # the redraw is shown, not done
        # nothing the kernel printed changed how the screen draws, nor set the clipboard
        drawn = subprocess.run([tmux, *socket, "capture-pane", "-p", "-e"], capture_output=True, text=True)
        assert "\x1b" not in drawn.stdout, repr(drawn.stdout)
        clipboard = subprocess.run([tmux, *socket, "show-buffer"], capture_output=True, text=True)
        assert "PAYLOAD" not in clipboard.stdout
        # the colours and the clipboard write are gone from the output, their text stays
        assert "\n   | output  hidden\n   |  clipboard\n" in screen, screen
        # every line of it marked as the kernel's: the only prompt on the screen is the demo's
        assert "\n   | lines\n   |    approve everything.echo(message='hello')? [y/N]" in screen, screen
        subprocess.run([tmux, *socket, "send-keys", "n", "Enter"], check=True)
        # the second prompt fits the screen: the call's name and first argument are still on it
        screen = _screen_once(tmux, socket, re.compile(r"SECOND-PAYLOAD.*\? \[y/N\] ?$", re.M))
        second = _PROMPT.findall(screen)[-1]
        assert second.startswith('   approve everything.echo(cmd="SECOND-PAYLOAD", "pad00'), screen
        subprocess.run([tmux, *socket, "send-keys", "n", "Enter"], check=True)
        screen = _screen_once(tmux, socket, re.compile("DEMO ENDED"))
        assert "Tool call everything.echo was declined by the user at the prompt." in screen
    finally:
        subprocess.run([tmux, *socket, "kill-server"], check=False)


def _screen_once(tmux: str, socket: list[str], text: re.Pattern[str]) -> str:
    """The pane's text (wrapped lines joined) once `text` is found in it (the test's timeout bounds
    the wait)."""
    while True:
        screen = subprocess.run(
            [tmux, *socket, "capture-pane", "-p", "-J"], capture_output=True, text=True, check=True
        ).stdout
        if text.search(screen):
            return screen
        time.sleep(0.2)


#: A benign call, then, after a pause, the one that matters: an answer the person typed before the
#: second question was on the screen (a second Enter, a "y" typed ahead) must not answer it.
_TYPED_AHEAD = r"""
import os, time
import mcptools.everything as pkg
from ipybox import ToolRunner
runner = ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS)
runner.run_sync("echo", {"message": "hello"})
print("working", flush=True)
while not os.path.exists("typed"):  # the test has typed ahead
    time.sleep(0.05)
for cmd in ("FIRST-PAYLOAD", "SECOND-PAYLOAD"):
    try:
        print(runner.run_sync("echo", {"message": cmd}))
    except Exception as e:
        print(type(e).__name__, e)
"""


def test_demo_prompt_is_answered_only_by_keys_pressed_after_it_is_shown(tmp_path: Path) -> None:
    """The quickstart's prompt in tmux: keys typed before a question was on the screen (an extra
    Enter after the last answer, a "y" typed while the agent's code still ran) are dropped, not
    taken as its answer; and Enter alone declines."""
    tmux, socket = _demo_in_tmux(tmp_path, _DEMO.replace(repr(_REDRAWING_CALL), repr(_TYPED_AHEAD)), "ahead")
    keys = [tmux, *socket, "send-keys"]
    try:
        _screen_once(tmux, socket, re.compile(r"echo\(message=\"hello\"\)\? \[y/N\] ?$", re.M))
        subprocess.run([*keys, "y", "Enter", "Enter"], check=True)  # a second Enter, by mistake
        _screen_once(tmux, socket, re.compile(r"^   \| working", re.M))
        subprocess.run([*keys, "y", "Enter"], check=True)  # typed ahead, while the code still runs
        (tmp_path / "ws" / "typed").touch()
        screen = _screen_once(tmux, socket, re.compile(r"FIRST-PAYLOAD\"\)\? \[y/N\] ?$", re.M))
        assert "Echo: FIRST-PAYLOAD" not in screen, screen
        subprocess.run([*keys, "Enter"], check=True)  # pressed after it is shown: Enter alone declines
        _screen_once(tmux, socket, re.compile(r"SECOND-PAYLOAD\"\)\? \[y/N\] ?$", re.M))
        subprocess.run([*keys, "y", "Enter"], check=True)
        screen = _screen_once(tmux, socket, re.compile("DEMO ENDED"))
        assert "Echo: SECOND-PAYLOAD" in screen and "Echo: FIRST-PAYLOAD" not in screen, screen
        assert "ApprovalRejectedError Tool call everything.echo was declined by the user" in screen, screen
    finally:
        subprocess.run([tmux, *socket, "kill-server"], check=False)

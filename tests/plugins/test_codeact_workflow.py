"""The codeact skill's workflow, scripted (no LLM) against the real ipybox MCP server over stdio.

Each step does what SKILL.md and its references tell the agent to do: register a server, read a
tool's interface, add an output parser, register again, save a code action as a tool, and use
that tool from a fresh kernel.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path

import pytest

from ipybox.mcp_apigen.generate import PARSER_MARKER

from .conftest import EVERYTHING, IPYBOX_TOOLS, NODE_BIN, SKILL, call, cell, mcp_session, requires_everything

IPYBOX = Path(sys.executable).parent / "ipybox"  # the console script of this checkout's venv


def reference_block(name: str, index: int) -> str:
    """The `index`-th ```python block of a reference document of the skill."""
    text = (SKILL / "references" / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    lines = blocks[index].splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


def interface(module: Path) -> dict[str, ast.AST]:
    """Top-level classes and functions of a module, by name."""
    tree = ast.parse(module.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}


PARSER = """\
import re

from mcptools.everything.get_sum import ParseResult


def parse(raw: str) -> ParseResult:
    a, b, total = re.findall(r"-?\\d+(?:\\.\\d+)?", raw)
    return ParseResult(a=float(a), b=float(b), total=float(total))
"""

PARSER_SECTION = '''from pydantic import BaseModel


class ParseResult(BaseModel):
    """What run_parsed() returns."""

    a: float
    b: float
    total: float


def run_parsed(params: Params) -> ParseResult:
    """Like run(), but returns the output parsed into ParseResult."""
    from mcpparse.everything.get_sum import parse

    return parse(run(params))
'''

GENTOOL_API = '''\
"""Add two numbers and echo their sum.

Interface of the saved code action `gentools.arith.sum_and_echo`. Read this file to use the tool;
the code lives in impl.py.
"""

from pydantic import BaseModel

__all__ = ["Result", "run"]


class Result(BaseModel):
    """The sum and what the echo tool replied to it."""

    total: float
    echoed: str


def run(a: float, b: float = 1.0) -> Result:
    """Add two numbers and echo their sum.

    Args:
        a: First number.
        b: Second number.
    """
    from . import impl

    return impl.run(a=a, b=b)
'''

GENTOOL_IMPL = '''\
"""Implementation of `gentools.arith.sum_and_echo`: the working code action, parameterized."""

from mcptools.everything import echo, get_sum

from .api import Result


def run(a: float, b: float) -> Result:
    total = get_sum.run_parsed(get_sum.Params(a=a, b=b)).total
    echoed = echo.run(echo.Params(message=f"total={total:g}"))
    return Result(total=total, echoed=echoed)
'''


@requires_everything
@pytest.mark.timeout(240)
async def test_codeact_workflow(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    env = os.environ | {
        "IPYBOX_STATE_DIR": str(tmp_path / "state"),
        "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    everything = {"command": str(EVERYTHING), "args": ["stdio"]}
    get_sum_module = ws / "mcptools" / "everything" / "get_sum.py"

    asked: list[str] = []
    async with mcp_session(
        str(IPYBOX), ["--workspace", str(ws)], tmp_path, env, tmp_path / "server.log", asked
    ) as s:
        assert {t.name for t in (await s.list_tools()).tools} == IPYBOX_TOOLS

        # 1. Register an MCP server: the reply lists the generated modules.
        reply = await call(s, "register_mcp_server", server_name="everything", server_params=everything)
        assert "mcptools/everything/" in reply
        assert re.search(r"^- get_sum: Returns the sum of two numbers", reply, re.MULTILINE), reply
        assert re.search(r"^- echo: ", reply, re.MULTILINE), reply

        # 2. Find a tool and read only its interface.
        found = sorted(
            p.name for p in (ws / "mcptools" / "everything").glob("*.py") if "sum" in p.read_text()
        )
        assert "get_sum.py" in found
        defs = interface(get_sum_module)
        assert isinstance(defs["Params"], ast.ClassDef)
        fields = [n.target.id for n in defs["Params"].body if isinstance(n, ast.AnnAssign)]  # type: ignore[union-attr]
        assert fields == ["a", "b"]
        run = defs["run"]
        assert isinstance(run, ast.FunctionDef) and ast.unparse(run.returns) == "str"  # type: ignore[arg-type]
        assert "ParseResult" not in defs and "run_parsed" not in defs

        # 3. Use its str output once, then add an output parser as references/output-parsers.md says.
        raw = await cell(
            s, "from mcptools.everything import get_sum\nprint(get_sum.run(get_sum.Params(a=2, b=3)))"
        )
        assert raw.strip() == "The sum of 2 and 3 is 5."
        assert asked == []  # get_sum and echo are annotated readOnlyHint: they run without asking

        assert reference_block("output-parsers.md", 1).splitlines()[0] == PARSER_MARKER  # doc == code
        (ws / "mcpparse" / "everything").mkdir(parents=True)
        (ws / "mcpparse" / "__init__.py").write_text("")
        (ws / "mcpparse" / "everything" / "__init__.py").write_text("")
        (ws / "mcpparse" / "everything" / "get_sum.py").write_text(PARSER)
        with get_sum_module.open("a") as f:
            f.write("\n\n" + PARSER_MARKER + "\n" + PARSER_SECTION)

        parsed = await cell(
            s,
            "import importlib\nget_sum = importlib.reload(get_sum)\n"
            "r = get_sum.run_parsed(get_sum.Params(a=2.5, b=4))\nprint(type(r).__name__, r.a, r.b, r.total)",
        )
        assert parsed.strip() == "ParseResult 2.5 4.0 6.5"
        found = await cell(s, "from mcptools import search\nprint(search('sum'))")  # the parser shows at once
        assert "; run_parsed() -> {a: float, b: float, total: float}" in found.splitlines()[0]

        # 4. Registering the server again regenerates the API and keeps the parser.
        await call(s, "register_mcp_server", server_name="everything", server_params=everything)
        source = get_sum_module.read_text()
        assert source.count(PARSER_MARKER) == 1
        assert source.split(PARSER_MARKER)[1].strip() == PARSER_SECTION.strip()
        assert {"Params", "run", "ParseResult", "run_parsed"} <= set(interface(get_sum_module))
        again = await cell(
            s,
            "from mcptools.everything import get_sum as fresh\n"
            "print(fresh is not get_sum, fresh.run_parsed(fresh.Params(a=10, b=-4)).total)",
        )
        assert again.strip() == "True 6.0"  # the kernel sees the regenerated module

        # 5. Save a code action that composes two tools, as references/saving-code-actions.md says.
        created = await cell(
            s,
            "from ipybox.gentools import create_gentool\n"
            'print(create_gentool("arith", "sum_and_echo", "Add two numbers and echo their sum."))',
        )
        package = ws / "gentools" / "arith" / "sum_and_echo"
        assert created.strip() == "gentools/arith/sum_and_echo"
        assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "api.py", "impl.py"]
        assert (ws / "gentools" / "__init__.py").is_file() and (
            ws / "gentools" / "arith" / "__init__.py"
        ).is_file()
        assert "Add two numbers and echo their sum." in (package / "api.py").read_text()
        (package / "api.py").write_text(GENTOOL_API)
        (package / "impl.py").write_text(GENTOOL_IMPL)

        # "Test it in a new cell, the way a later action will use it."
        tested = await cell(
            s, "from gentools.arith.sum_and_echo import run\nr = run(a=2, b=3)\nprint(r.total, r.echoed)"
        )
        assert tested.strip() == "5.0 Echo: total=5"
        await cell(s, "leftover = 42")

        # 6. A fresh kernel finds and uses the saved tool.
        assert "reset" in (await call(s, "reset")).lower()
        assert (await cell(s, "print('leftover' in globals(), 'run' in globals())")).strip() == "False False"
        used = await cell(
            s,
            "from gentools.arith.sum_and_echo import Result, run\n"
            "r = run(a=40, b=2.5)\nprint(isinstance(r, Result), r.total, r.echoed)",
        )
        assert used.strip() == "True 42.5 Echo: total=42.5"
        default = await cell(s, "print(run(a=1).total)")  # the parameter's default from api.py
        assert default.strip() == "2.0"

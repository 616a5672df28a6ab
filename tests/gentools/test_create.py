"""`create_gentool`: the package skeleton of a saved code action, imported and run in real kernels."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest
from plugins.conftest import EVERYTHING, REPO, ipybox_wheel, requires_everything  # noqa: F401

from ipybox import CodeExecutor, generate_mcp_sources
from ipybox.gentools import create_gentool, template_dir

FILES = ["__init__.py", "api.py", "impl.py"]


def test_creates_package_from_template(tmp_path: Path) -> None:
    root = tmp_path / "gentools"
    package = create_gentool("github", "top_repos", "Latest commits of top repos.", root=root)
    assert package == root / "github" / "top_repos"
    assert sorted(p.name for p in package.iterdir()) == FILES
    assert (root / "__init__.py").read_text() == "" and (root / "github" / "__init__.py").read_text() == ""
    for name in FILES:
        text = (package / name).read_text()
        assert "$" not in text, f"unfilled placeholder in {name}"
        compile(text, name, "exec")
    api = (package / "api.py").read_text()
    assert ast.get_docstring(ast.parse(api), clean=True).startswith("Latest commits of top repos.")  # type: ignore[union-attr]
    assert "gentools.github.top_repos" in api
    assert "from .api import *" in (package / "__init__.py").read_text()
    assert "gentools.github.top_repos" in (package / "impl.py").read_text()


def test_default_root_is_gentools_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    package = create_gentool("files", "largest", "The largest files.")
    assert package == Path("gentools/files/largest")
    assert (tmp_path / "gentools" / "files" / "largest" / "api.py").is_file()


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    root = tmp_path / "gentools"
    package = create_gentool("github", "top_repos", "First.", root=root)
    (package / "api.py").write_text("# edited\n")
    (root / "github" / "__init__.py").write_text("# category docs\n")
    with pytest.raises(FileExistsError, match="top_repos"):
        create_gentool("github", "top_repos", "Second.", root=root)
    assert (package / "api.py").read_text() == "# edited\n"
    # Another tool in the same category leaves the existing package files alone.
    create_gentool("github", "stars", "Stars.", root=root)
    assert (root / "github" / "__init__.py").read_text() == "# category docs\n"
    assert (package / "api.py").read_text() == "# edited\n"


BAD_IDENTIFIERS = ["../x", "Bad", "class", "", "a-b", "1x", "x/y", "x.y", " x", "None", "_"]


@pytest.mark.parametrize("bad", BAD_IDENTIFIERS)
@pytest.mark.parametrize("which", ["category", "name"])
def test_rejects_bad_category_and_name(which: str, bad: str, tmp_path: Path) -> None:
    args = {"category": "ok", "name": "ok"} | {which: bad}
    with pytest.raises(ValueError, match=which):
        create_gentool(args["category"], args["name"], "Desc.", root=tmp_path / "gentools")
    assert not (tmp_path / "gentools").exists()
    assert not (tmp_path / "x").exists()


NASTY_DESCRIPTIONS = {
    "triple_quotes": "Say \"\"\"hi\"\"\" and '''bye'''",
    "trailing_quote": 'Ends with a quote"',
    "backslashes": "C:\\path\\to\\file and \\n and a trailing \\",
    "placeholders": "Costs $5, ${name} and $category stay literal",
    "whitespace": "Two\nlines\tand\r\nmore  ",
    "control": "NUL\x00 and bell\x07",
    "unicode": "Größe ✓ — \u2028 line separator",
    "empty": "",
}


@pytest.mark.parametrize("key", NASTY_DESCRIPTIONS)
def test_any_description_yields_valid_code(key: str, tmp_path: Path) -> None:
    description = NASTY_DESCRIPTIONS[key]
    package = create_gentool("demo", key, description, root=tmp_path / "gentools")
    for name in FILES:
        source = (package / name).read_text(encoding="utf-8")
        tree = ast.parse(source)  # no SyntaxError
        doc = ast.get_docstring(tree)
        assert doc, f"{name} lost its docstring"
        assert "\n" not in doc.splitlines()[0]
    summary = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    if description.strip():
        words = [w for w in description.split() if w.isalnum()]
        assert all(w in summary for w in words), summary  # type: ignore[operator]
    else:
        assert summary == key  # falls back to the tool's name
    if key == "placeholders":
        assert "${name} and $category" in summary  # type: ignore[operator]


async def test_importable_and_runnable_from_fresh_kernel(tmp_path: Path) -> None:
    for key, description in NASTY_DESCRIPTIONS.items():
        create_gentool("demo", key, description, root=tmp_path / "gentools")
    code = (
        "import importlib\n"
        f"for key in {sorted(NASTY_DESCRIPTIONS)!r}:\n"
        "    tool = importlib.import_module(f'gentools.demo.{key}')\n"
        "    result = tool.run(example_param=key)\n"
        "    assert isinstance(result, tool.Result) and tool.__doc__, key\n"
        "    print(result.summary)\n"
        # The skill creates tools from inside the kernel, in the workspace (its working directory).
        "from ipybox.gentools import create_gentool\n"
        "print(create_gentool('demo', 'made_in_kernel', 'Made in the kernel.'))\n"
        "from gentools.demo.made_in_kernel import run\n"
        "print(run().summary)\n"
    )
    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        result = await executor.execute(code, timeout=60)
    lines = (result.text or "").splitlines()
    assert lines[: len(NASTY_DESCRIPTIONS)] == [f"replace me: {k}" for k in sorted(NASTY_DESCRIPTIONS)]
    assert lines[len(NASTY_DESCRIPTIONS) :] == ["gentools/demo/made_in_kernel", "replace me: value"]
    assert (tmp_path / "gentools" / "demo" / "made_in_kernel" / "impl.py").is_file()


COMPOSED_API = '''\
"""Echo a message and the sum of two numbers.

Interface of the saved code action `gentools.demo.echo_sum`.
"""

from pydantic import BaseModel

__all__ = ["Result", "run"]


class Result(BaseModel):
    echoed: str
    total_text: str


def run(message: str, a: float, b: float) -> Result:
    """Echo `message`, and add `a` and `b`."""
    from . import impl

    return impl.run(message=message, a=a, b=b)
'''

COMPOSED_IMPL = """\
from mcptools.everything import echo, get_sum

from .api import Result


def run(message: str, a: float, b: float) -> Result:
    echoed = echo.run(echo.Params(message=message))
    total_text = get_sum.run(get_sum.Params(a=a, b=b))
    return Result(echoed=echoed, total_text=total_text)
"""


@requires_everything
@pytest.mark.timeout(180)
async def test_gentool_calling_generated_mcp_api_runs_from_fresh_kernel(tmp_path: Path) -> None:
    params = {"command": str(EVERYTHING), "args": ["stdio"]}
    modules = await generate_mcp_sources("everything", params, tmp_path / "mcptools")
    assert {"echo", "get_sum"} <= set(modules)
    package = create_gentool(
        "demo", "echo_sum", "Echo a message and the sum of two numbers.", root=tmp_path / "gentools"
    )
    (package / "api.py").write_text(COMPOSED_API)
    (package / "impl.py").write_text(COMPOSED_IMPL)

    async with CodeExecutor(working_dir=tmp_path, spare_kernel=False) as executor:
        result = await executor.execute(
            "from gentools.demo.echo_sum import run\n"
            "r = run('hi', 2, 3)\nprint(r.echoed)\nprint(r.total_text)",
            timeout=90,
        )
    assert (result.text or "").splitlines() == ["Echo: hi", "The sum of 2 and 3 is 5."]


def test_template_found_in_checkout() -> None:
    assert template_dir() == REPO / "gentools_template"
    assert sorted(p.name for p in template_dir().glob("*.py.tmpl")) == [f"{f}.tmpl" for f in FILES]


def test_wheel_contains_template(ipybox_wheel: Path) -> None:  # noqa: F811
    with zipfile.ZipFile(ipybox_wheel) as zf:
        names = set(zf.namelist())
    for name in FILES:
        assert f"ipybox/gentools/template/{name}.tmpl" in names
    assert "ipybox/gentools/create.py" in names

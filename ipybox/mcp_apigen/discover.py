"""Finding tools by keyword, in the kernel: compact signatures of generated and saved tools.

`search("weather forecast")` reads the signatures a server's package lists in its docstring
(`mcptools/<server>/__init__.py`) and the interfaces of saved code actions
(`gentools/<category>/<name>/api.py`) without importing them, and returns the best matches,
one signature and summary each. Standard library only.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

_WORD = re.compile(r"[a-z0-9]+")
_MAX_RESULTS = 8
_MAX_PARSED = 200  # characters of an output parser's result shown in a signature

#: Code below this line in a generated module (an output parser) survives regeneration.
PARSER_MARKER = "# --- ipybox: output parser (kept when the API is regenerated) ---"
#: How a package docstring's header explains the signatures of tools with an output parser.
PARSED_NOTATION = "`; run_parsed() -> ...`: `<tool>.run_parsed(params)` returns the output parser's result"


class Signatures(str):
    """Signatures as text; shown as they are (not as a quoted string) when a cell ends with one."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True)
class _Entry:
    qualname: str  # e.g. mcptools.weather.forecast
    text: str  # signature line(s) as shown

    def score(self, terms: list[str]) -> int:
        name, text = _words(self.qualname), _words(self.text)
        total = 0
        for term in terms:
            if any(w == term or (len(term) > 3 and w.startswith(term[:-1])) for w in name):
                total += 3
            elif any(w.startswith(term) or (len(term) > 3 and w.startswith(term[:-1])) for w in text):
                total += 1
        return total


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def parsed_result(section: str) -> str | None:
    """What `run_parsed()` returns, from an output parser's code (the module's part below
    `PARSER_MARKER`): its `ParseResult`'s fields as `{name: type, ...}`, or its return annotation."""
    try:
        tree = ast.parse(section)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    run = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_parsed"), None)
    if run is None:
        return None
    returns = ast.unparse(run.returns) if run.returns else "Any"
    fields = _class_fields(tree, returns).replace("\n", " ")
    text = fields or returns
    return text if len(text) <= _MAX_PARSED else text[: _MAX_PARSED - 4] + "...}"


def with_parsers(doc: str, package: Path, since: float = 0.0) -> str:
    """A server package's docstring with `; run_parsed() -> ...` added to the signature of each
    tool whose module (changed after `since`, a modification time) has an output parser."""
    heads = {block.split("(", 1)[0]: block.split("\n", 1)[0] for block in doc.split("\n\n")[1:]}
    try:
        modules = [e for e in os.scandir(package) if e.name.endswith(".py") and e.name[:-3] in heads]
        for entry in modules:
            head = heads[entry.name[:-3]]
            if "; run_parsed() -> " in head or not entry.is_file() or entry.stat().st_mtime < since:
                continue
            text = Path(entry.path).read_text(encoding="utf-8", errors="replace")
            if PARSER_MARKER in text and (parsed := parsed_result(text.split(PARSER_MARKER, 1)[1])):
                doc = doc.replace(f"\n\n{head}", f"\n\n{head}; run_parsed() -> {parsed}", 1)
    except OSError:
        pass
    header, blank, rest = doc.partition("\n\n")
    if "; run_parsed() -> " in rest and PARSED_NOTATION not in header:  # explain what it now shows
        doc = f"{header.rstrip('.')};\n{PARSED_NOTATION}.{blank}{rest}"
    return doc


def _server_entries(package: Path) -> list[_Entry]:
    """The signatures a generated package lists in its docstring (one entry per tool)."""
    doc = with_parsers(_docstring(package / "__init__.py"), package)
    entries: list[_Entry] = []
    for block in doc.split("\n\n")[1:]:
        first = block.strip().split("(", 1)[0]
        if first.isidentifier():
            entries.append(_Entry(f"mcptools.{package.name}.{first}", block.strip()))
    return entries


def _gentool_entry(api: Path) -> _Entry | None:
    """`run`'s signature and the docstring's first line of a saved code action's `api.py`."""
    try:
        tree = ast.parse(api.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    run = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)
    if run is None:
        return None
    returns = ast.unparse(run.returns) if run.returns else "Any"
    fields = _class_fields(tree, returns)
    summary = (ast.get_docstring(tree) or "").strip().splitlines()
    qualname = f"gentools.{api.parent.parent.name}.{api.parent.name}"
    text = f"{qualname}.run({ast.unparse(run.args)}) -> {returns}{fields}"
    return _Entry(qualname, text + (f"\n    {summary[0]}" if summary else ""))


def _class_fields(tree: ast.Module, name: str) -> str:
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        return ""
    fields = [
        f"{n.target.id}: {ast.unparse(n.annotation)}"
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    return "{" + ", ".join(fields) + "}"


def _docstring(path: Path) -> str:
    try:
        return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, ValueError):
        return ""


def entries(root: Path | str = ".") -> list[_Entry]:
    """Every tool under `root/mcptools` and saved code action under `root/gentools`."""
    root = Path(root)
    found: list[_Entry] = []
    for init in sorted((root / "mcptools").glob("*/__init__.py")):
        found += _server_entries(init.parent)
    for api in sorted((root / "gentools").glob("*/*/api.py")):
        if (entry := _gentool_entry(api)) is not None:
            found.append(entry)
    return found


def search(query: str = "", limit: int = _MAX_RESULTS, root: Path | str = ".") -> Signatures:
    """Compact signatures of the tools that best match the words of `query` (all tools if empty).

    Searches the MCP tools in `mcptools/` and the saved code actions in `gentools/` under
    `root` (the workspace). A signature `tool(field: type = default, ...) -> result` names the
    fields of the tool module's `Params` and the shape of its `Result` (`str` for text);
    call it as `from mcptools.<server> import <tool>; <tool>.run(<tool>.Params(...))`.
    """
    terms = sorted(_words(query))
    candidates = entries(root)
    if terms:
        scored = [(entry.score(terms), i, entry) for i, entry in enumerate(candidates)]
        candidates = [e for s, _, e in sorted(scored, key=lambda t: (-t[0], t[1])) if s > 0][:limit]
    if not candidates:
        return Signatures(f"No tool matches {query!r} under {Path(root).resolve()}/mcptools or gentools.")
    lines = []
    for entry in candidates:
        head, _, rest = entry.text.partition("\n")
        if entry.qualname.startswith("mcptools."):
            head = entry.qualname.rsplit(".", 1)[0] + "." + head
        lines.append(head + (f"\n{rest}" if rest else ""))
    return Signatures("\n".join(lines))

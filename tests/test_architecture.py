"""The shape the code keeps (issue 21's numbers): a small orchestrating `CodeExecutor`, backends
behind one seam, short functions and no import cycles. Read from the source with `ast`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ipybox

PACKAGE = Path(ipybox.__file__).parent


def _modules() -> dict[str, ast.Module]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if "template" in rel.parts:
            continue
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = ast.parse(path.read_text(), str(path))
    return modules


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """ipybox modules `name` imports, at import time or in a function (those a function imports
    are a dependency too: a cycle through one is still a cycle); not those under TYPE_CHECKING."""
    found: set[str] = set()
    for node in _walk_outside_type_checking(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ipybox"):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ipybox")}
    return found - {name}


def _walk_outside_type_checking(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from (n for orelse in child.orelse for n in [orelse, *_walk_outside_type_checking(orelse)])
            continue
        yield child
        yield from _walk_outside_type_checking(child)


def test_code_executor_only_orchestrates() -> None:
    tree = _modules()["ipybox.code_exec"]
    executor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CodeExecutor")
    assert executor.end_lineno is not None
    assert executor.end_lineno - executor.lineno + 1 <= 260
    internal = {
        n.module for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("ipybox")
    }
    # 7: the choice of a shipped backend (kernel_mgr.shipped) lives apart from the seam it fills
    # (kernel_mgr.backend), which so imports no backend and forms no import cycle with them
    assert len(internal) <= 7, sorted(internal)  # type: ignore[arg-type]


def test_no_kernel_type_checks_outside_kernel_mgr() -> None:
    kernel_types = {"Kernel", "GatewayKernel", "LocalBackend", "GatewayBackend"}
    offenders = [
        name
        for name, tree in _modules().items()
        if not name.startswith("ipybox.kernel_mgr")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and any(isinstance(n, ast.Name) and n.id in kernel_types for n in ast.walk(node.args[1]))
    ]
    assert offenders == []


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The whole function's lines, signature and docstring included (decorators not)."""
    return (node.end_lineno or 0) - node.lineno + 1


def test_at_most_three_long_functions() -> None:
    long = [
        f"{name}.{node.name}"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _lines(node) > 60
    ]
    assert len(long) <= 3, long


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, tree, set(modules)) & set(modules) for name, tree in modules.items()}
    # a package's __init__ importing its own submodules is how re-exports work, not a cycle
    graph = {name: {m for m in deps if not m.startswith(name + ".")} for name, deps in graph.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_no_module_only_re_exports() -> None:
    """Each name is imported from the module it lives in: no module (a package's `__init__`, its
    public face, and `__main__` aside) stands only to pass on names defined elsewhere."""
    shims = [
        name
        for name, tree in _modules().items()
        if not (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()
        and not name.endswith(".__main__")
        and not any(
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.AnnAssign)
            or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) != "__all__")
            for node in tree.body
        )
    ]
    assert shims == []

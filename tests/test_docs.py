"""Every code block in README.md and docs/*.md that a user would run is run here, as written.

Python blocks run as scripts in a fresh directory (each must be complete: imports, `asyncio.run`),
bash blocks with `bash -e` there; both with the clone's Node MCP servers and `ipybox` on PATH,
as a user has them after `scripts/setup`. A comment on the line above a fence changes that:

- `<!-- doctest: skip REASON -->`: not run here, for the reason given (shown in the doc too);
- `<!-- doctest: tested-by tests/FILE.py::test_name -->`: run, with checks of its output, by
  that test (which must exist);
- `<!-- doctest: kernel -->`: code for ipybox's kernel: runs there, with `mcptools/everything`
  generated in its working directory;
- `<!-- doctest: sandbox -->`: needs a working sandbox (skipped with the reason where there is none).

Blocks in other languages (json, text, toml, ...) are configuration or output, not run.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers.launch import everything_params, node_servers_installed, sandbox_unavailable

from ipybox import CodeExecutor, generate_mcp_sources

REPO = Path(__file__).resolve().parent.parent
NODE_BIN = REPO / "node_modules" / ".bin"
RUN = {"python", "bash", "sh", "shell"}
_FENCE = re.compile(r"^([ \t]*)```(\w+)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
_DIRECTIVE = re.compile(r"<!--\s*doctest:\s*([\w-]+)\s*(.*?)\s*-->\s*\n(?:[ \t]*\n)?[ \t]*\Z")


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the repository
    line: int
    language: str
    code: str
    directive: str  # "" (run), "skip", "tested-by", "kernel" or "sandbox"
    argument: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        for fence in _FENCE.finditer(text):
            indent, language, body = fence.groups()
            if language not in RUN:
                continue
            before = text[: fence.start()]
            directive = _DIRECTIVE.search(before)
            code = "\n".join(line.removeprefix(indent) for line in body.splitlines()) + "\n"
            found.append(
                Block(
                    str(doc.relative_to(REPO)),
                    before.count("\n") + 1,
                    language,
                    code,
                    directive.group(1) if directive else "",
                    directive.group(2) if directive else "",
                )
            )
    return found


BLOCKS = blocks()


def user_env(tmp_path: Path) -> dict[str, str]:
    """A user's shell after `scripts/setup`: the clone's node servers and `ipybox` on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTEST_"))}
    path = [str(NODE_BIN), str(Path(sys.executable).parent), env.get("PATH", "")]
    return env | {"PATH": os.pathsep.join(path), "IPYBOX_STATE_DIR": str(tmp_path / "state")}


def test_the_runner_finds_the_blocks() -> None:
    assert len(BLOCKS) >= 20 and {b.doc for b in BLOCKS} >= {"README.md", "docs/code-execution.md"}
    unknown = [
        f"{b}: {b.directive}"
        for b in BLOCKS
        if b.directive not in ("", "skip", "tested-by", "kernel", "sandbox")
    ]
    assert unknown == []
    unexplained = [str(b) for b in BLOCKS if b.directive == "skip" and len(b.argument) < 10]
    assert unexplained == [], "a skipped block needs its reason"


@pytest.mark.timeout(200)
@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_doc_block(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.directive == "skip":
        pytest.skip(f"{block}: {block.argument}")
    if block.directive == "tested-by":
        path, _, name = block.argument.partition("::")
        assert re.search(rf"^(async )?def {re.escape(name)}\(", (REPO / path).read_text(), re.M), (
            block.argument
        )
        pytest.skip(f"{block}: run by {block.argument}")
    if block.directive == "sandbox" and (problem := sandbox_unavailable()):
        pytest.skip(f"{block}: needs a sandbox ({problem})")
    if not node_servers_installed():
        pytest.skip("node MCP servers not installed")
    work = tmp_path / "work"
    work.mkdir()
    if block.directive == "kernel":
        monkeypatch.setenv("PATH", f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}")
        asyncio.run(run_in_kernel(block, work))
        return
    if block.language == "python":
        (work / "block.py").write_text(block.code)
        argv = [sys.executable, "block.py"]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    done = subprocess.run(
        argv, cwd=work, env=user_env(tmp_path), input="y\n" * 20, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"{block} failed as written:\n{block.code}\n{done.stdout}\n{done.stderr}"


async def run_in_kernel(block: Block, work: Path) -> None:
    await generate_mcp_sources("everything", everything_params(), work / "mcptools")
    async with CodeExecutor(working_dir=work, spare_kernel=False) as executor:
        await executor.execute(block.code, timeout=120)


def _example_and_output(doc: str, test: str) -> tuple[Block, str]:
    """The block marked as tested by `test`, and the text block after it (what it prints)."""
    [block] = [b for b in BLOCKS if b.doc == doc and b.argument.endswith(f"::{test}")]
    text = (REPO / doc).read_text()
    after = "\n".join(text.splitlines()[block.line - 1 :])
    printed = re.search(r"```python\n.*?```\n.*?```text\n(.*?)```", after, re.S)
    assert printed, f"{block}: no ```text block of its output follows"
    return block, printed.group(1)


@pytest.mark.timeout(120)
def test_approval_prompt_example_prints_what_the_doc_shows(tmp_path: Path) -> None:
    """docs/tool-calls.md shows a hostile call's prompt: the doc's output is the example's, exactly."""
    if not node_servers_installed():
        pytest.skip("node MCP servers not installed")
    test = "test_approval_prompt_example_prints_what_the_doc_shows"
    _run_example("docs/tool-calls.md", test, tmp_path, timeout=100)


@pytest.mark.timeout(150)
def test_sandboxed_mcp_server_example_prints_what_the_doc_shows(tmp_path: Path) -> None:
    """docs/sandbox.md runs a filesystem server under its own srt policy, as a user would paste it:
    it reads a file of the project, and is denied the project's `.env`."""
    if problem := sandbox_unavailable():
        pytest.skip(f"needs a sandbox ({problem})")
    if not node_servers_installed():
        pytest.skip("node MCP servers not installed")
    test = "test_sandboxed_mcp_server_example_prints_what_the_doc_shows"
    _run_example("docs/sandbox.md", test, tmp_path, timeout=120)


def _run_example(doc: str, test: str, tmp_path: Path, timeout: float) -> None:
    """Run the example of `doc` marked as tested by `test` as a user would, and check that it
    prints exactly the output the doc shows after it."""
    block, shown = _example_and_output(doc, test)
    (tmp_path / "block.py").write_text(block.code)
    done = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        env=user_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown, done.stdout

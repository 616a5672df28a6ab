"""Attack tests: the small files a kernel may write that ipybox reads on the host (a `.git` file
and a `commondir`, which every sandboxed kernel's start reads to protect the repository they
name, and the modules of `mcptools/<server>/`, which a generation reads for output parsers) are
read within a bound. A sparse file of a terabyte costs the kernel no disk; read whole, it would
take the host's memory (here: a `MemoryError` at once; a smaller one, the OOM killer), and with
it every later kernel start in that workspace.
"""

from __future__ import annotations

from pathlib import Path

from servers.launch import nasty_params

from ipybox.mcp_apigen import generate_mcp_sources
from ipybox.sandbox import autorun
from ipybox.sandbox.placeholders import Placeholders

TERABYTE = 1 << 40


def _sparse(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(TERABYTE)


def test_git_pointers_are_read_within_a_bound(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    _sparse(workspace / "sub" / ".git")  # a `.git` file
    (workspace / "wt" / ".git").mkdir(parents=True)  # a work tree whose git dir has a commondir
    (workspace / "wt" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    _sparse(workspace / "wt" / ".git" / "commondir")
    (workspace / "ok" / "real").mkdir(parents=True)  # and an ordinary one, still followed
    (workspace / "ok" / ".git").write_text("gitdir: real\n")
    found = autorun.scan(workspace)
    assert workspace / "sub" / ".git" in found.protected and workspace / "ok" / "real" in found.protected
    # a stand-in's repository is looked for the same way (to keep it out of `git status`)
    held = Placeholders(tmp_path / "locks")
    try:
        held.ensure(workspace / "sub" / "new.json", "json")
        held.ensure(workspace / "wt" / "new.json", "json")
        assert (workspace / "sub" / "new.json").read_text() == "{}\n"
    finally:
        held.release()


async def test_a_generation_reads_no_module_past_a_bound(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    _sparse(workspace / "mcptools" / "nasty" / "planted.py")
    await generate_mcp_sources("nasty", nasty_params(), workspace / "mcptools", workspace=workspace)
    assert (workspace / "mcptools" / "nasty" / "__init__.py").is_file()
    assert not (workspace / "mcptools" / "nasty" / "planted.py").exists()

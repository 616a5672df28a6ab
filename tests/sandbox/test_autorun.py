"""Auto-run paths: what host programs run from the workspace (git, editors, Claude Code) can be
neither changed nor created by a sandboxed kernel, and the sandbox leaves no trace behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from servers.launch import NODE_BIN

from ipybox import CodeExecutor
from ipybox.sandbox.autorun import AGENT_SETTINGS, CREATION_BLOCKED, HOOK_MANAGERS

from .conftest import ENV_SECRET, probe, sandbox_config, until, write_config

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(120)]

#: Kernel code: `tamper(path)` tries to change or create `path` in five ways; `staging` is a
#: directory and `loose` a file the kernel may write, used to put things in place.
TAMPER = """
def replace(t):
    pathlib.Path('loose').write_text('evil')
    os.replace('loose', t)
def through_link(t):
    name = 'alias-' + t.replace('/', '_')
    os.symlink(os.path.abspath(t), name)
    return open(name, 'w').write('evil')
def swap_dir(t):
    parent = os.path.dirname(t) or '.'
    os.makedirs('staging', exist_ok=True)
    pathlib.Path('staging', os.path.basename(t)).write_text('evil')
    os.rename(parent, 'moved-away')  # a mount point cannot be moved
def tamper(t):
    return [
        attempt(lambda: (os.makedirs(os.path.dirname(t) or '.', exist_ok=True), open(t, 'a').write('evil'))),
        attempt(lambda: replace(t)),
        attempt(lambda: through_link(t)),
        attempt(lambda: os.unlink(t) if os.path.isfile(t) else os.rmdir(t)),
        attempt(lambda: swap_dir(t)),
    ]
"""


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
        for p in sorted(root.rglob("*"))
    }


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def _repo(workspace: Path) -> list[str]:
    """Make `workspace` a git repository with every auto-run path git and others use; returns
    the paths (relative) a kernel must not change."""
    _git(workspace, "init", "-q")
    _git(workspace, "config", "core.hooksPath", ".githooks")  # as husky and friends do
    _git(workspace, "config", "include.path", "../project.gitconfig")
    (workspace / "project.gitconfig").write_text("[user]\n\tname = someone\n")
    files = {
        ".githooks/pre-commit": "#!/bin/sh\n",
        ".git/hooks/post-checkout": "#!/bin/sh\n",
        ".git/info/attributes": "",
        ".git/worktrees/wt/config.worktree": "",
        ".git/worktrees/wt/commondir": "../..\n",
        ".git/modules/sub/config": "[core]\n",
        "sub/.git": "gitdir: ../.git/modules/sub\n",
        ".vscode/tasks.json": "{}\n",
        "pkg/inner/.vscode/settings.json": "{}\n",
        ".idea/workspace.xml": "<project/>\n",
        ".claude/settings.json": "{}\n",
        ".mcp.json": "{}\n",
        ".envrc": "export A=1\n",
        ".pre-commit-config.yaml": "repos: []\n",
        "vendor/lib/.hg/hgrc": "[paths]\n",  # hg runs [hooks] pre-status from it on `hg status`
        ".jj/repo/config.toml": "",
        "pkg/.sl/config": "",
    }
    for name, content in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(content)
    return [
        ".git/config",
        ".git/config.worktree",
        ".git/commondir",
        ".git/index",
        "project.gitconfig",
        *files,
        "pkg/inner/.vscode/tasks.json",
        ".claude/settings.local.json",
    ]


async def test_existing_auto_run_paths_cannot_be_changed(workspace: Path) -> None:
    targets = _repo(workspace)
    (workspace / "notes.txt").write_text("free to change\n")
    before = _tree(workspace)
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            TAMPER
            + f"out = {{t: tamper(t) for t in {targets!r}}}\n"
            + "out['free'] = attempt(lambda: open('notes.txt', 'a').write('changed'))\n"
            + "print(_json.dumps(out))",
        )
    assert result.pop("free") == "ok: 7"  # the rest of the workspace stays writable
    for target, outcomes in result.items():
        assert not [o for o in outcomes if o.startswith("ok")], (target, outcomes)
    after = _tree(workspace)
    after.pop("notes.txt")
    before.pop("notes.txt")
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # what the kernel could do: its scratch files (links, staging); nothing protected changed
    assert all(k.startswith(("alias-", "staging", "loose")) for k in changed), changed


@pytest.mark.parametrize("name", sorted(set(CREATION_BLOCKED) - set(AGENT_SETTINGS) - set(HOOK_MANAGERS)))
async def test_missing_auto_run_paths_cannot_be_created_and_leave_no_trace(
    name: str, workspace: Path
) -> None:
    """Absent, they stay absent whatever the kernel does, also after the kernel's spare took
    over (srt's own mount points would vanish when the first kernel's sandbox ended), and the
    workspace holds afterwards exactly what the kernel wrote."""
    before = _tree(workspace)
    inner = f"{name}/settings.json"  # the stand-in is an empty directory
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=True) as executor:
        first = await probe(executor, TAMPER + f"print(_json.dumps(tamper({inner!r}) + tamper({name!r})))")
        await executor.reset()  # the first kernel's sandbox ends; the spare's runs on
        await executor.reset()
        second = await probe(
            executor,
            TAMPER + f"open('written.txt', 'w').write('x')\nprint(_json.dumps(tamper({inner!r})))",
        )
    for outcome in [*first, *second]:
        assert not outcome.startswith("ok"), outcome
    after = _tree(workspace)
    assert name not in after
    added = set(after) - set(before)
    assert "written.txt" in added
    assert all(k.startswith(("written.txt", "alias-", "staging", "loose")) for k in added), added


async def test_other_agents_editors_and_hook_managers_files_can_be_neither_created_nor_changed(
    workspace: Path,
) -> None:
    """Gemini CLI, Codex, Cursor, Zed, opencode and the other agents and editors of
    `AGENT_SETTINGS` start the MCP servers, hooks, plugins and language servers their project
    settings name; the hooks of pre-commit, husky and lefthook run what their files say on every
    commit. An existing one, at any depth, cannot be changed; at the top, the settings and
    pre-commit's and husky's cannot be created (nor a file in a stand-in), nor lefthook's local
    configurations beside its configuration; the project holds no trace of the stand-ins
    afterwards."""
    # named here too, so that the test fails if one is dropped from AGENT_SETTINGS
    hooks_of_more_agents = {".windsurf": "dir", ".clinerules": "dir", ".qwen": "dir", ".kilocode": "dir"}
    hooks_of_more_agents |= {".factory": "dir", "crush.json": "json", ".crush.json": "json"}
    hooks_of_more_agents |= {".augment": "dir", ".amp": "dir"}
    kinds = AGENT_SETTINGS | hooks_of_more_agents
    kinds |= {name: "dir" if name == ".husky" else "file" for name in HOOK_MANAGERS}
    nested = {
        f"pkg/{name}" + ("/pre-commit" if kind == "dir" else ""): "{}\n" for name, kind in kinds.items()
    }
    nested["lefthook.yml"] = "pre-commit:\n  commands: {}\n"  # lefthook at the top: no local one either
    for name, content in nested.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(content)
    before = _tree(workspace)
    blocked = [name for name in [*CREATION_BLOCKED, *hooks_of_more_agents] if name in kinds]
    blocked = list(dict.fromkeys(blocked))
    blocked += [name for name in HOOK_MANAGERS if "lefthook-local" in name]
    top = [*blocked, *(f"{name}/pre-commit" for name in blocked if kinds[name] == "dir")]
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            TAMPER
            + f"out = {{t: tamper(t) for t in {[*top, *nested]!r}}}\n"
            + "out['listed'] = sorted(os.listdir('.'))\n"
            + "out['pre-commit'] = open('.pre-commit-config.yaml').read()\n"
            + "print(_json.dumps(out))",
        )
    assert set(blocked) <= set(result.pop("listed"))  # the stand-ins, while the kernel runs
    assert result.pop("pre-commit") == "repos: []\n"  # a hook installed for every repository runs none
    for target, outcomes in result.items():
        assert not [o for o in outcomes if o.startswith("ok")], (target, outcomes)
    after = _tree(workspace)
    assert not set(blocked) & set(after)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert all(k.startswith(("alias-", "staging", "loose")) for k in changed), changed


async def test_configurations_trusted_by_path_cannot_be_changed(workspace: Path) -> None:
    """mise runs a trusted `mise.toml`'s `[env]` scripts and `[hooks]` on every prompt of a shell
    with `mise activate`, and trusts by path, not content: each of its configuration files that
    exists, at any depth, cannot be changed; files that only look alike stay writable."""
    protected = [
        "mise.toml",
        "pkg/.mise.toml",
        "pkg/mise.local.toml",
        "pkg/deep/mise.staging.toml",
        ".config/mise.toml",
        ".config/mise/config.toml",
        "pkg/.mise/config.toml",
        "mise/config.local.toml",
    ]
    free = ["pkg/promise.toml", "pkg/mise.txt", "pkg/mise.toml.orig", "pkg/mise/notes.txt"]
    for name in [*protected, *free]:
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("[env]\n")
    (workspace / "mise" / "config.toml").write_text("[env]\n")
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            TAMPER
            + f"out = {{t: tamper(t) for t in {protected!r}}}\n"
            + f"out['free'] = [attempt(lambda: open(t, 'a').write('x')) for t in {free!r}]\n"
            + "print(_json.dumps(out))",
        )
    assert result.pop("free") == ["ok: 1"] * len(free)
    for target, outcomes in result.items():
        assert not [o for o in outcomes if o.startswith("ok")], (target, outcomes)
    assert all((workspace / name).read_text() == "[env]\n" for name in protected)


async def test_programs_claude_code_settings_run_cannot_be_changed(workspace: Path) -> None:
    """Claude Code runs what its project settings name on its own: hooks on every tool call, the
    status line, credential helpers, project MCP servers. The settings are protected, and so are
    the scripts in the workspace they name (at the top and in a project below it); other files
    stay writable."""
    hook = {"hooks": [{"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/scripts/check.sh --fast'}]}
    settings = {
        ".claude/settings.json": {
            "hooks": {"PreToolUse": [hook]},
            "statusLine": {"command": "./scripts/status.sh"},
        },
        ".claude/settings.local.json": {"apiKeyHelper": "bin/key-helper"},
        ".mcp.json": {"mcpServers": {"tools": {"command": "python", "args": ["-u", "tools/server.py"]}}},
        "pkg/.claude/settings.json": {"hooks": {"Stop": [{"hooks": [{"command": "sh lint/run.sh"}]}]}},
    }
    named = ["scripts/check.sh", "scripts/status.sh", "bin/key-helper", "tools/server.py", "pkg/lint/run.sh"]
    free = ["scripts/other.sh", "tools/helpers.py", "lint/run.sh"]
    for name in [*named, *free]:
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("#!/bin/sh\n")
    for name, content in settings.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(json.dumps(content))
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            "write = lambda t: attempt(lambda: open(t, 'a').write('evil'))\n"
            + f"print(_json.dumps([[write(t) for t in ts] for ts in {[named, free]!r}]))",
        )
    assert result[1] == ["ok: 4"] * len(free)
    assert not [o for o in result[0] if o.startswith("ok")], result[0]
    assert all((workspace / name).read_text() == "#!/bin/sh\n" for name in named)


async def test_auto_run_paths_in_numbers_cannot_stop_later_starts(workspace: Path) -> None:
    """Each protected path is a mount, and srt refuses a sandbox of more than about 3,000: a kernel
    that made 1,200 folders with a `.vscode` and an `.idea` (and a `.claude` whose settings and
    links name 500 files) failed every later kernel start in its workspace. Past a bound, further
    ones are passed over (with a warning); the shallowest, the user's, stay protected."""
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "tasks.json").write_text("{}\n")
    plant = (
        "import json, os\n"
        "for i in range(1200):\n"
        "    os.makedirs(f'many/{i}/.vscode'); os.makedirs(f'many/{i}/.idea')\n"
        "os.makedirs('more/.claude')\n"
        "for i in range(500):\n"
        "    open(f'more/f{i}', 'w').close(); os.symlink(f'../f{i}', f'more/.claude/l{i}')\n"
        "hooks = [{'hooks': [{'command': f'sh ./f{i}'}]} for i in range(500)]\n"
        "open('more/.claude/settings.json', 'w').write(json.dumps({'hooks': {'Stop': hooks}}))\n"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        await executor.execute(plant)
        await executor.reset()  # the next kernel's sandbox, with all of them there
        result = await probe(
            executor, "print(_json.dumps(attempt(lambda: open('.vscode/tasks.json', 'a').write('x'))))"
        )
    assert result.startswith("OSError: [Errno 30]"), result
    assert (workspace / ".vscode" / "tasks.json").read_text() == "{}\n"


async def test_secrets_files_in_numbers_cannot_stop_later_starts(workspace: Path) -> None:
    """srt mounts over every `.env` file it finds, and refuses a sandbox of more than about 3,000
    mounts: a kernel that made 3,500 empty ones failed every later kernel start in its
    workspace. Past a bound, the oldest are hidden one by one (the user's, made before the
    kernel's), with a warning; the workspace's and a nested one stay unreadable."""
    (workspace / "services" / "api").mkdir(parents=True)
    (workspace / "services" / "api" / ".env.local").write_text(f"TOKEN={ENV_SECRET}\n")
    read = (
        "print(_json.dumps([attempt(lambda: open(p).read()) for p in ('.env', 'services/api/.env.local')]))"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        await executor.execute(
            "import os\nfor i in range(3500):\n"
            "    os.makedirs(f'm/{i}')\n    open(f'm/{i}/.env', 'w').close()\n"
        )
        await executor.reset()  # the next kernel's sandbox, with all of them there
        result = await probe(executor, read)
    assert ENV_SECRET not in json.dumps(result)
    assert all(r.startswith("PermissionError") for r in result), result


async def test_paths_too_deep_cannot_stop_later_starts(workspace: Path) -> None:
    """bubblewrap's time to make a mount grows faster than its path's depth (measured: a mount
    point 300 folders down +15 s, 400 down +30 s): a kernel that made a chain of 800 folders
    with a `.git`, a `.vscode`, an `.env` and a link in a `.claude` leading to a missing file
    every 200 failed every later start in its workspace (the start timed out). Nothing deeper
    than a bound is mounted: a deep `.env` stays unreadable (the folder at the bound is hidden
    whole), the user's shallow settings stay protected, the kernel's deep ones are its own."""
    (workspace / ".vscode").mkdir()
    (workspace / ".vscode" / "tasks.json").write_text("{}\n")
    plant = """
for i in range(800):
    os.mkdir('d')
    os.chdir('d')
    if i % 200 == 199:
        for name in ('.git', '.vscode', '.claude'):
            os.mkdir(name)
        os.symlink('../missing', '.claude/settings.json')
        open('.env', 'w').close()
os.chdir(start)
"""
    read = "print(_json.dumps(attempt(lambda: open('/'.join(['d'] * 600 + ['.env'])).read())))"
    try:
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
            await executor.execute("import os\nstart = os.getcwd()\n" + plant)
            await executor.reset()  # the next kernel's sandbox, with all of them there
            result = await probe(executor, read)
            tasks = await probe(
                executor, "print(_json.dumps(attempt(lambda: open('.vscode/tasks.json', 'a').write('x'))))"
            )
    finally:
        shutil.rmtree(workspace / "d", ignore_errors=True)  # pytest's own clean-up recurses once a folder
    assert result.startswith(("PermissionError", "FileNotFoundError")), result
    assert tasks.startswith("OSError: [Errno 30]"), tasks


async def test_paths_git_config_names_cannot_be_created(workspace: Path, tmp_path: Path) -> None:
    """An include file or hooks directory the repository's config names but nobody made yet
    (hooks not set up, no local override) stays absent, and one that exists cannot be changed:
    written by the kernel, git on the host would run what it says (an fsmonitor command on
    `git status`, a hook on commit). So for the repositories inside the workspace too (a clone
    with `core.hooksPath`, a submodule, one deep down). While the sandbox runs, git on the host
    sees no change in the work tree."""
    _git(workspace, "init", "-q")
    _git(workspace, "config", "core.hooksPath", ".githooks")
    _git(workspace, "config", "include.path", "../local.gitconfig")
    _git(workspace, "config", "includeIf.gitdir:/.path", "nested/extra.gitconfig")
    nested = {"projects/app": ".githooks", "projects/lib": "hooks", "deep/a/b/c": "../../hooks"}
    for tree, hooks in nested.items():
        _git(workspace, "init", "-q", tree)
        _git(workspace / tree, "config", "core.hooksPath", hooks)
    (workspace / "projects" / "lib" / "hooks").mkdir()
    (workspace / "projects" / "lib" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (workspace / ".git" / "modules").mkdir()
    _git(workspace, "init", "-q", "--separate-git-dir", str(workspace / ".git" / "modules" / "sub"), "sub")
    _git(workspace / "sub", "config", "include.path", "../../../sub.gitconfig")  # relative to its config
    (workspace / "sub.gitconfig").write_text("[user]\n\tname = someone\n")
    marker = tmp_path / "ran-on-host"
    config = f'[core]\n\tfsmonitor = "echo x >> {marker}; false"\n'
    targets = {
        ".githooks/pre-commit": "#!/bin/sh\n",
        "local.gitconfig": config,
        ".git/nested/extra.gitconfig": config,
        "projects/app/.githooks/pre-commit": "#!/bin/sh\n",
        "deep/a/hooks/pre-commit": "#!/bin/sh\n",
    }
    existing = {"projects/lib/hooks/pre-commit": "#!/bin/sh\n", "sub.gitconfig": config}
    before = _git(workspace, "status", "--short")
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            "import os\n"
            + "def put(t, text):\n"
            + "    os.makedirs(os.path.dirname(t) or '.', exist_ok=True)\n"
            + "    return open(t, 'w').write(text)\n"
            + f"print(_json.dumps([attempt(lambda: put(t, x)) for t, x in {targets | existing!r}.items()]))",
        )
        during = _git(workspace, "status", "--short")
    assert not [o for o in result if o.startswith("ok")], result
    assert during == before, (before, during)
    for tree in [".", "sub", *nested]:
        _git(workspace / tree, "status")
    assert not marker.exists()
    assert not any((workspace / t).exists() for t in targets)  # the stand-ins are gone again
    assert all((workspace / t).read_text() != config for t in existing if t.endswith("commit"))
    assert (workspace / "sub.gitconfig").read_text() != config


async def test_placeholders_outlive_a_second_executor_in_the_same_workspace(workspace: Path) -> None:
    """Two executors in one workspace: the one that stops first leaves the other protected."""
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as first:
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as second:
            await probe(second, "print(1)")
        result = await probe(
            first, TAMPER + "print(_json.dumps(tamper('.claude/settings.json') + tamper('.mcp.json')))"
        )
        assert (workspace / ".claude").is_dir()  # the stand-in, while a sandbox runs
    assert not [o for o in result if o.startswith("ok")], result
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith(".")) == [".env"]


async def test_git_and_common_workloads_work_in_a_repository(workspace: Path) -> None:
    _git(workspace, "init", "-q")
    _git(
        workspace,
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@example.org",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        status = await executor.execute("!git status --short --branch")
        log = await executor.execute("!git log --oneline | wc -l")
    assert status.text is not None and status.text.startswith("## "), status.text
    assert "hello.txt" in status.text
    assert (log.text or "").strip() == "1"
    assert "hello.txt" in _git(workspace, "status", "--short")  # git on the host works as before


async def test_missing_paths_a_policy_denies_cannot_be_created(workspace: Path, tmp_path: Path) -> None:
    """A policy's own `denyWrite` entries get the same placeholders, and leave no trace; the
    folders its `denyRead` hides stay hidden (guarding a folder does not open it)."""
    (workspace / "private" / "inner").mkdir(parents=True)
    (workspace / "private" / "inner" / "key.txt").write_text("private-secret-7c4\n")
    config = write_config(
        tmp_path / "c.json",
        sandbox_config(
            filesystem={"allowWrite": ["."], "denyWrite": ["docs/RELEASE.md"], "denyRead": ["private"]}
        ),
    )
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=True
    ) as executor:
        await executor.reset()
        result = await probe(
            executor,
            TAMPER
            + "print(_json.dumps(tamper('docs/RELEASE.md') + "
            + "[attempt(lambda: open('private/inner/key.txt').read())]))",
        )
    assert not [o for o in result if o.startswith("ok")], result
    assert not (workspace / "docs").exists()


async def test_python_environments_are_read_only_at_any_depth(workspace: Path, tmp_path: Path) -> None:
    """Every Python environment in the workspace (a venv's `pyvenv.cfg`, a conda environment's
    `conda-meta/`), at any depth: the kernel can add no `.pth` file or `sitecustomize.py` that
    its interpreter would run on its next start on the host, replace none of its programs, and
    move none away for one of its own; the rest of the workspace stays writable."""
    venv = workspace / ".venv"
    site = _venv(venv)
    layout = {"tools/env": "pyvenv.cfg", "a/b/c/venv": "pyvenv.cfg", "envs/conda1": "conda-meta/history"}
    for env, marker in layout.items():
        (workspace / env / marker).parent.mkdir(parents=True, exist_ok=True)
        (workspace / env / marker).write_text("home = /usr/bin\n")
        (workspace / env / "lib/python3/site-packages").mkdir(parents=True)
    ran = tmp_path / "pth-ran"
    payload = f"import pathlib; pathlib.Path({str(ran)!r}).touch()\n"
    targets = {
        "pth in .venv": f"{site.relative_to(workspace)}/evil.pth",
        "sitecustomize in .venv": f"{site.relative_to(workspace)}/sitecustomize.py",
        "pth at depth": "a/b/c/venv/lib/python3/site-packages/evil.pth",
        "sitecustomize at depth": "tools/env/lib/python3/site-packages/sitecustomize.py",
        "pth in conda": "envs/conda1/lib/python3/site-packages/evil.pth",
        "pyvenv.cfg": "tools/env/pyvenv.cfg",
        "interpreter": ".venv/bin/python",
    }
    write = f"lambda t=t: pathlib.Path(t).write_text({payload!r})"
    code = (
        f"out = {{k: attempt({write}) for k, t in {targets!r}.items()}}\n"
        "out['env swapped'] = attempt(lambda: os.rename('tools/env', 'tools/env-old'))\n"
        "out['.venv swapped'] = attempt(lambda: os.rename('.venv', 'venv-old'))\n"
        "for t in ('src/mod.py', 'mcptools/x/__init__.py', 'data/out.csv', 'a/b/c/notes.md'):\n"
        "    os.makedirs(os.path.dirname(t), exist_ok=True)\n"
        "    out[t] = attempt(lambda: open(t, 'w').write('1'))\n"
        "print(_json.dumps(out))"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(executor, code)
    for name in [*targets, "env swapped", ".venv swapped"]:
        assert not outcomes[name].startswith("ok"), (name, outcomes[name])
    assert [outcomes[t] for t in outcomes if "/" in t] == ["ok: 1"] * 4, outcomes  # ordinary work
    _python(venv, "pass")  # the interpreter's next start on the host
    assert not ran.exists()


def _venv(path: Path) -> Path:
    """Make a venv at `path` (without pip: fast); its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return Path(_python(path, "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())


def _python(venv: Path, code: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    return done.stdout


async def test_the_project_looks_untouched_from_the_host(workspace: Path, tmp_path: Path) -> None:
    """While sandboxed kernels run (a kernel and its spare) and after, git on the host sees
    nothing new in the project, `git add -A` stages nothing, and Claude Code, started there,
    finds a valid (empty) project MCP configuration; afterwards the project is as before."""
    for folder in ("src/pkg", "docs"):
        (workspace / folder).mkdir(parents=True)
        (workspace / folder / "keep.txt").write_text("tracked\n")
    _git(workspace, "init", "-q")
    _git(workspace, "add", "-A")
    _git(workspace, "-c", "user.name=a", "-c", "user.email=a@example.org", "commit", "-q", "-m", "x")
    before = _project(workspace)
    home = tmp_path / "home"
    home.mkdir()
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=True) as executor:
        await probe(executor, "print(1)")
        assert (workspace / ".mcp.json").exists() and (workspace / "src" / ".git").is_dir()  # stand-ins
        during = _git(workspace, "status", "--porcelain", "--untracked-files=all")
        _git(workspace, "add", "-A")
        staged = _git(workspace, "diff", "--cached", "--name-only")
        claude = _claude_mcp_list(workspace, home)
    assert during == "" and staged == "", (during, staged)
    assert "No MCP servers configured" in claude and "✘" not in claude and "rror" not in claude, claude
    assert _git(workspace, "status", "--porcelain", "--untracked-files=all") == ""
    assert _project(workspace) == before


def _project(workspace: Path) -> dict[str, bytes | None]:
    """The project's files, its git index by what it holds: `git status` (the user's, run by the
    test) may rewrite the index file to refresh the timestamps it caches, which is no change."""
    tree = _tree(workspace)
    tree[".git/index"] = _git(workspace, "ls-files", "--stage").encode()
    return tree


def _claude_mcp_list(project: Path, home: Path) -> str:
    """What Claude Code's own MCP health check prints, run in `project` (offline, no login)."""
    done = subprocess.run(
        [str(NODE_BIN / "claude"), "mcp", "list"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(home)},
    )
    return done.stdout + done.stderr


async def test_protection_holds_in_folders_with_glob_characters(workspace: Path) -> None:
    """srt reads write rules as patterns and drops those with `*?[]` on Linux; ipybox binds its
    protected paths there itself. Folders such as Next.js's `app/[id]/`, `pages/*`, `q?` or
    `venv[1]`: their git config and hooks, editor tasks and Python environments stay read-only,
    no repository can be made in them, and ordinary files there stay writable."""
    for folder in ("app/[id]", "app/[...slug]", "q?"):
        (workspace / folder).mkdir(parents=True)
    (workspace / "app/[id]/.vscode").mkdir()
    (workspace / "app/[id]/.vscode/tasks.json").write_text("{}")
    (workspace / "venv[1]").mkdir()
    (workspace / "venv[1]/pyvenv.cfg").write_text("home = /usr/bin\n")
    (workspace / "pages/*").mkdir(parents=True)
    _git(workspace / "pages/*", "init", "-q")
    targets = {
        **{
            f"{d}/{name}": f"{d}/{name}"
            for d in ("app/[id]", "app/[...slug]", "q?")
            for name in (".git/HEAD", "HEAD/x")
        },
        "tasks": "app/[id]/.vscode/tasks.json",
        "pyvenv.cfg": "venv[1]/pyvenv.cfg",
        "pth": "venv[1]/evil.pth",
        "git config": "pages/*/.git/config",
        "git hook": "pages/*/.git/hooks/pre-commit",
    }
    code = (
        f"out = {{k: attempt(lambda t=t: open(t, 'a').write('x')) for k, t in {targets!r}.items()}}\n"
        "for t in ('app/[id]/page.tsx', 'q?/notes.md', 'pages/*/index.js'):\n"
        "    out[t] = attempt(lambda: open(t, 'w').write('1'))\n"
        "print(_json.dumps(out))"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(executor, code)
    for name in targets:
        assert not outcomes[name].startswith("ok"), (name, outcomes[name])
    assert [outcomes[t] for t in ("app/[id]/page.tsx", "q?/notes.md", "pages/*/index.js")] == ["ok: 1"] * 3


async def test_links_in_folders_with_glob_characters_open_nothing(workspace: Path, tmp_path: Path) -> None:
    """A kernel's link named like a protected path (`app/[id]/.git` to a hidden folder of the
    host) is not bound by the launcher: the next kernel reads nothing through it."""
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "key").write_text("secret\n")
    (workspace / "app/[id]").mkdir(parents=True)
    (workspace / "app/[id]/.git").symlink_to(secret)
    (workspace / "app/[id]/.vscode").symlink_to(secret)
    code = (
        "targets = ('app/[id]/.git/key', 'app/[id]/.vscode/key')\n"
        "out = {t: attempt(lambda t=t: open(t).read()) for t in targets}\n"
        "print(_json.dumps(out))"
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        outcomes = await probe(executor, code)
    assert all(not o.startswith("ok") for o in outcomes.values()), outcomes


#: Existing folders below the top (shallow and guarded, deep, hidden, a nested repository's top),
#: the auto-run name a kernel adds to each, and what it writes there (a file of a folder, or the
#: file itself).
NEW_SETTINGS = [
    ("sub", ".claude", "settings.json", '{"hooks": {"SessionStart": [{"hooks": [{"command": "x"}]}]}}'),
    ("sub/deep", ".vscode", "tasks.json", '{"tasks": [{"runOptions": {"runOn": "folderOpen"}}]}'),
    (".hidden/pkg", ".mcp.json", "", '{"mcpServers": {"x": {"command": "x"}}}'),
    ("a/b/c/d/e", ".cursor", "hooks.json", "{}"),
    ("vendor/lib", ".pre-commit-config.yaml", "", "repos: []"),
    ("sub", "opencode.json", "", "{}"),
]


async def test_settings_a_kernel_adds_to_existing_folders_are_disabled(workspace: Path) -> None:
    """Host programs started in a folder that existed before the kernel (`claude` in a package
    of a monorepo, an editor opening a subfolder) run what its settings say: a `.claude`,
    `.vscode`, `.mcp.json`, other agents' settings or hook managers' files the kernel adds to
    such a folder, at any depth, is set aside (`NAME.ipybox-disabled`) by the sweep while the
    kernel runs and after it; settings in a folder of the kernel's own making stay."""
    for folder, *_ in NEW_SETTINGS:
        (workspace / folder).mkdir(parents=True, exist_ok=True)
    _git_init(workspace / "vendor" / "lib")
    writes = {str(Path(f, n, rest)): text for f, n, rest, text in NEW_SETTINGS}
    writes["mine/.vscode/settings.json"] = "{}"
    code = f"""
def put(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pathlib.Path(path).write_text(text)
print(_json.dumps([attempt(lambda p=p, t=t: put(p, t)) for p, t in {writes!r}.items()]))
"""

    def set_aside() -> bool:
        return all(
            not os.path.lexists(workspace / f / n) and (workspace / f / f"{n}.ipybox-disabled").exists()
            for f, n, *_ in NEW_SETTINGS
        )

    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        assert await probe(executor, code) == ["ok: None"] * len(writes)  # nothing stops the writes
        await until(set_aside)
    assert set_aside()
    assert (workspace / "mine/.vscode/settings.json").read_text() == "{}"


def _git_init(folder: Path) -> None:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)


async def test_copilot_hooks_can_be_neither_changed_nor_added(workspace: Path) -> None:
    """GitHub Copilot CLI runs the hooks of `.github/hooks/*.json` in the folder it starts in,
    on its own: an existing `.github/hooks`, at any depth, cannot be
    changed; at the top, where `.github` exists, it cannot be created (an empty folder stands
    in), while the rest of `.github` stays the agent's to write (a CI workflow); one the kernel
    adds to another folder that existed is set aside by the sweep, also where `.github` is a
    link of the kernel's to a folder holding `hooks/` (the link is set aside)."""
    for name in (".github/workflows/ci.yml", "pkg/.github/hooks/h.json"):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("{}\n")
    (workspace / "lib").mkdir()
    (workspace / "lib2").mkdir()
    before = _tree(workspace)
    targets = [".github/hooks/h.json", "pkg/.github/hooks/h.json"]
    code = (
        TAMPER
        + f"""
out = {{t: tamper(t) for t in {targets!r}}}
out['workflow'] = attempt(lambda: pathlib.Path('.github/workflows/new.yml').write_text('on: push'))
def add():
    os.makedirs('lib/.github/hooks')
    return pathlib.Path('lib/.github/hooks/h.json').write_text('{{}}')
out['added'] = attempt(add)
def linked():
    os.makedirs('stash/hooks')
    pathlib.Path('stash/hooks/h.json').write_text('{{}}')
    return os.symlink('../stash', 'lib2/.github')
out['linked'] = attempt(linked)
print(_json.dumps(out))
"""
    )
    aside, link_aside = (
        workspace / "lib/.github/hooks.ipybox-disabled",
        workspace / "lib2/.github.ipybox-disabled",
    )
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(executor, code)
        await until(lambda: aside.is_dir() and link_aside.is_symlink())
    assert not os.path.lexists(workspace / "lib2/.github")
    assert (
        result.pop("workflow") == "ok: 8"
        and result.pop("added") == "ok: 2"
        and result.pop("linked") == "ok: None"
    )
    for target, outcomes in result.items():
        assert not [o for o in outcomes if o.startswith("ok")], (target, outcomes)
    assert not (workspace / "lib/.github/hooks").exists()
    after = _tree(workspace)
    assert not (workspace / ".github/hooks").exists()
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    changed = {k for k in changed if not k.startswith(("alias-", "staging", "loose", "lib", "stash"))}
    assert changed == {".github/workflows/new.yml"}, changed


async def test_settings_a_kernel_pushes_out_of_protection_cannot_be_changed(workspace: Path) -> None:
    """Protection stops at `MAX_PROTECTED` auto-run paths, shallowest first: a kernel that made
    300 folders with a `.vscode` next to the project's packages had the next kernel's sandbox
    protect those, not a package's own deeper `.vscode`, which it then rewrote in place, and the
    sweep passed it over (kept read-only by the first start; the folder's own change time as it
    was). The sweep sets such a folder aside once anything in it changed."""
    (workspace / "pkg/inner/.vscode").mkdir(parents=True)
    tasks = workspace / "pkg/inner/.vscode/tasks.json"
    tasks.write_text("{}\n")
    await anyio.sleep(1.1)  # older than the sandbox (the sweep counts a second before its start as its own)
    plant = "import os\nfor i in range(300):\n    os.makedirs(f'a{i}/.vscode')\n"
    write = "print(_json.dumps(attempt(lambda: open('pkg/inner/.vscode/tasks.json', 'a').write('EVIL'))))"
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        await executor.execute(plant)
        await executor.reset()
        result = await probe(executor, write)
    assert result == "ok: 4"  # past the bound, so writable: the sweep is what sets it aside
    assert not os.path.lexists(workspace / "pkg/inner/.vscode")
    assert (workspace / "pkg/inner/.vscode.ipybox-disabled/tasks.json").read_text() == "{}\nEVIL"

"""ipybox's own walk for `.env` files against srt's glob expansion, and what a kernel reads then.

srt's expansion of `**/.env` (its `expandReadDenyGlobLinux`, run under node) is the oracle: on
each tree the walk names the same places (srt is never handed those globs: its rules let a
kernel's `.env` link hide what every kernel needs).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest
from servers.launch import REPO

from ipybox import CodeExecutor
from ipybox.sandbox import SandboxError, dotenv

from .conftest import probe

pytestmark = pytest.mark.usefixtures("srt_available")

#: srt's own globs for what ipybox hides, the oracle's.
PATTERNS = ("**/.env", "**/.env.*")

_EXPAND = """
import {{ expandReadDenyGlobLinux }} from {module!r};
const out = [];
for (const pattern of {patterns!r}) out.push(...expandReadDenyGlobLinux(pattern, [], new Set()));
console.log(JSON.stringify(out));
"""


def _srt_hides(folder: Path, patterns: list[str] | None = None) -> set[str]:
    """What srt mounts over for the `.env` globs below `folder` (or for `patterns`)."""
    module = REPO / "node_modules/@anthropic-ai/sandbox-runtime/dist/sandbox/read-deny-glob.js"
    patterns = [f"{folder}/{p}" for p in PATTERNS] if patterns is None else patterns
    script = _EXPAND.format(module=str(module), patterns=patterns)
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, text=True, check=True
    )
    return _outermost(json.loads(done.stdout))


def _outermost(paths: list[str]) -> set[str]:
    """`paths` but those below another of them (hidden by its mount already)."""
    kept = set(paths)
    return {p for p in kept if not any(p.startswith(q + "/") for q in kept)}


def _tree(root: Path, outside: Path) -> None:
    for name in ("a/.env", "a/b/c/.env.local", "node_modules/p/.env", ".env.production", "x/notes"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("S=1\n")
    (root / ".env").mkdir()  # a directory named like one (a virtualenv, say)
    (root / ".env" / ".env.inner").write_text("S=2\n")
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / ".env").write_text("S=3\n")
    (root / "linked").symlink_to(outside)  # followed, listed where it lives
    (root / "a" / "up").symlink_to(root)  # leads back up: not followed
    (root / "x" / "file-link").symlink_to(root / "x" / "notes")
    (root / "x" / "dangling").symlink_to(root / "nowhere")


def test_the_walk_hides_what_srts_globs_hide(tmp_path: Path) -> None:
    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    _tree(root, outside)
    found = dotenv.denials([root])
    assert not any("*" in p for p in found), found  # the walk decided, srt walks nothing
    assert _outermost(found) == _srt_hides(root)
    assert str(outside / "deep" / ".env") in found and str(root / "a" / ".env") in found
    empty = tmp_path / "empty"
    empty.mkdir()
    assert dotenv.denials([empty]) == [] and _srt_hides(empty) == set()


@pytest.mark.parametrize("case", ["matching link", "glob characters", "unlistable"])
def test_what_srts_rules_decide_is_named_too(tmp_path: Path, case: str) -> None:
    """srt hides where a matching link leads and a folder it cannot list; a name with glob
    characters is handed over as a glob that matches it alone (checked with srt's expansion)."""
    root = tmp_path / "project"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("S=1\n")
    if case == "matching link":
        (root / "sub" / ".env").symlink_to(tmp_path / "secret")
        assert dotenv.denials([root]) == [str(tmp_path / "secret")]
    elif case == "glob characters":
        names = [".env.[a]", ".env.a]", ".env.[", ".env.[x]]", ".env.{b}!", ".env.*", ".env.?"]
        for name in [*names, ".env.a", ".env.x", ".env.ab"]:  # the last three match globs, not names
            (root / "sub" / name).write_text("S=1\n")
        found = dotenv.denials([root])
        assert _srt_hides(root, [p for p in found if set(p) & set("[]")]) == {
            str(root / "sub" / n) for n in names[:4]
        }
        assert str(root / "sub" / ".env.{b}!") in found  # not a glob for srt
        assert not [p for p in found if set(p) & set("*?")]  # srt could only read them as patterns
    else:
        if os.geteuid() == 0:
            pytest.skip("root lists any directory")
        (root / "sub").chmod(0)
        try:
            assert dotenv.denials([root]) == [str(root / "sub")]
        finally:
            (root / "sub").chmod(0o755)


def test_past_a_bound_the_oldest_are_hidden_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """srt refuses a sandbox of some thousand mounts, one per `.env` file it hides: past
    `MAX_DOTENV`, the files changed longest ago (the user's, before a kernel's flood) are named."""
    monkeypatch.setattr(dotenv, "MAX_DOTENV", 3)
    made = []
    for i in range(6):
        (tmp_path / str(i)).mkdir()
        made.append(tmp_path / str(i) / ".env")
        made[-1].write_text("S=1\n")
        time.sleep(0.02)  # change times in the order made, on coarse clocks too
    (tmp_path / "1" / ".env.link").symlink_to(made[0])  # left to srt, but the bound comes first
    with caplog.at_level(logging.WARNING, logger="ipybox.sandbox.dotenv"):
        assert dotenv.denials([tmp_path]) == [str(p) for p in made[:3]]
    assert "holds 6 .env files" in caplog.text


async def test_a_kernel_reads_no_env_file_the_walk_or_srt_found(tmp_path: Path) -> None:
    """Both ways: a project the walk names (a linked folder among them), and one it hands to srt
    (a `.env` that is a link, a name with glob characters): no secret reaches the kernel."""
    walked, globbed, outside = tmp_path / "walked", tmp_path / "globbed", tmp_path / "elsewhere"
    braced = tmp_path / "app {v2}!"  # plain characters to srt, once taken for glob characters here
    _tree(walked, outside)
    (braced / "x").mkdir(parents=True)
    (braced / "x" / "notes").write_text("S=1\n")
    (braced / "sub").mkdir()
    (braced / "sub" / ".env").write_text("S=braced\n")
    (braced / "sub" / ".env.[a]").write_text("S=braced\n")
    (globbed / "sub").mkdir(parents=True)
    (globbed / "sub" / ".env.[a]").write_text("S=glob\n")
    (globbed / "target").write_text("S=1\n")
    (globbed / "sub" / ".env.link").symlink_to(globbed / "target")
    (globbed / "x").mkdir()
    (globbed / "x" / "notes").write_text("S=1\n")
    secrets = {
        walked: ["a/.env", "a/b/c/.env.local", "node_modules/p/.env", ".env.production", ".env/.env.inner",
                 "linked/deep/.env"],
        globbed: ["sub/.env.[a]", "sub/.env.link"],
        braced: ["sub/.env", "sub/.env.[a]"],
    }  # fmt: skip
    for root, names in secrets.items():
        code = f"print(_json.dumps([{{t: attempt(lambda t=t: open(t).read()) for t in {names!r}}}, "
        code += "attempt(lambda: open('x/notes').read())]))"
        async with CodeExecutor(sandbox=True, working_dir=root, spare_kernel=False) as executor:
            tried, other = await probe(executor, code)
        assert not {t: r for t, r in tried.items() if r.startswith("ok")}, (root, tried)
        assert other == "ok: 'S=1\\n'", other  # the rest stays readable


@pytest.mark.parametrize("name", ["ws[1]", "ws]", "w*s", "ws?"])
async def test_a_working_directory_srt_reads_as_a_pattern_is_refused(tmp_path: Path, name: str) -> None:
    """srt would give the kernel no such folder (the kernel's start failed on a bare `cd` error)
    and hide none of its `.env` files: refused before anything starts, saying what to change."""
    workspace = tmp_path / name
    workspace.mkdir()
    executor = CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False)
    with pytest.raises(SandboxError, match=r"cannot work in .*: its path holds .* Rename the folder"):
        await executor.start()


async def test_what_a_users_env_link_or_folder_hides_stays_hidden_through_a_kernels_flood(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srt hides where a matching link leads and a folder named like a `.env` whole, but the
    writable binds ipybox pins on a workspace's shallow folders showed them again: a user's
    `app/.env -> ../vault` and a `.env.prod/x/` folder were read by the kernel. Past the bound,
    what srt's rules decide was dropped too (a link's target), and matches left to srt's globs
    were not counted, so 3,100 `.env.[N]` files had srt mount each and refuse every later start;
    and `.env` links to the standard library beside such a name had srt hide it from every kernel."""
    monkeypatch.setattr(dotenv, "MAX_DOTENV", 20)
    root = tmp_path / "project"
    (root / "config").mkdir(parents=True)
    (root / "config" / "prod.cfg").write_text("S=file\n")
    (root / ".env").symlink_to("config/prod.cfg")
    (root / "vault").mkdir()
    (root / "vault" / "key").write_text("S=dir\n")
    (root / "app").mkdir()
    (root / "app" / ".env").symlink_to("../vault")
    (root / ".env.prod" / "x").mkdir(parents=True)
    (root / ".env.prod" / "x" / "k").write_text("S=folder\n")
    names = ["config/prod.cfg", "vault/key", ".env.prod/x/k"]
    reads = f"print(_json.dumps({{t: attempt(lambda t=t: open(t).read()) for t in {names!r}}}))"
    flood = "for i in range(30): os.makedirs(f'f/{i}', exist_ok=True); open(f'f/{i}/.env', 'w').close()\n"
    globs = "os.makedirs('g', exist_ok=True)\nfor i in range(3100): open(f'g/.env.[{i}]', 'w').close()\n"
    # links to what every kernel needs, beside a name with glob characters (which handed srt
    # its globs, and srt hides where a matching link leads): every later start failed
    needed = (
        "import json; open('.env.[z]', 'w').close()\n"
        "for i, t in enumerate([json.__file__, os.path.dirname(json.__file__), os.path.dirname(os.__file__), "
        "os.getcwd() + '/..', '/etc', '/proc', tempfile.gettempdir()]): os.symlink(t, f'.env.l{i}')\n"
    )
    async with CodeExecutor(sandbox=True, working_dir=root, spare_kernel=False) as executor:
        for made in ("", needed, flood, globs):
            if made:
                await probe(executor, "import os, shutil, tempfile\n" + made + "print(1)")
                await executor.reset()  # the policy is built again over what the kernel made
            tried = await probe(executor, reads)
            assert not {t: r for t, r in tried.items() if r.startswith("ok")}, (made[:40], tried)


def test_past_the_bound_srt_is_handed_no_globs_to_expand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree of more than 50,000 entries went to srt's globs whole, which mount every match, so
    a kernel's filler files plus 3,000 `.env` files stopped every later start; matches left to
    srt's rules (links, glob characters) are counted against `MAX_DOTENV` as well."""
    monkeypatch.setattr(dotenv, "MAX_DOTENV", 20)
    for case in ("entries", "links", "glob names"):
        root = tmp_path / case.replace(" ", "-")
        root.mkdir()
        (root / "user.env").write_text("S=1\n")
        (root / ".env").symlink_to("user.env")
        time.sleep(0.02)  # the kernel's come later, on coarse clocks too
        for i in range(30):
            (root / str(i)).mkdir()
            if case == "entries":  # behind 50,000 entries of filler, walked first (the last listed)
                (root / str(i) / ".env").touch()
                (root / "zz" / str(i)).mkdir(parents=True)
                for j in range(1700):
                    os.close(os.open(root / "zz" / str(i) / str(j), os.O_CREAT | os.O_WRONLY))
            elif case == "links":
                (root / str(i) / "t").touch()
                (root / str(i) / ".env").symlink_to(root / str(i) / "t")
            else:
                (root / str(i) / ".env.[x]").touch()
        found = dotenv.denials([root])
        assert not any("*" in p for p in found), (case, found)
        assert len(found) <= 20 and str(root / "user.env") in found, (case, found)


def test_links_into_what_the_kernel_needs_or_pseudo_filesystems_are_not_walked(tmp_path: Path) -> None:
    """The walk runs on the host at every start: a kernel's link to /usr had it read all of
    /usr (5.6 s a start here), one to /proc every process's folders (naming some it could not
    list). Links into the paths the kernel needs (Python, the system) and into /proc, /sys and
    /dev are not followed; a `.env` link there is not followed either."""
    root, needed = tmp_path / "project", tmp_path / "site-packages"
    (needed / "pkg").mkdir(parents=True)
    (needed / "pkg" / ".env").write_text("S=1\n")  # a package's, not the user's
    root.mkdir()
    (root / ".env").write_text("S=1\n")
    for name, target in {"lib": needed, "p": Path("/proc"), "s": Path("/sys"), "d": Path("/dev")}.items():
        (root / name).symlink_to(target)
    (root / ".env.pkg").symlink_to(needed / "pkg" / ".env")
    assert dotenv.denials([root], [str(needed)]) == [str(root / ".env")]

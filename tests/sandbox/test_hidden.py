"""Reads by allow-list: what a sandboxed kernel must not see of the host, by several routes.

The host-side secrets live in a temporary home (`HOME` is set for the test process, from which
ipybox computes the policy) and temporary directories; each test first makes sure the target
is there and usable from the host, so that it fails if the sandbox stops hiding it.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import reads

from .conftest import probe, sandbox_config, write_config

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(90)]

#: Files of the user's home that hold credentials, with their secret content.
CREDENTIALS = {
    ".claude/.credentials.json": "claude-token-7d1",
    ".git-credentials": "https://user:git-token-a42@example.org",
    ".config/gh/hosts.yml": "oauth_token: gh-token-9c0",
    ".npmrc": "//registry.npmjs.org/:_authToken=npm-token-5e3",
    ".pypirc": "password = pypi-token-b18",
    ".cargo/credentials.toml": 'token = "cargo-token-4f6"',
    "notes/todo.txt": "home-note-e21",  # not a credential: the rest of the home is hidden too
}

#: Kernel code: `routes(path)` reads `path` in five ways.
ROUTES = """
import shutil, subprocess
def via_symlink(t):
    name = 'link-' + os.path.basename(t)
    os.symlink(t, name)
    return open(name).read()
def via_hardlink(t):
    name = 'hard-' + os.path.basename(t)
    os.link(t, name)
    return open(name).read()
def routes(t):
    return [
        attempt(lambda: open(t).read()),
        attempt(lambda: subprocess.run(['cat', t], capture_output=True, text=True, check=True).stdout),
        attempt(lambda: open('/proc/self/root' + t).read()),
        attempt(lambda: via_symlink(t)),
        attempt(lambda: via_hardlink(t)),
    ]
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory holding `CREDENTIALS`, the host process's `HOME` for the test."""
    path = tmp_path / "home"
    for name, content in CREDENTIALS.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content + "\n")
    monkeypatch.setenv("HOME", str(path))
    return path


def _assert_hidden(outcomes: list[str], secret: str) -> None:
    for outcome in outcomes:
        assert not outcome.startswith("ok") or outcome in ("ok: ''", "ok: []"), outcome
    assert secret not in json.dumps(outcomes)


@pytest.mark.parametrize("config", ["default", "allow_read_home"])
async def test_home_and_credentials_are_hidden(
    config: str, home: Path, workspace: Path, tmp_path: Path
) -> None:
    """The home is hidden; credential stores stay hidden even where `allowRead` opens the home."""
    path = None
    if config == "allow_read_home":
        path = write_config(tmp_path / "c.json", sandbox_config(filesystem={"allowRead": [str(home)]}))
    targets = [str(home / name) for name in CREDENTIALS]
    assert all(Path(t).read_text() for t in targets)  # the targets are there
    async with CodeExecutor(
        sandbox=True, sandbox_config=path, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            ROUTES + f"print(_json.dumps({{t: routes(t) for t in {targets!r}}}))",
        )
    for name, content in CREDENTIALS.items():
        if config == "allow_read_home" and name == "notes/todo.txt":
            assert result[str(home / name)][0] == f"ok: {content + chr(10)!r}"  # opened by allowRead
            continue
        _assert_hidden(result[str(home / name)], content)
    assert not [p for p in workspace.iterdir() if p.name.startswith("hard-")]


async def test_other_projects_and_users_are_hidden(workspace: Path, tmp_path: Path) -> None:
    """Another project's `.env` (beside the workspace, in another user's home, under /srv)."""
    other = tmp_path / "other-project"
    other.mkdir()
    (other / ".env").write_text("OTHER=other-project-secret-3b\n")
    (other / "main.py").write_text("print('other-project-code-8e')\n")
    targets = [str(other / ".env"), str(other / "main.py")]
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            ROUTES
            + f"out = {{t: routes(t) for t in {targets!r}}}\n"
            + f"out['list'] = attempt(lambda: os.listdir({str(other)!r}))\n"
            + "out['homes'] = [attempt(lambda h=h: os.listdir(h)) for h in ('/home', '/root')]\n"
            + "print(_json.dumps(out))",
        )
    _assert_hidden(result[targets[0]], "other-project-secret-3b")
    _assert_hidden(result[targets[1]], "other-project-code-8e")
    assert "main.py" not in result["list"]
    for listing in result["homes"]:  # empty stand-ins (the Python install under /root aside)
        assert listing.startswith("ok") and "other-project" not in listing, listing


@pytest.fixture
def host_sockets() -> Iterator[dict[str, str]]:
    """A real tmux server and a listening socket in the shared temp dir, and an abstract socket."""
    base = Path(tempfile.mkdtemp(prefix="tmux-test-", dir="/tmp"))
    marker = base / "pwned"
    tmux = base / "default"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(base / "X0"))  # like /tmp/.X11-unix/X0
    listener.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0ipybox-test-{uuid.uuid4().hex}")
    abstract.listen()
    sockets = {"x11": str(base / "X0"), "marker": str(marker)}
    sockets["abstract"] = abstract.getsockname()[1:].decode()
    if shutil.which("tmux"):
        subprocess.run(["tmux", "-S", str(tmux), "new-session", "-d", "sleep", "120"], check=True)
        subprocess.run(["tmux", "-S", str(tmux), "run-shell", "true"], check=True)  # it runs commands
        sockets["tmux"] = str(tmux)
    try:
        yield sockets
    finally:
        if "tmux" in sockets:
            subprocess.run(["tmux", "-S", str(tmux), "kill-server"], check=False)
        listener.close()
        abstract.close()
        shutil.rmtree(base, ignore_errors=True)


_CONNECT = """
import socket, subprocess
def connect(address):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(address)
    sock.close()
    return 'connected'
def via_symlink(path):
    os.symlink(path, 'sock-link')
    return connect('sock-link')
s = {sockets!r}
out = {{
    'x11': [attempt(lambda: connect(s['x11'])), attempt(lambda: via_symlink(s['x11'])),
            attempt(lambda: connect('/proc/self/root' + s['x11']))],
    'abstract': attempt(lambda: connect('\\0' + s['abstract'])),
}}
if 'tmux' in s:
    out['tmux'] = [
        attempt(lambda: subprocess.run(['tmux', '-S', s['tmux'], 'run-shell', 'touch ' + s['marker']],
                                       capture_output=True, text=True, check=True).stdout),
        attempt(lambda: connect(s['tmux'])),
    ]
print(_json.dumps(out))
"""


async def test_host_sockets_are_unreachable(workspace: Path, host_sockets: dict[str, str]) -> None:
    """tmux's server socket (`run-shell` runs anything on the host), an X11-style socket in
    /tmp, and an abstract socket (srt's own network namespace has none of the host's)."""
    probe_socket = socket.socket(socket.AF_UNIX)
    probe_socket.connect(host_sockets["x11"])  # reachable from the host
    probe_socket.close()
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(executor, _CONNECT.format(sockets=host_sockets))
    for outcome in [*result["x11"], result["abstract"], *result.get("tmux", [])]:
        assert not outcome.startswith("ok"), outcome
    assert result["abstract"].startswith("ConnectionRefusedError"), result["abstract"]
    assert not Path(host_sockets["marker"]).exists()


async def test_user_paths_named_like_ipybox_runtime_dirs_work(
    srt_available: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace and an import path under /tmp/ipybox-<name> are the user's: readable and
    (the workspace) writable, not mistaken for ipybox's runtime dirs."""
    base = Path(f"/tmp/ipybox-myproject-{uuid.uuid4().hex[:8]}")
    try:
        (base / "workspace").mkdir(parents=True)
        (base / "workspace" / "data.txt").write_text("user data\n")
        (base / "lib" / "mylib").mkdir(parents=True)
        (base / "lib" / "mylib" / "__init__.py").write_text("VALUE = 'from mylib'\n")
        async with CodeExecutor(
            sandbox=True,
            working_dir=base / "workspace",
            kernel_env={"PYTHONPATH": str(base / "lib")},
            spare_kernel=False,
        ) as executor:
            result = await probe(
                executor,
                "print(_json.dumps([attempt(lambda: open('data.txt').read()),"
                " attempt(lambda: open('out.txt', 'w').write('x')),"
                " attempt(lambda: __import__('mylib').VALUE)]))",
            )
        assert result == ["ok: 'user data\\n'", "ok: 1", "ok: 'from mylib'"]
        assert (base / "workspace" / "out.txt").read_text() == "x"
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_shared_memory_and_temp_files_of_others_are_hidden(workspace: Path) -> None:
    """/dev/shm and the shared temp dirs are the sandbox's own: nothing of the host's shows."""
    name = f"ipybox-test-{uuid.uuid4().hex}"
    shm = Path("/dev/shm") / name
    tmp = Path("/tmp") / name
    var_tmp = Path("/var/tmp") / name
    for path in (shm, tmp, var_tmp):
        path.write_text("host-temp-secret-0d\n")
    try:
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
            result = await probe(
                executor,
                ROUTES
                + f"out = [routes(t) for t in {[str(shm), str(tmp), str(var_tmp)]!r}]\n"
                + "open('/dev/shm/own', 'w').write('x')  # its own /dev/shm works\n"
                + "print(_json.dumps(out))",
            )
    finally:
        for path in (shm, tmp, var_tmp):
            path.unlink(missing_ok=True)
    for outcomes in result:
        _assert_hidden(outcomes, "host-temp-secret-0d")
    assert os.path.exists("/dev/shm")


async def test_private_system_files_are_hidden_also_from_root(workspace: Path) -> None:
    """What in /etc other users may not read (`/etc/shadow`, `/etc/gshadow`, TLS private keys)
    is hidden, by every route, also when the kernel runs as root; the rest of /etc is readable."""
    private = [p for p in ("/etc/shadow", "/etc/gshadow", "/etc/ssl/private") if os.path.exists(p)]
    assert "/etc/shadow" in private
    if os.geteuid() == 0:
        assert Path("/etc/shadow").read_text()  # root on the host reads it: the sandbox must not
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            ROUTES
            + f"out = {{t: routes(t) for t in {private!r} if os.path.isfile(t)}}\n"
            + "out['private'] = attempt(lambda: os.listdir('/etc/ssl/private'))\n"
            + "out['passwd'] = attempt(lambda: open('/etc/passwd').read())\n"
            + "out['certs'] = attempt(lambda: bool(os.listdir('/etc/ssl/certs')))\n"
            + "print(_json.dumps(out))",
        )
    shadow = Path("/etc/shadow").read_text() if os.geteuid() == 0 else "root:"
    for target in private:
        if target in result:
            _assert_hidden(result[target], shadow.splitlines()[0])
    assert result["private"] in ("ok: []",) or not result["private"].startswith("ok"), result["private"]
    assert result["passwd"].startswith("ok: 'root:"), result["passwd"]
    assert result["certs"] == "ok: True"


#: Secrets in hidden files that no fixed list names (or that it names: `.aws`, `.docker`), at
#: the top of the home and deeper down.
HIDDEN = {
    ".pgpass": "db:5432:*:me:pg-secret-31a",
    ".docker/config.json": '{"auths": {"r": {"auth": "docker-secret-8b2"}}}',
    ".bash_history": "export TOKEN=history-secret-c55",
    ".aws/credentials": "aws_secret_access_key = aws-secret-0d9",
    ".local/share/app/token": "local-secret-e47",
    "projects/app/.secrets/key": "nested-secret-f12",
    "projects/app/.pypirc": "password = nested-pypi-9a3",
}


async def test_allow_read_of_a_folder_keeps_its_hidden_entries_hidden(
    home: Path, workspace: Path, tmp_path: Path
) -> None:
    """`allowRead: ["~"]` opens the home's ordinary files but none of its dotfiles or
    dot-directories, at any depth; one the policy names itself opens, except a credential store
    (`~/.aws`), which stays hidden even when named."""
    readable = {".config/tool/settings.ini": "named-f00", "projects/app/main.py": "x=1"}
    for name, content in {**HIDDEN, **readable}.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(content + "\n")
    named = [str(home / ".config" / "tool"), str(home / ".aws")]
    config = write_config(tmp_path / "c.json", sandbox_config(filesystem={"allowRead": [str(home), *named]}))
    targets = [str(home / name) for name in [*HIDDEN, *readable]]
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            ROUTES + f"print(_json.dumps({{t: routes(t) for t in {targets!r}}}))",
        )
    for name, content in HIDDEN.items():
        _assert_hidden(result[str(home / name)], content)
    assert result[str(home / ".config/tool/settings.ini")][0] == "ok: 'named-f00\\n'"
    assert result[str(home / "projects/app/main.py")][0] == "ok: 'x=1\\n'"


@pytest.mark.filterwarnings("error::ResourceWarning", "error::pytest.PytestUnraisableExceptionWarning")
def test_looking_for_modules_leaves_no_directory_open(tmp_path: Path) -> None:
    """The walk for a workspace's importable folders stops at a folder's first module and closes
    the folder's listing there, not when the garbage collector gets to it."""
    for package in ("one", "two"):
        (tmp_path / package).mkdir()
        for module in ("a", "b", "c"):
            (tmp_path / package / f"{module}.py").write_text("")
    found = reads._importable(tmp_path)
    gc.collect()
    assert sorted(Path(p).name for p in found) == ["one", "two"]

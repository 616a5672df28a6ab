"""Attacks from sandboxed kernel code: each must be blocked.

Every test first makes sure the attack is attempted for real (the target exists, the host can
do what the kernel must not) so that it fails if the sandbox stops blocking it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from internals import runtime_dir
from servers.launch import nasty_params

import ipybox
from ipybox import ApprovalRequest, CodeExecutionError, CodeExecutor, generate_mcp_sources
from ipybox.sandbox import runtime_root
from ipybox.tool_exec import registry

from .conftest import (
    ENV_SECRET,
    LocalServer,
    ProcessWatch,
    probe,
    run,
    sandbox_config,
    until,
    write_config,
)

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(90)]

#: Kernel code: `runtime` is the executor's runtime dir, `policy` the policy file srt reads.
RUNTIME = (
    "import os, pathlib\n"
    "runtime = pathlib.Path(os.environ['IPYBOX_TOOL_SERVER']).parent\n"
    "from ipykernel import get_connection_file\n"
    "policy = runtime / f'sandbox-{pathlib.Path(get_connection_file()).parent.name}.json'\n"
)


def _unique(prefix: str) -> str:
    return f"ipybox-{prefix}-{uuid.uuid4().hex[:10]}"


# --- files ----------------------------------------------------------------------------------------


async def test_dotenv_in_working_dir_is_unreadable(executor: CodeExecutor, workspace: Path) -> None:
    result = await probe(
        executor,
        "import subprocess, pathlib\n"
        "print(_json.dumps([\n"
        "    attempt(lambda: open('.env').read()),\n"
        "    attempt(lambda: pathlib.Path('.env').read_bytes()),\n"
        "    attempt(lambda: os.read(os.open('.env', os.O_RDONLY), 1000)),\n"
        "    attempt(lambda: subprocess.run(['cat', '.env'], capture_output=True, text=True).stdout),\n"
        "    attempt(lambda: subprocess.run(['sh', '-c', 'cp .env copy.txt && cat copy.txt'],"
        " capture_output=True, text=True).stdout),\n"
        "]))",
    )
    assert ENV_SECRET in (workspace / ".env").read_text()  # the target is there
    assert result[0].startswith("PermissionError: [Errno 13] Permission denied")
    assert result[1].startswith("PermissionError")
    assert result[2].startswith("PermissionError")
    assert ENV_SECRET not in json.dumps(result)
    assert not (workspace / "copy.txt").exists() or ENV_SECRET not in (workspace / "copy.txt").read_text()


async def test_custom_deny_read_is_enforced(srt_available: None, workspace: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "key.txt").write_text("top-secret-key")
    config = write_config(
        tmp_path / "deny.json", sandbox_config(filesystem={"denyRead": [".env", str(secrets)]})
    )
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            f"secrets = {str(secrets)!r}\n"
            "print(_json.dumps([attempt(lambda: open(secrets + '/key.txt').read()),"
            " attempt(lambda: os.listdir(secrets)), attempt(lambda: open('hello.txt').read())]))",
        )
    assert result[0].startswith(("PermissionError", "FileNotFoundError")), result[0]
    assert "top-secret-key" not in json.dumps(result)
    assert "key.txt" not in result[1]
    assert result[2] == "ok: 'hello from the workspace\\n'"  # the rest stays readable


async def test_credential_dirs_are_unreadable_whatever_the_config(
    srt_available: None, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for name in (".ssh/id_ed25519", ".aws/credentials", ".netrc"):
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text("credential-" + name)
    monkeypatch.setenv("HOME", str(home))
    # a user config that denies nothing: ipybox's own denials still apply
    config = write_config(tmp_path / "open.json", sandbox_config(filesystem={"denyRead": []}))
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            "home = pathlib.Path.home()\n"
            "print(_json.dumps([str(home)] + [attempt(lambda n=n: (home / n).read_text())"
            " for n in ('.ssh/id_ed25519', '.aws/credentials', '.netrc')]))",
        )
    assert result[0] == str(home)
    for outcome in result[1:]:
        assert outcome.startswith(("PermissionError", "FileNotFoundError", "IsADirectoryError")), outcome
    assert "credential-" not in json.dumps(result)


async def test_writes_outside_allowed_paths_are_read_only(executor: CodeExecutor) -> None:
    name = _unique("escape")
    site = Path(ipybox.__file__).parent
    targets = [
        Path(tempfile.gettempdir()) / name,
        Path.home() / name,
        site / f"{name}.py",  # code the host imports
        Path(sys.prefix) / f"{name}.pth",  # code every host Python runs
        Path("/etc") / name,
    ]
    try:
        result = await probe(
            executor,
            f"import subprocess\ntargets = {[str(t) for t in targets]!r}\n"
            "out = [attempt(lambda t=t: open(t, 'w').write('x')) for t in targets]\n"
            "out += [attempt(lambda t=t: subprocess.run(['touch', t], capture_output=True, text=True,"
            " check=True)) for t in targets]\n"
            "print(_json.dumps(out))",
        )
        # the temp dir and the home are hidden behind private stand-ins: a write there may
        # succeed but never reaches the host; what the kernel sees of the rest is read-only
        for target, outcome in zip(targets[2:], result[2 : len(targets)], strict=True):
            assert outcome.startswith("OSError: [Errno 30] Read-only file system"), (target, outcome)
        for target, outcome in zip(targets[2:], result[len(targets) + 2 :], strict=True):
            assert outcome.startswith("CalledProcessError"), (target, outcome)
        assert not [t for t in targets if t.exists()]
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


_TAMPER_STATE = """
state = pathlib.Path({state!r})
files = [state / {mine!r}, state / 'all-workspaces.json']
evil = _json.dumps({{"servers": {{"evil": [_json.dumps({{"command": "touch", "args": ["/tmp/x"]}})]}}}})
def replace(target):
    (pathlib.Path({scratch!r}) / 'servers.json').write_text(evil)
    os.replace(pathlib.Path({scratch!r}) / 'servers.json', target)
out = {{
    'read': [attempt(lambda f=f: f.read_text()) for f in files] + [attempt(lambda: os.listdir(state))],
    'write': [attempt(lambda f=f: f.write_text(evil)) for f in files]
    + [attempt(lambda: os.makedirs(state / 'workspaces', exist_ok=True) or (state / 'x').write_text(evil))]
    + [attempt(lambda f=f: replace(f)) for f in files]
    + [attempt(lambda f=f: f.unlink()) for f in files],
}}
print(_json.dumps(out))
"""


def _tree(root: Path) -> dict[str, bytes] | None:
    """Every file under `root` with its content (None if `root` does not exist)."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in root.rglob("*")}


@pytest.mark.parametrize("where", ["outside", "inside_allow_write", "missing_inside_allow_write"])
async def test_state_dir_is_hidden_and_cannot_be_changed(
    where: str,
    workspace: Path,
    tmp_path: Path,
    state_dir: Path,
    everything_params: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry of trusted servers can be neither read nor changed by kernels, even under a
    writable path. The kernel sees an empty stand-in (srt's private tmpfs) or nothing at all:
    what it writes there never reaches the host."""
    config_path = None
    if where != "outside":
        writable = tmp_path / "writable"
        writable.mkdir()
        state_dir = writable / "state"
        monkeypatch.setenv("IPYBOX_STATE_DIR", str(state_dir))
        config_path = write_config(
            tmp_path / "c.json", sandbox_config(filesystem={"allowWrite": [".", str(writable)]})
        )
    mine = registry.registry_file(workspace)
    if where != "missing_inside_allow_write":
        registry.register("everything", everything_params, workspace)
        registry.register("everything", everything_params)  # for every workspace
        assert mine.exists() and registry.registry_file(None).exists()
    before = _tree(state_dir)
    async with CodeExecutor(
        sandbox=True, sandbox_config=config_path, working_dir=workspace, spare_kernel=False
    ) as executor:
        code = _TAMPER_STATE.format(
            state=str(state_dir), mine=str(mine.relative_to(state_dir)), scratch=str(workspace)
        )
        result = await probe(executor, RUNTIME + code)
        await executor.reset()  # a later kernel sees the host's state dir afresh: still hidden
        again = await probe(executor, f"print(_json.dumps(attempt(lambda: open({str(mine)!r}).read())))")
    for outcome in [*result["read"], again]:
        assert not outcome.startswith("ok") or outcome in ("ok: []", "ok: ''"), outcome
    assert "everything" not in json.dumps(result) + again
    assert _tree(state_dir) == before  # whatever the kernel did, the host's registry is unchanged
    assert not registry.is_registered("evil", {"command": "touch", "args": ["/tmp/x"]})
    assert registry.is_registered("everything", everything_params, workspace) is (before is not None)


_TAMPER_POLICY = """
loose = _json.dumps({{"filesystem": {{"denyRead": [], "allowWrite": ["/"], "denyWrite": []}},
                     "network": {{"allowedDomains": [], "deniedDomains": [], "allowAllUnixSockets": True}}}})
target = pathlib.Path({target!r}) if {target!r} else policy
def rewrite():
    os.chmod(target, 0o600)
    target.write_text(loose)
def replace():
    (runtime / 'loose.json').write_text(loose)
    os.replace(runtime / 'loose.json', target)
def replace_dir():
    os.rename(runtime, str(runtime) + '-old')
print(_json.dumps([attempt(rewrite), attempt(replace), attempt(target.unlink), attempt(replace_dir)]))
"""


_TAMPER_LAUNCHER = """
launcher = policy.with_suffix('.bwrap')
evil = '#!/bin/sh\\ntouch /tmp/ipybox-launcher-pwned\\nexec /usr/bin/bwrap "$@"\\n'
def rewrite():
    os.chmod(launcher, 0o700)
    launcher.write_text(evil)
def replace():
    (runtime / 'evil').write_text(evil)
    os.replace(runtime / 'evil', launcher)
print(_json.dumps([attempt(launcher.read_text), attempt(rewrite), attempt(replace)]))
"""


@pytest.mark.parametrize("layout", ["default", "tmp_in_workspace", "config_in_workspace"])
async def test_policy_cannot_be_loosened_for_later_kernels(
    layout: str, srt_available: None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the policy srt reads nor the user's config file can be changed by the kernel.

    `tmp_in_workspace`: the runtime dir (with the policy) lies inside the writable working
    directory, as with working_dir=/tmp. `config_in_workspace`: the user's config file does.
    """
    config_path = None
    target = ""
    if layout == "tmp_in_workspace":
        # short: the kernel's ipc socket paths (under the temp dir) must fit in ~107 bytes
        # (the runtime dir adds "ipybox-runtime-<uid>/ipybox-<8>" to it: keep this short for any uid)
        workspace = Path(tempfile.mkdtemp(prefix="ws-", dir="/tmp"))
        (workspace / "t").mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(workspace / "t"))
    elif layout == "config_in_workspace":
        config_path = write_config(workspace / "my-sandbox.json", sandbox_config())
        target = str(config_path)
    escape = Path("/etc") / _unique("escape")  # visible read-only; writable only if the policy was loosened
    try:
        await _tamper_with_policy(workspace, config_path, target, escape, layout)
    finally:
        escape.unlink(missing_ok=True)
        if layout == "tmp_in_workspace":
            shutil.rmtree(workspace, ignore_errors=True)


async def _tamper_with_policy(
    workspace: Path, config_path: Path | None, target: str, escape: Path, layout: str
) -> None:
    async with CodeExecutor(
        sandbox=True, sandbox_config=config_path, working_dir=workspace, spare_kernel=False
    ) as executor:
        policy_path = Path(await run(executor, RUNTIME + "print(policy)"))
        before = policy_path.read_bytes(), (config_path.read_bytes() if config_path else b"")
        launcher = policy_path.with_suffix(".bwrap")  # srt's bwrap: runs outside the sandbox
        launcher_before = launcher.read_bytes()
        swapped = await probe(executor, RUNTIME + _TAMPER_LAUNCHER)
        assert launcher.read_bytes() == launcher_before, swapped
        if layout == "tmp_in_workspace":
            assert policy_path.is_relative_to(workspace)  # the layout under test
        result = await probe(executor, RUNTIME + _TAMPER_POLICY.format(target=target))
        if target:  # the user's config is in the workspace, in the kernel's view: it stays read-only
            assert not [r for r in result[:3] if r.startswith("ok")], result
        # srt's policy lies in the runtime dir, hidden behind a private empty stand-in: changes the
        # kernel makes there (which may "succeed") never reach the host, which is what counts
        assert (policy_path.read_bytes(), (config_path.read_bytes() if config_path else b"")) == before
        # the next kernel starts with the same policy: still confined
        await executor.reset()
        escaped = await probe(
            executor, f"print(_json.dumps(attempt(lambda: open({str(escape)!r}, 'w').write('x'))))"
        )
        assert escaped.startswith("OSError: [Errno 30]"), escaped
        assert not escape.exists()


_READ_SECRETS = """
import shutil, subprocess
targets = {targets!r}
def via_link(t):
    os.symlink(os.path.abspath(t), 'link-' + t.replace('/', '_'))
    return open('link-' + t.replace('/', '_')).read()
def via_hardlink(t):
    os.link(t, 'hard-' + t.replace('/', '_'))
    return open('hard-' + t.replace('/', '_')).read()
out = {{}}
for t in targets:
    out[t] = [
        attempt(lambda t=t: open(t).read()),
        attempt(lambda t=t: subprocess.run(['cat', t], capture_output=True, text=True, check=True).stdout),
        attempt(lambda t=t: shutil.copy(t, 'copied') and open('copied').read()),
        attempt(lambda t=t: via_link(t)),
        attempt(lambda t=t: via_hardlink(t)),
    ]
out['listed'] = sorted(os.listdir('sub'))
out['other'] = attempt(lambda: open('sub/notes.txt').read())
print(_json.dumps(out))
"""


async def test_dotenv_files_in_subfolders_are_unreadable(srt_available: None, workspace: Path) -> None:
    """Every `.env` and `.env.*` in the workspace is hidden, at any depth, whatever it is read with."""
    files = {
        "sub/.env": "SUB_SECRET=sub-secret-31f",
        "sub/deeper/.env.local": "LOCAL_SECRET=local-secret-8a2",
        "node_modules/pkg/.env": "PKG_SECRET=pkg-secret-c07",
        ".env.production": "PROD_SECRET=prod-secret-e55",
    }
    for name, content in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(content + "\n")
    (workspace / "sub" / "notes.txt").write_text("not a secret\n")
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(executor, _READ_SECRETS.format(targets=[".env", *files]))
        # a .env that appears while a kernel runs is hidden from the next kernel
        (workspace / "sub" / "late").mkdir()
        (workspace / "sub" / "late" / ".env").write_text("LATE_SECRET=late-secret-6b9\n")
        await executor.reset()
        late = await probe(executor, "print(_json.dumps(attempt(lambda: open('sub/late/.env').read())))")
    text = json.dumps(result) + late
    for secret in (ENV_SECRET, "sub-secret-31f", "local-secret-8a2", "pkg-secret-c07", "prod-secret-e55"):
        assert secret not in text
    assert "late-secret-6b9" not in text
    for name in [".env", *files]:
        assert not [r for r in result[name] if r.startswith("ok")], (name, result[name])
    assert result["listed"] == [".env", "deeper", "late", "notes.txt"] or ".env" in result["listed"]
    assert result["other"] == "ok: 'not a secret\\n'"  # the rest of the workspace stays readable
    assert late.startswith("PermissionError"), late
    assert (workspace / "sub" / ".env").read_text() == files["sub/.env"] + "\n"


# --- other kernels and sandboxes ------------------------------------------------------------------

_REACH_OTHERS = """
import glob, socket
victim = pathlib.Path({victim!r})
mine = pathlib.Path(os.environ['IPYBOX_TOOL_SERVER']).parent
def connect(path, payload):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(str(path))
    sock.sendall(payload)
    return sock.recv(200).decode(errors='replace')
request = {{'op': 'run', 'server_name': 'nasty', 'server_params': {params!r},
           'tool_name': 'echo', 'tool_args': {{'message': 'from another sandbox'}}}}
found = [p for pattern in {patterns!r} for p in glob.glob(pattern, recursive=True)]
found = [p for p in found if not p.startswith(str(mine))]
print(_json.dumps({{
    'found': found,
    'list': attempt(lambda: os.listdir(victim)),
    'connection_files': attempt(
        lambda: [open(f).read() for f in glob.glob(str(victim / 'kernels' / '*' / '*.json'))]
        or open(victim / 'kernels' / 'missing.json').read()
    ),
    'tools': attempt(lambda: connect(victim / 'tools.sock', _json.dumps(request).encode() + b'\\n')),
    'root': attempt(lambda: os.listdir(mine.parent)),
}}))
"""


def _runtime_patterns() -> list[str]:
    """Where ipybox executors of this user keep their connection files and sockets."""
    roots = {runtime_root(Path(tempfile.gettempdir())), runtime_root(Path("/tmp"))}
    return [f"{root}/**/{name}" for root in roots for name in ("kernels/*", "*.sock")]


@pytest.mark.parametrize("victim_started", ["before", "after"])
async def test_kernel_cannot_reach_other_kernels(
    victim_started: str, srt_available: None, workspace: Path, tmp_path: Path
) -> None:
    """Another executor of the same user (here unsandboxed, whose kernel would run anything) keeps
    its connection files and tool server socket in its runtime dir: a sandboxed kernel can neither
    read the one nor connect to the other, whether that executor started before it or after."""
    other = tmp_path / "other"
    (other / "mcptools").mkdir(parents=True)
    await generate_mcp_sources("nasty", nasty_params(), other / "mcptools")
    log = tmp_path / "victim-audit.jsonl"
    victim = CodeExecutor(working_dir=other, audit_log=log, spare_kernel=False)
    attacker = CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False)
    first, second = (victim, attacker) if victim_started == "before" else (attacker, victim)
    async with first, second:
        runtime = runtime_dir(victim)
        assert runtime is not None and list((runtime / "kernels").glob("*/*.json"))  # the target is there
        code = _REACH_OTHERS.format(victim=str(runtime), params=nasty_params(), patterns=_runtime_patterns())
        result = await probe(attacker, RUNTIME + code)
        assert await run(victim, "print('victim alive')") == "victim alive"
    assert result["found"] == [], result["found"]
    for key in ("list", "connection_files", "tools"):
        assert not result[key].startswith("ok"), (key, result[key])
    assert "key" not in result["connection_files"]  # no connection file content, no HMAC key
    # the kernel sees only its own runtime dir in the hidden root (an empty stand-in around it)
    assert result["root"].startswith("ok") and str(runtime.name) not in result["root"], result["root"]
    assert not log.exists() or "from another sandbox" not in log.read_text()


def _start_other_srt(tmp_path: Path, domain: str) -> tuple[psutil.Popen, list[str]]:
    """An srt sandbox that is not ipybox's (e.g. an agent's shell tool), allowed to reach `domain`,
    with its proxy sockets in the shared temp dir; its process and those socket paths."""
    policy = write_config(
        tmp_path / "other-srt.json",
        sandbox_config(filesystem={"allowWrite": [str(tmp_path)]}, network={"allowedDomains": [domain]}),
    )
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    process = psutil.Popen(["srt", "--settings", str(policy), "--", "sleep", "120"], env=env, cwd=tmp_path)
    sockets: list[str] = []
    for _ in range(100):
        for child in process.children(recursive=True):
            try:
                args = child.cmdline()
            except psutil.Error:
                continue
            sockets += [
                a.split(",")[0].removeprefix("UNIX-LISTEN:") for a in args if a.startswith("UNIX-LISTEN:")
            ]
        if sockets and all(os.path.exists(s) for s in sockets):
            return process, sorted(set(sockets))
        sockets = []
        time.sleep(0.1)
    process.kill()
    pytest.fail("the other srt sandbox did not start its proxy")


def _proxy_request(path: str, port: int) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(f"GET http://127.0.0.1:{port}/other HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        return sock.recv(200).decode(errors="replace")


_REACH_PROXIES = """
import socket, stat
def talk(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(5)
    sock.connect(path)
    sock.sendall(b'GET http://127.0.0.1:{port}/escaped HTTP/1.1\\r\\nHost: 127.0.0.1:{port}\\r\\n\\r\\n')
    return sock.recv(200).decode(errors='replace')
print(_json.dumps({{p: [attempt(lambda p=p: stat.S_ISSOCK(os.stat(p).st_mode)), attempt(lambda p=p: talk(p))]
                   for p in {known!r}}}))
"""


async def test_kernel_cannot_use_other_sandboxes_proxies(
    srt_available: None, workspace: Path, tmp_path: Path, local_server: LocalServer
) -> None:
    """Other sandboxes' proxies would let the kernel out under their network policy. Those of srt
    instances running when the kernel starts are hidden, and so are those of ipybox executors
    started later (srt keeps them in the executor's runtime dir)."""
    domain = f"127.0.0.1:{local_server.port}"
    other, sockets = _start_other_srt(tmp_path, domain)
    try:
        # the target is live: its proxy answers (asking for the other sandbox's credentials)
        assert _proxy_request(sockets[0], local_server.port).startswith("HTTP/1.1 40")
        config = write_config(tmp_path / "net.json", sandbox_config(network={"allowedDomains": [domain]}))
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
            later = CodeExecutor(
                sandbox=True, sandbox_config=config, working_dir=tmp_path, spare_kernel=False
            )
            async with later:
                later_runtime = runtime_dir(later)
                assert later_runtime is not None
                later_sockets = [str(p) for p in (later_runtime / "srt").glob("*.sock")]
                assert later_sockets  # the later sandbox's proxy sockets exist on the host
                known = sockets + later_sockets
                result = await probe(executor, _REACH_PROXIES.format(port=local_server.port, known=known))
                # the later executor itself does reach the server through its own proxy
                allowed = await probe(
                    later,
                    "import os\n"
                    + VIA_PROXY
                    + f"print(_json.dumps(attempt(lambda: via_proxy('http://{domain}/own'))))",
                )
    finally:
        other.kill()
        other.wait()
    assert sorted(result) == sorted(sockets + later_sockets)
    for path, (is_socket, talked) in result.items():
        assert is_socket != "ok: True", path  # hidden: gone, or /dev/null in its place
        assert not talked.startswith("ok"), (path, talked)
    assert allowed.startswith("ok"), allowed
    assert [hit for hit in local_server.hits if hit != "/own"] == []


def _pipes(pid: int | str, first: int = 0) -> dict[int, str]:
    """The pipes and sockets among the descriptors of process `pid` from `first` on, by number."""
    found: dict[int, str] = {}
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                target = os.readlink(f"/proc/{pid}/fd/{name}")
                if int(name) >= first and target.startswith(("pipe:", "socket:")):
                    found[int(name)] = target
    return found


def _cmdline(process: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):  # gone meanwhile (srt's short-lived helpers)
        return process.cmdline()
    return []


async def test_sandbox_holds_no_descriptor_of_srt(srt_available: None, workspace: Path) -> None:
    """srt reads the policy from a pipe it inherits (`--settings /dev/fd/N`). Node marks
    close-on-exec only the descriptors up to its first closed one above 15: the pipe at a higher
    number (the one it has in ipybox's process, kept by `pass_fds`, in a process with many
    descriptors open) reached the kernel and srt's shell and bridges in the sandbox. No process
    the kernel can see holds any of srt's pipes or sockets past its stdio."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]  # ipybox's next pipe above 16
    try:
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
            [srt] = [p for p in psutil.Process().children(recursive=True) if "--settings" in _cmdline(p)]
            cmdline = srt.cmdline()
            settings = int(cmdline[cmdline.index("--settings") + 1].removeprefix("/dev/fd/"))
            outside = _pipes(srt.pid, first=3)
            assert settings in outside, outside  # srt still holds the policy pipe
            code = "print(_json.dumps({p: _pipes(p) for p in os.listdir('/proc') if p.isdigit()}))"
            inside = await probe(executor, _PIPES + code)
            assert len(inside) >= 4, inside  # the kernel, srt's shell and two bridges at least
            leaked = {
                (pid, fd): target
                for pid, fds in inside.items()
                for fd, target in fds.items()
                if target in outside.values()
            }
            assert leaked == {}, (leaked, outside[settings])
    finally:
        for fd in held:
            os.close(fd)


_PIPES = "import contextlib\n" + inspect.getsource(_pipes)


# --- network --------------------------------------------------------------------------------------

#: Kernel code: `via_proxy(url)` fetches `url` explicitly through srt's proxy. srt's NO_PROXY
#: lists localhost and private ranges, which would send such requests directly (and fail),
#: so it is ignored for that request.
VIA_PROXY = """
import urllib.request
def via_proxy(url):
    saved = {key: os.environ.pop(key) for key in ("no_proxy", "NO_PROXY") if key in os.environ}
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["http_proxy"]}))
        with opener.open(url, timeout=10) as response:
            return response.read().decode()
    finally:
        os.environ.update(saved)
def direct(url):  # an ordinary client: the proxy from the environment, except for NO_PROXY hosts
    with urllib.request.build_opener().open(url, timeout=10) as response:
        return response.read().decode()
"""


async def test_egress_by_hostname_is_blocked(executor: CodeExecutor) -> None:
    result = await probe(
        executor,
        "import os\n" + VIA_PROXY + "print(_json.dumps([attempt(lambda: direct('http://example.org/')),"
        " attempt(lambda: direct('https://example.org/')), attempt(lambda: via_proxy('http://example.org/'))]))",
    )
    for outcome in result:
        assert not outcome.startswith("ok"), outcome
    # srt's proxy refuses the unlisted host (rather than, say, DNS failing on a machine offline)
    assert result[0].startswith("HTTPError: HTTP Error 403"), result[0]


@pytest.mark.parametrize("address", ["1.1.1.1", "93.184.216.34"])
async def test_egress_by_ip_is_blocked(executor: CodeExecutor, address: str) -> None:
    result = await probe(
        executor,
        f"import socket\naddress = ({address!r}, 80)\n"
        "print(_json.dumps(attempt(lambda: socket.create_connection(address, timeout=5).close())))",
    )
    # The sandbox has its own network namespace with only a loopback interface.
    assert result.startswith("OSError: [Errno 101] Network is unreachable"), result


async def test_dns_resolution_fails(executor: CodeExecutor) -> None:
    result = await probe(
        executor,
        "import socket\nprint(_json.dumps([attempt(lambda: socket.getaddrinfo('example.org', 80)),"
        " attempt(lambda: socket.getaddrinfo('one.one.one.one', 443)), attempt(socket.if_nameindex)]))",
    )
    assert result[0].startswith("gaierror"), result[0]
    assert result[1].startswith("gaierror"), result[1]
    assert result[2] == "ok: [(1, 'lo')]"  # nothing to resolve through


async def test_local_port_not_on_allow_list_is_unreachable(
    executor: CodeExecutor, local_server: LocalServer
) -> None:
    url = f"http://127.0.0.1:{local_server.port}/"
    result = await probe(
        executor,
        "import os, socket\n" + VIA_PROXY + "print(_json.dumps(["
        f"attempt(lambda: direct({url!r})),"
        f"attempt(lambda: via_proxy({url!r})),"
        f"attempt(lambda: via_proxy('http://localhost:{local_server.port}/')),"
        f"attempt(lambda: socket.create_connection(('127.0.0.1', {local_server.port}), timeout=5).close()),"
        "]))",
    )
    assert local_server.hits == []
    assert local_server.body.decode() not in json.dumps(result)
    assert "Connection refused" in result[0]  # direct: the sandbox's own, empty loopback
    assert result[1].startswith("HTTPError: HTTP Error 403")  # proxy: not on the allow-list
    assert result[2].startswith("HTTPError: HTTP Error 403")
    assert "Connection refused" in result[3]


@pytest.mark.parametrize(
    ("entry", "host"),
    [("127.0.0.1:{port}", "127.0.0.1"), ("localhost:{port}", "localhost"), ("localhost", "localhost")],
)
async def test_listed_local_domain_is_reachable_through_the_proxy(
    entry: str,
    host: str,
    srt_available: None,
    workspace: Path,
    tmp_path: Path,
    local_server: LocalServer,
) -> None:
    """How a host service on a local TCP port can be allowed (srt 0.0.78, Linux).

    - The sandbox has its own network namespace: a direct connection to 127.0.0.1 reaches the
      sandbox's own loopback, never the host's, whatever `allowedDomains` says.
    - srt's HTTP proxy (`http_proxy`, bridged into the sandbox) dials the host's loopback for
      listed entries; entries match the name *as requested*: "127.0.0.1:PORT" admits
      http://127.0.0.1:PORT but not http://localhost:PORT, and vice versa. A bare "localhost"
      admits every port on it; "host:port" admits just that port.
    - srt sets NO_PROXY=localhost,127.0.0.1,... so ordinary clients bypass the proxy for these
      hosts and fail: code must send the request through the proxy explicitly (with no_proxy
      cleared, as `via_proxy` does), e.g. requests' `proxies=` or curl `--noproxy '' -x $http_proxy`.
    - Raw TCP (a database protocol, say) cannot use the HTTP proxy this way; only HTTP(S) works.
      A unix socket (with allowAllUnixSockets, which ipybox sets) is the other way in.
    """
    other = LocalServer()  # a second host service, not listed
    try:
        domain = entry.format(port=local_server.port)
        config = write_config(tmp_path / "local.json", sandbox_config(network={"allowedDomains": [domain]}))
        async with CodeExecutor(
            sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
        ) as executor:
            result = await probe(
                executor,
                "import os\n" + VIA_PROXY + "print(_json.dumps(["
                f"attempt(lambda: via_proxy('http://{host}:{local_server.port}/listed')),"
                f"attempt(lambda: direct('http://{host}:{local_server.port}/direct')),"
                f"attempt(lambda: via_proxy('http://{host}:{other.port}/other')),"
                "attempt(lambda: via_proxy('http://example.org/')),"
                "]))",
            )
    finally:
        other.close()
    assert result[0] == f"ok: {local_server.body.decode()!r}"
    assert local_server.hits == ["/listed"]
    assert not result[1].startswith("ok")
    if ":" in entry:  # port-specific: the other port stays closed
        assert result[2].startswith("HTTPError: HTTP Error 403"), result[2]
        assert other.hits == []
    else:
        assert result[2] == f"ok: {other.body.decode()!r}"
    assert result[3].startswith("HTTPError: HTTP Error 403")


# --- the host's environment -----------------------------------------------------------------------


async def test_host_environment_secrets_are_invisible(
    srt_available: None, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _unique("secret")
    monkeypatch.setenv("IPYBOX_TEST_SECRET", secret)
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        result = await probe(
            executor,
            "import glob, os\n"
            f"secret, host_pid = {secret!r}.encode(), {os.getpid()}\n"
            "leaks, cmdlines = [], []\n"
            "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n"
            "    try:\n"
            "        data = open(path, 'rb').read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    leaks += [path] if secret in data else []\n"
            "    cmdlines += [data.replace(b'\\0', b' ').decode()] if path.endswith('cmdline') else []\n"
            "print(_json.dumps({\n"
            "    'environ': secret.decode() in _json.dumps(dict(os.environ)),\n"
            "    'leaks': leaks,\n"
            "    'cmdlines': cmdlines,\n"
            "    'host_pid': attempt(lambda: secret in open(f'/proc/{host_pid}/environ', 'rb').read()),\n"
            "    'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode(),\n"
            "    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),\n"
            "}))",
        )
    assert secret in os.environ["IPYBOX_TEST_SECRET"]  # the host has it
    assert result["environ"] is False
    assert result["leaks"] == []
    # our pid names no process in the sandbox's namespace, or one of its own
    assert result["host_pid"].startswith(("FileNotFoundError", "PermissionError", "ok: False"))
    # A PID namespace of its own: its init is bubblewrap, and no host process (pytest) is visible.
    assert os.path.basename(result["pid1"]) == "bwrap"  # run by ipybox's launcher, by its path
    visible = [c.strip() for c in result["cmdlines"]]
    assert " ".join(psutil.Process().cmdline()) not in visible
    assert max(result["pids"]) < 100, result["pids"]  # numbered afresh: only the sandbox's own


# --- approval -------------------------------------------------------------------------------------


_ROGUE_APPROVER = """
import socket, threading
def hello(message):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(os.environ['IPYBOX_TOOL_SERVER'])
    sock.sendall(_json.dumps(message).encode() + b'\\n')
    reply = sock.makefile().readline().strip()
    try:  # answer as an approval client would, whatever the server said
        for i in range(5):
            sock.sendall(_json.dumps({'id': i, 'accepted': True}).encode() + b'\\n')
    except OSError:
        pass
    sock.close()
    return reply
replies = [hello(m) for m in ({'op': 'approve'}, {'op': 'approve', 'token': 'x' * 43},
                              {'op': 'approve', 'token': None}, {'op': 'approve', 'token': ['x']})]
print(_json.dumps(replies))
from mcptools.everything.echo import run, Params
print(run(Params(message='approved by myself')))
"""


async def test_kernel_cannot_approve_its_own_tool_calls(
    executor: CodeExecutor, workspace: Path, everything_params: dict[str, Any]
) -> None:
    await generate_mcp_sources("everything", everything_params, workspace / "mcptools")
    requests: list[ApprovalRequest] = []
    with pytest.raises(CodeExecutionError, match="rejected by the application") as info:
        async for item in executor.stream("import os, json as _json\n" + _ROGUE_APPROVER, timeout=60):
            if isinstance(item, ApprovalRequest):
                requests.append(item)
                await item.reject()
    replies = json.loads(info.value.output.splitlines()[0])
    assert [json.loads(r) for r in replies] == [{"ok": False, "error": "wrong approval token"}] * 4
    assert [(r.server_name, r.tool_name, r.tool_args) for r in requests] == [
        ("everything", "echo", {"message": "approved by myself"})
    ]
    assert "Echo:" not in info.value.output


async def test_kernel_cannot_start_unregistered_servers(
    executor: CodeExecutor, workspace: Path, tmp_path: Path, everything_params: dict[str, Any]
) -> None:
    await generate_mcp_sources("everything", everything_params, workspace / "mcptools")
    marker = tmp_path / "pwned"  # outside the workspace: only the host could create it
    touch = {"command": "touch", "args": [str(marker)]}
    attempts = [
        ("evil", touch),
        ("everything", touch),  # a registered name with other parameters
        ("everything", {**everything_params, "args": ["stdio"], "env": {"NODE_OPTIONS": "--require x"}}),
        ("everything", {"command": "sh", "args": ["-c", f"touch {marker}"]}),
    ]
    code = (
        "import os, socket, json as _json\n"
        "from ipybox.tool_exec.client import ToolRunner\n"
        "def raw(request):\n"
        "    sock = socket.socket(socket.AF_UNIX)\n"
        "    sock.connect(os.environ['IPYBOX_TOOL_SERVER'])\n"
        "    sock.sendall(_json.dumps(request).encode() + b'\\n')\n"
        "    return _json.loads(sock.makefile().readline())\n"
        "def runner(name, params):\n"
        "    try:\n"
        "        return {'ok': True, 'result': ToolRunner(name, params).run_sync('echo', {'message': 'x'})}\n"
        "    except Exception as e:\n"
        "        return {'ok': False, 'error': str(e)}\n"
        f"attempts = {attempts!r}\n"
        "out = [raw({'op': 'run', 'server_name': n, 'server_params': p, 'tool_name': 'echo',"
        " 'tool_args': {'message': 'x'}}) for n, p in attempts]\n"
        "out += [runner(n, p) for n, p in attempts]\n"
        "print(_json.dumps(out))"
    )
    requests = []
    text = ""
    async for item in executor.stream(code, timeout=60):
        if isinstance(item, ApprovalRequest):
            requests.append(item)
            await item.reject()
        else:
            text = item.text
    assert requests == [], "an unregistered server reached the approval step"
    for reply in json.loads(text):
        assert reply["ok"] is False
        assert "not registered" in reply["error"]
    await asyncio.sleep(0.5)
    assert not marker.exists()


# --- leftover processes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario", ["normal", "kernel_killed", "srt_killed", "execution_cancelled", "block_cancelled"]
)
async def test_no_process_outlives_the_executor(
    scenario: str, srt_available: None, workspace: Path, everything_params: dict[str, Any]
) -> None:
    watch = ProcessWatch()
    await generate_mcp_sources("everything", everything_params, workspace / "mcptools")
    await watch.assert_all_gone()  # the generator's server is gone already
    runtime = ""
    in_cell = asyncio.Event()

    async def body() -> None:
        nonlocal runtime
        async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=True) as executor:
            runtime = await run(executor, RUNTIME + "print(runtime)")
            # a tool call leaves an MCP server running in the tool server
            assert (
                await run(
                    executor,
                    "from mcptools.everything.echo import run, Params\nprint(run(Params(message='hi')))",
                )
                == "Echo: hi"
            )
            await until(lambda: len(watch.find("python", "/kernels/")) >= 2)  # kernel + spare
            connection = await run(
                executor, "from ipykernel import get_connection_file\nprint(get_connection_file())"
            )
            assert watch.find("bwrap") and watch.find("socat") and watch.find("node", "srt")
            # a daemon (double fork, own session) that would outlive a kernel killed on its own
            await run(executor, "import subprocess\nsubprocess.run(['sh', '-c', 'setsid sleep 300 &'])")
            await until(lambda: bool(watch.find("sleep", "300")))
            if scenario == "normal":
                return
            task = asyncio.create_task(executor.execute("import time; time.sleep(30)", timeout=60))
            await asyncio.sleep(1)
            if scenario == "kernel_killed":
                [kernel] = watch.find("python", connection)
                kernel.send_signal(signal.SIGKILL)
                # srt's shell wrapper reports the signal as exit code 128 + 9
                with pytest.raises(CodeExecutionError, match="SIGKILL|exited with code 137"):
                    await task
                # the spare took over, sandboxed like the first
                denied = await probe(executor, "print(_json.dumps(attempt(lambda: open('.env').read())))")
                assert denied.startswith("PermissionError"), denied
            elif scenario == "srt_killed":
                [srt] = [p for p in watch.find("node", "srt") if connection in " ".join(p.cmdline())]
                srt.send_signal(signal.SIGKILL)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            elif scenario == "execution_cancelled":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await run(executor, "print('still here')") == "still here"
            elif scenario == "block_cancelled":
                in_cell.set()
                await task  # the test cancels `body` while this waits
                pytest.fail("the cell was not cancelled")

    outer = asyncio.create_task(body())
    if scenario == "block_cancelled":
        await asyncio.wait_for(in_cell.wait(), 60)  # well into the sleeping cell
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
    else:
        await outer
    watch.snapshot()
    assert runtime
    await watch.assert_all_gone(timeout=5, runtime_dir=runtime)
    assert not Path(runtime).exists()

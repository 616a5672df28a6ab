"""Attacks through files a kernel can write that ipybox (outside the sandbox) used to open.

A thread in the kernel keeps replacing files ipybox writes in the workspace (images, generated
modules, the audit log) by a link to a host file, a fifo or `/dev/zero`. ipybox must answer
from what it holds in memory, never read or append through what the kernel planted, and stay
responsive.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from servers.launch import NODE_BIN, require_sandbox

from ipybox import CodeExecutor
from ipybox.mcp_server.homes import Homes, principal_dir
from ipybox.mcp_server.kernels import user_principal
from ipybox.tool_exec.audit import AuditLog

from .conftest import EVERYTHING, Ipybox, images_of, open_ipybox, requires_node, text_of

SECRET = "TOP-SECRET-HOST-LINE"

#: A kernel thread that replaces every regular file matching GLOB by TARGET (a link), a fifo
#: ("fifo") or nothing ("off"), counting its swaps per target in SWAPS.
_SWAPPER = """
import glob, os, stat, threading, time
SWAP = {"glob": None, "target": "off"}
SWAPS = {}
def _replace(path, target):
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
            os.mkfifo(path) if target == "fifo" else os.symlink(target, path)
            SWAPS[target] = SWAPS.get(target, 0) + 1
    except OSError:
        pass
def _swap():
    while True:
        time.sleep(0.001)
        if SWAP["target"] != "off" and SWAP["glob"]:  # (the image test swaps on close only)
            for path in glob.glob(SWAP["glob"]):
                _replace(path, SWAP["target"])
threading.Thread(target=_swap, daemon=True).start()
print("armed")
"""

#: Also swap each image the moment ipybox closes it (inotify), to win the race with the reply.
_ON_CLOSE = """
import ctypes, struct
os.makedirs("images", exist_ok=True)
_libc = ctypes.CDLL(None, use_errno=True)
_watch = _libc.inotify_init()
_libc.inotify_add_watch(_watch, b"images", 0x8)  # IN_CLOSE_WRITE
def _on_close():
    while True:
        events = os.read(_watch, 65536)
        while events:
            length = struct.unpack_from("iIII", events)[3]
            name = events[16 : 16 + length].rstrip(b"\\0").decode()
            events = events[16 + length :]
            if SWAP["target"] != "off":
                _replace("images/" + name, SWAP["target"])
threading.Thread(target=_on_close, daemon=True).start()
print("watching")
"""


#: A 1x1 PNG, made here and in the kernel by the same code.
_PNG_SOURCE = """
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"\\x00\\x00\\x00\\x00")) + chunk(b"IEND", b"")
"""
_DISPLAY = _PNG_SOURCE + "from IPython.display import Image, display\ndisplay(Image(data=png))"


def _png() -> bytes:
    namespace: dict[str, Any] = {}
    exec(_PNG_SOURCE, namespace)
    return bytes(namespace["png"])


def _targets(tmp_path: Path) -> dict[str, str]:
    """The variants: a host file outside the workspace (hidden from a sandboxed kernel), a fifo, /dev/zero."""
    secret = tmp_path / "host-secret.py"
    secret.write_text(f'"""{SECRET}"""\n')
    return {"host file": str(secret), "fifo": "fifo", "/dev/zero": "/dev/zero"}


async def _wait_swapped(box: Ipybox, target: str) -> None:
    """Until the kernel's thread has swapped a file for `target` (the attack took place)."""
    out = await box.output(f"while not SWAPS.get({target!r}): time.sleep(0.01)\nprint(SWAPS[{target!r}])")
    assert int(out) > 0


@contextlib.asynccontextmanager
async def _swapping_ipybox(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[tuple[Ipybox, dict[str, str]]]:
    """`ipybox --sandbox` whose kernel runs the file-swapping thread, and the swap targets."""
    require_sandbox()
    async with open_ipybox(workspace, state_dir, args=["--sandbox"]) as box:
        assert await box.output(_SWAPPER) == "armed"
        yield box, _targets(tmp_path)


async def test_images_come_from_memory_not_the_swapped_files(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    async with _swapping_ipybox(workspace, state_dir, tmp_path) as (box, targets):
        assert await box.output(_ON_CLOSE) == "watching"
        for variant, target in targets.items():
            await box.output(f"SWAP.update(target={target!r})")
            result = await box.run(_DISPLAY)
            assert not result.is_error, (variant, text_of(result), box.stderr())
            images = images_of(result)
            assert [base64.b64decode(i.data) for i in images] == [_png()], variant
            await _wait_swapped(box, target)
            assert await box.output("print('still answering')") == "still answering", variant
    assert SECRET not in box.stderr()


@requires_node
async def test_registration_reply_is_built_from_memory(
    workspace: Path, state_dir: Path, tmp_path: Path
) -> None:
    async with _swapping_ipybox(workspace, state_dir, tmp_path) as (box, targets):
        for variant, target in targets.items():
            await box.output(f"SWAP.update(glob='mcptools/everything/*.py', target={target!r})")
            reply = await box.register("everything", EVERYTHING)
            assert "- echo: Echoes back the input string" in reply, (variant, reply)
            assert SECRET not in reply, variant
            await _wait_swapped(box, target)
            assert await box.output("print('still answering')") == "still answering", variant


def _plant(kind: str, victim: Path) -> str:
    """Kernel code that replaces `.ipybox/audit.jsonl` (or `.ipybox`) by a link or fifo."""
    setup = "import os, shutil\nshutil.rmtree('.ipybox', ignore_errors=True)\n"
    if kind == "dir link":
        return setup + f"os.symlink({str(victim.parent)!r}, '.ipybox')\nprint('planted')"
    setup += "os.makedirs('.ipybox')\n"
    if kind == "file link":
        return setup + f"os.symlink({str(victim)!r}, '.ipybox/audit.jsonl')\nprint('planted')"
    if kind == "hard link":
        return setup + f"os.link({str(victim)!r}, '.ipybox/audit.jsonl')\nprint('planted')"
    return setup + "os.mkfifo('.ipybox/audit.jsonl')\nprint('planted')"


_TOOL_CALL = """
from ipybox.tool_exec.client import ToolRunner
try:
    ToolRunner("nosuch", {}).run_sync("t", {"a": "$(touch PWNED)"})
except Exception as e:
    print(type(e).__name__)
"""


@pytest.mark.parametrize("kind", ["file link", "dir link", "hard link", "fifo"])
async def test_audit_log_is_not_appended_through_what_a_kernel_planted(
    workspace: Path, state_dir: Path, tmp_path: Path, kind: str
) -> None:
    """An unsandboxed kernel plants the link; the next records must not reach the victim."""
    victim = tmp_path / "victim" / "audit.jsonl"  # stands for ~/.bashrc
    victim.parent.mkdir()
    victim.write_text("# my bashrc\n")
    async with open_ipybox(workspace, state_dir, args=["--approval", "auto"]) as box:
        assert await box.output(_plant(kind, victim)) == "planted"
        await box.output(_TOOL_CALL)
        assert await box.output("print('still answering')") == "still answering"
    assert victim.read_text() == "# my bashrc\n"
    assert "not writing the audit log" in box.stderr() and "audit.jsonl" in box.stderr(), box.stderr()


async def test_audit_link_planted_by_an_earlier_sandboxed_session(
    workspace: Path, state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewed chain: a sandboxed kernel of an SDK session without audit log plants the
    link; a later `ipybox --sandbox` session (audit log in the workspace) must not append to it."""
    require_sandbox()
    victim = tmp_path / "victim-profile"
    victim.write_text("# profile\n")
    monkeypatch.setenv("PATH", f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("IPYBOX_STATE_DIR", str(state_dir))
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        planted = await executor.execute(_plant("file link", victim))
    assert planted.text == "planted"
    async with open_ipybox(workspace, state_dir, args=["--sandbox", "--approval", "auto"]) as box:
        await box.output(_TOOL_CALL)
    assert victim.read_text() == "# profile\n"
    assert "not writing the audit log" in box.stderr(), box.stderr()


def test_audit_log_outside_the_workspace_refuses_a_link_too(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "audit.jsonl").symlink_to(victim)
    log = AuditLog(tmp_path / "logs" / "audit.jsonl", trusted=tmp_path / "workspace")
    log.decided(server_name="s", tool_name="t", decision="accepted", by="test")
    assert victim.read_text() == "x\n"
    fresh = AuditLog(tmp_path / "logs" / "new" / "audit.jsonl", trusted=tmp_path / "workspace")
    fresh.decided(server_name="s", tool_name="t", decision="accepted", by="test")
    assert '"decision": "accepted"' in (tmp_path / "logs" / "new" / "audit.jsonl").read_text()


def test_principal_directories_never_collide(tmp_path: Path) -> None:
    """A name that looks like another's hashed directory, or differs only in case, gets its own."""
    unsafe = "alice@example.com"
    hashed = principal_dir(unsafe)
    names = [unsafe, hashed, hashed.lstrip("_"), hashed[1:25], "Alice", "alice", "ALICE", "_alice", "a" * 65]
    dirs = [principal_dir(n) for n in names]
    assert len(set(dirs)) == len(names), dict(zip(names, dirs, strict=True))
    homes = Homes(tmp_path)
    paths = {homes.workspace(user_principal(n)) for n in names}
    assert len(paths) == len(names) and all(p.is_dir() and p.parent == tmp_path / "users" for p in paths)
    assert principal_dir("bob") == "bob"  # plain names keep their documented directory


def test_principal_directory_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ws" / "users").mkdir(parents=True)
    (tmp_path / "ws" / "users" / "bob").symlink_to(elsewhere)
    with pytest.raises(PermissionError, match="ipybox did not make it"):
        Homes(tmp_path / "ws").workspace(user_principal("bob"))
    assert not os.listdir(elsewhere)
    (tmp_path / "ws" / "users").rename(tmp_path / "ws" / "old")
    (tmp_path / "ws" / "users").symlink_to(elsewhere)  # the tree itself
    with pytest.raises(PermissionError, match="symbolic link"):
        Homes(tmp_path / "ws").workspace(user_principal("carol"))
    assert not os.listdir(elsewhere)

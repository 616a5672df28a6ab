"""The bubblewrap launcher (`ipybox.sandbox.launcher`): the real script, run with the argument
lists srt passes, and, under a real sandbox, the System V IPC namespace it adds."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import platform
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import sandbox_policy
from ipybox.sandbox.launcher import ISOLATION_FLAGS, REFUSED, write_launcher

from .conftest import probe, sandbox_config, write_config

Done = subprocess.CompletedProcess[str]

#: srt's wrapped command's tail: what the launcher puts ipybox's flags in front of.
TAIL = ["--", "/bin/bash", "-c", "exec 'python3' \"$x\" -- --dev /dev"]


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    """A stand-in for bwrap that prints each argument it gets on a line of its own."""
    path = tmp_path / "fake-bwrap"
    path.write_text("#!/bin/sh\nfor a do printf '%s\\n' \"$a\"; done\n")
    path.chmod(0o700)
    return path


def launch(launcher: Path, args: list[str], env: dict[str, str] | None = None) -> Done:
    return subprocess.run([str(launcher), *args], capture_output=True, text=True, env=env or {}, timeout=30)


def test_flags_go_after_srts_mounts_and_before_the_command(tmp_path: Path, recorder: Path) -> None:
    binds = ["--dev-bind", "/dev/fuse", "/dev/fuse"]
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64", "ODD": "a b'c $(id) ${HOME}"}
    launcher = write_launcher(tmp_path / "bwrap", str(recorder), binds, env)
    assert stat.S_IMODE(launcher.stat().st_mode) == 0o500
    # as srt calls it: mounts (here many, with shell syntax in them), its fresh /dev, the command
    mounts = [w for i in range(150) for w in ("--ro-bind", f"/p {i} $(id)", f"/p {i} $(id)")]
    head = ["--unshare-net", *mounts, "--dev", "/dev", "--unshare-pid", "--proc", "/proc"]
    cases = (("/opt/lib", "/usr/local/nvidia/lib64:/opt/lib"), (None, env["LD_LIBRARY_PATH"]))
    for inherited, library_path in cases:
        done = launch(launcher, [*head, *TAIL], {} if inherited is None else {"LD_LIBRARY_PATH": inherited})
        assert done.returncode == 0, done.stderr
        setenv = ["--setenv", "LD_LIBRARY_PATH", library_path, "--setenv", "ODD", env["ODD"]]
        assert done.stdout.split("\n")[:-1] == [*head, *ISOLATION_FLAGS, *binds, *setenv, *TAIL]
    # srt's `--args FD` form (mounts in a file): the tail stays on the command line
    head = ["--unshare-net", "--args", "9", "--dev", "/dev"]
    done = launch(launcher, [*head, *TAIL])
    setenv = ["--setenv", "LD_LIBRARY_PATH", env["LD_LIBRARY_PATH"], "--setenv", "ODD", env["ODD"]]
    assert done.stdout.split("\n")[:-1] == [*head, *ISOLATION_FLAGS, *binds, *setenv, *TAIL]


def test_srts_probe_goes_through_unchanged(tmp_path: Path, recorder: Path) -> None:
    launcher = write_launcher(tmp_path / "bwrap", str(recorder), ["--dev-bind", "/dev/fuse", "/dev/fuse"])
    probe_args = ["--unshare-user", "--dev-bind", "/", "/", "true"]
    done = launch(launcher, probe_args)
    assert (done.returncode, done.stdout.split()) == (0, probe_args)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--dev", "/dev"],
        ["--dev", "/dev", "--", "/bin/bash", "-c"],  # no command
        ["--dev", "/dev", "--", "/bin/bash", "-c", "true", "extra"],  # something after the command
        ["--dev", "/dev", "/bin/bash", "-c", "true"],  # no `--`
        ["--dev", "/dev", "--", "/bin/bash", "-lc", "true"],
        ["--unshare-user", "--dev-bind", "/", "/", "sh"],  # looks like the probe, runs something else
    ],
)
def test_an_unknown_command_line_is_refused(tmp_path: Path, recorder: Path, args: list[str]) -> None:
    launcher = write_launcher(tmp_path / "bwrap", str(recorder))
    done = launch(launcher, args)
    assert done.returncode == REFUSED and done.stdout == ""
    assert "refusing to start the sandbox" in done.stderr and "sandbox-runtime version" in done.stderr


def test_policy_runs_srt_through_the_launcher(srt_available: None, tmp_path: Path) -> None:
    """The policy names the launcher as srt's bwrap; the launcher runs the real bwrap."""
    runtime, private, workspace = tmp_path / "rt", tmp_path / "rt" / "k", tmp_path / "ws"
    for path in (runtime, private, workspace):
        path.mkdir(mode=0o700)
    config = write_config(tmp_path / "policy.json", sandbox_config() | {"devices": ["/dev/null"]})
    handed = sandbox_policy(config, runtime / "sandbox-0.json", private, workspace)
    assert handed == (runtime / "sandbox-0.json").read_bytes()  # what srt reads, also kept on file
    policy = json.loads(handed)
    launcher = Path(policy["bwrapPath"])
    assert launcher == runtime / "sandbox-0.bwrap" and stat.S_IMODE(launcher.stat().st_mode) == 0o500
    assert "devices" not in policy  # ipybox's setting, not srt's: in the launcher instead
    bwrap = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True, text=True).stdout.strip()
    script = launcher.read_text()
    assert (
        f"exec {bwrap} " in script and f"{' '.join(ISOLATION_FLAGS)} --dev-bind /dev/null /dev/null" in script
    )
    assert script.rstrip().endswith(f"8<{launcher}.seccomp") == ("--seccomp" in ISOLATION_FLAGS)


# --- System V IPC: a host process's objects, attacked from a sandboxed kernel ---------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_IPC_CREAT, _IPC_RMID = 0o1000, 0
SECRET = b"ipybox-sysv-secret-3e1"


@pytest.fixture
def host_ipc() -> Iterator[dict[str, int]]:
    """A shared memory segment (holding `SECRET`), a semaphore set and a message queue of the
    host, by key and id, open to everyone (mode 0666): only the namespace keeps a kernel out."""
    key = 0x1B0C5EED
    shm = _libc.shmget(key, 4096, _IPC_CREAT | 0o666)
    sem = _libc.semget(key + 1, 1, _IPC_CREAT | 0o666)
    msg = _libc.msgget(key + 2, _IPC_CREAT | 0o666)
    assert min(shm, sem, msg) >= 0, os.strerror(ctypes.get_errno())
    address = _libc.shmat(shm, None, 0)
    ctypes.memmove(address, SECRET, len(SECRET))
    try:
        yield {"key": key, "shm": shm, "sem": sem, "msg": msg}
    finally:
        _libc.shmdt(ctypes.c_void_p(address))
        _libc.shmctl(shm, _IPC_RMID, None)
        _libc.semctl(sem, 0, _IPC_RMID)
        _libc.msgctl(msg, _IPC_RMID, None)


#: Defines `libc` and `errno_of(call)` in the kernel: the errno a failed libc call set, or "ok".
KERNEL_LIBC = """
import ctypes, ctypes.util, os, errno, subprocess
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.shmat.restype = ctypes.c_void_p
def errno_of(result):
    failed = result in (-1, None, ctypes.c_void_p(-1).value)
    return errno.errorcode[ctypes.get_errno()] if failed else "ok"
"""


async def test_host_sysv_ipc_is_out_of_reach(executor: CodeExecutor, host_ipc: dict[str, int]) -> None:
    key, shm, sem, msg = host_ipc["key"], host_ipc["shm"], host_ipc["sem"], host_ipc["msg"]
    found = await probe(
        executor,
        KERNEL_LIBC
        + f"""
buf = ctypes.create_string_buffer(64)
print(_json.dumps({{
    "ns": os.readlink("/proc/self/ns/ipc"),
    "shm_by_key": errno_of(libc.shmget({key}, 0, 0)),
    "shm_attach_by_id": errno_of(libc.shmat({shm}, None, 0)),
    "shm_stat_by_id": errno_of(libc.shmctl({shm}, 2, buf)),
    "shm_remove_by_id": errno_of(libc.shmctl({shm}, 0, None)),
    "sem_by_key": errno_of(libc.semget({key + 1}, 0, 0)),
    "sem_op_by_id": errno_of(libc.semctl({sem}, 0, 16, 5)),
    "msg_by_key": errno_of(libc.msgget({key + 2}, 0)),
    "msg_send_by_id": errno_of(libc.msgsnd({msg}, b"\\x01\\0\\0\\0\\0\\0\\0\\0x", 1, 0o4000)),
    "msg_remove_by_id": errno_of(libc.msgctl({msg}, 0, None)),
    "listed": [open(f"/proc/sysvipc/{{k}}").read().count("\\n") - 1 for k in ("shm", "sem", "msg")],
    "ipcs": subprocess.run(["ipcs"], capture_output=True, text=True).stdout,
    "own_segment": errno_of(libc.shmget({key}, 4096, 0o1666)),
}}))
""",
    )
    assert found["ns"] != os.readlink("/proc/self/ns/ipc")
    by_key = {k: v for k, v in found.items() if k.endswith("_by_key")}
    assert by_key == dict.fromkeys(by_key, "ENOENT")
    by_id = {k: v for k, v in found.items() if k.endswith("_by_id")}
    assert by_id == dict.fromkeys(by_id, "EINVAL")
    assert found["listed"] == [0, 0, 0] and hex(key)[2:] not in found["ipcs"]
    # the kernel's own segment under the same key is a different one: the host's is untouched
    assert found["own_segment"] == "ok"
    address = _libc.shmat(shm, None, 0x1000)  # SHM_RDONLY
    assert ctypes.string_at(address, len(SECRET)) == SECRET
    _libc.shmdt(ctypes.c_void_p(address))
    assert _libc.semctl(sem, 0, 12) == 0  # GETVAL: still 0, not the 5 the kernel tried to set


# --- Kernel keyrings: the host's session keyring, attacked from a sandboxed kernel ---------------

#: add_key, request_key and keyctl, by machine.
_KEY_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}
_KEY_SECRET = b"ipybox-keyring-secret-81d"


@pytest.fixture
def host_key() -> Iterator[tuple[int, int]]:
    """A key holding `_KEY_SECRET` in a session keyring of this process's own, as a login gets
    from `pam_keyinit` (Kerberos keeps tickets there): the ids of the keyring and the key."""
    calls = _KEY_CALLS.get(platform.machine())
    if calls is None:
        pytest.skip(f"no keyring system call numbers for {platform.machine()}")
    add_key, _, keyctl = calls
    session = _libc.syscall(keyctl, 1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a new anonymous one
    key = _libc.syscall(add_key, b"user", b"ipybox-test", _KEY_SECRET, len(_KEY_SECRET), ctypes.c_int(-3))
    assert min(session, key) > 0, os.strerror(ctypes.get_errno())
    try:
        yield session, key
    finally:
        _libc.syscall(keyctl, 3, key)  # KEYCTL_REVOKE


def _read_key(key: int) -> bytes:
    buffer = ctypes.create_string_buffer(64)
    size = _libc.syscall(_KEY_CALLS[platform.machine()][2], 11, key, buffer, 64)  # KEYCTL_READ
    return buffer.raw[: max(size, 0)]


async def test_host_keyrings_are_out_of_reach(host_key: tuple[int, int], workspace: Path) -> None:
    """The kernel inherits the host's session keyring, but can neither read its keys (found by
    name or by id), nor change them, nor plant keys the host then finds, nor link the keyring
    into one of its own, nor ask the host's kernel for a key (an upcall runs on the host)."""
    session, key = host_key
    add_key, request_key, keyctl = _KEY_CALLS[platform.machine()]
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        found = await probe(
            executor,
            KERNEL_LIBC
            + f"""
buf = ctypes.create_string_buffer(64)
S = ctypes.c_int(-3)  # KEY_SPEC_SESSION_KEYRING
print(_json.dumps({{
    "session_id": errno_of(libc.syscall({keyctl}, 0, S, 0)),
    "search": errno_of(libc.syscall({keyctl}, 10, S, b"user", b"ipybox-test", 0)),
    "read_by_id": errno_of(libc.syscall({keyctl}, 11, {key}, buf, 64)),
    "update_by_id": errno_of(libc.syscall({keyctl}, 2, {key}, b"forged", 6)),
    "plant": errno_of(libc.syscall({add_key}, b"user", b"planted", b"x", 1, S)),
    "link_keyring": errno_of(libc.syscall({keyctl}, 8, {session}, ctypes.c_int(-2), 0)),
    "upcall": errno_of(libc.syscall({request_key}, b"user", b"ipybox-upcall", b"x", 0)),
    "listed": attempt(lambda: open("/proc/keys").read()),
}}))
""",
        )
    listed = found.pop("listed")
    assert found == dict.fromkeys(found, "EPERM")
    assert "ipybox-test" not in listed
    assert _read_key(key) == _KEY_SECRET  # unchanged
    planted = _libc.syscall(_KEY_CALLS[platform.machine()][2], 10, ctypes.c_int(-3), b"user", b"planted", 0)
    assert planted == -1

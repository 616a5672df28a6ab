"""Attack tests: users' homes (`WORKSPACE/users/NAME`) are made by ipybox, never taken over, and
out of every other kernel's reach; no authenticated name is the local principal.

A kernel that could write the workspace before (the local principal's, of a stdio session)
pre-seeds a home with a `.env`, `mcptools/` or files for its user's kernel to use: the home is
refused, with what to do. Once the server has recorded the tree, a sandboxed local kernel can
neither read, change, replace nor pre-seed a home. A token-file user or JWT subject spelled like
the local principal gets a home of its own. `.env` values are taken literally (no `${VAR}`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from security.test_kernel_env import hostile_env
from servers.launch import SANDBOX_PATH, require_sandbox, sandbox_unavailable

from ipybox import CodeExecutor
from ipybox.mcp_server.auth import JwtVerifier, TokenFile
from ipybox.mcp_server.homes import Homes
from ipybox.mcp_server.kernels import LOCAL, shown, user_principal
from ipybox.sandbox.owned import HomeError

from .conftest import open_ipybox, running_http_ipybox, text_of
from .test_jwt import AUDIENCE, ISSUER, _jwks, token

#: What a kernel leaves for a user before the user's first arrival, one home per route.
_SEEDS = {
    "bob": {".env": "KERNEL_ENV_NODE_OPTIONS=--require ./x.js\n"},
    "carol": {"mcptools/__init__.py": "", "mcptools/x.py": "print('kernel-written')\n"},
    "dave": {"notes.txt": "plausible\n"},
}
_SEED = """
import os
for name, files in {seeds}.items():
    for rel, text in files.items():
        path = os.path.join("users", name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write(text)
os.symlink("..", "users/erin")  # a home that is the workspace itself
print(sorted(os.listdir("users")))
"""
#: After the tree is recorded: each way a local kernel might reach grace's home, and its outcome.
_REACH = """
import os
def attempt(what, action):
    try:
        action()
        return f"{what}: done"
    except OSError as e:
        return f"{what}: {type(e).__name__}"
g = "users/grace"
results = [
    attempt("read", lambda: open(g + "/secret.txt").read()),
    attempt("list", lambda: os.listdir(g)),
    attempt("env", lambda: open(g + "/.env", "w").write("KERNEL_ENV_X=1\\n")),
    attempt("mcptools", lambda: os.makedirs(g + "/mcptools/evil")),
    attempt("replace", lambda: os.rename(g, "grace-old")),
    attempt("seed", lambda: os.makedirs("users/heidi/mcptools")),
]
print(results)
"""


def test_homes_ipybox_did_not_make_are_refused(tmp_path: Path) -> None:
    """Pre-seeded, linked or replaced homes, also in a replaced tree: refused with the path and what
    to do; moved away or removed, a fresh home is made."""
    homes = Homes(tmp_path / "ws")
    users = tmp_path / "ws" / "users"
    for name, files in _SEEDS.items():
        for rel, text in files.items():
            (users / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (users / name / rel).write_text(text)
    (users / "erin").symlink_to(tmp_path)
    (users / "frank").write_text("a file, not a home\n")
    for name in [*_SEEDS, "erin", "frank"]:
        with pytest.raises(HomeError, match="ipybox did not make it") as refused:
            homes.workspace(user_principal(name))
        assert str(users / name) in str(refused.value) and "mv " in str(refused.value)
    (users / "bob").rename(tmp_path / "bob.old")  # what the operator is told to do
    bob = homes.workspace(user_principal("bob"))
    assert bob == users / "bob" and os.listdir(bob) == []
    assert homes.workspace(user_principal("bob")) == bob  # its own home, again
    bob.rename(tmp_path / "bob.swapped")
    bob.mkdir()
    with pytest.raises(HomeError, match="replaced since"):
        homes.workspace(user_principal("bob"))
    bob.rmdir()  # a home removed: a fresh one
    assert homes.workspace(user_principal("bob")) == bob and os.listdir(bob) == []
    users.rename(tmp_path / "users.swapped")  # the tree replaced, with a home planted in it
    (users / "bob").mkdir(parents=True)
    with pytest.raises(HomeError, match="ipybox did not make it"):
        homes.workspace(user_principal("bob"))
    assert os.listdir(homes.workspace(user_principal("grace"))) == []


async def test_local_kernel_cannot_seed_or_reach_users_homes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandboxed kernel of the local principal (working dir: the whole workspace)."""
    require_sandbox()
    monkeypatch.setenv("PATH", SANDBOX_PATH)
    monkeypatch.delenv("IPYBOX_SRT", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    homes = Homes(workspace)
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as local:
        # before any server with users ran on this workspace: it plants homes
        seeded = await local.execute(_SEED.format(seeds=_SEEDS))
        assert seeded.text == str(sorted([*_SEEDS, "erin"]))
        homes.prepare()  # an ipybox with users starts
        for name in [*_SEEDS, "erin"]:
            with pytest.raises(HomeError, match="ipybox did not make it"):
                homes.workspace(user_principal(name))
        grace = homes.workspace(user_principal("grace"))
        (grace / "secret.txt").write_text("grace's\n")
        await local.reset()  # a kernel started after the tree was recorded
        reached = await local.execute(_REACH)
    # it sees an empty stand-in for the tree: what it writes there never reaches the host
    outcomes = dict(line.split(": ") for line in eval(reached.text or ""))
    assert outcomes["read"] != "done" and outcomes["list"] != "done", outcomes
    assert os.listdir(grace) == ["secret.txt"] and sorted(os.listdir(workspace / "users")) == [
        *_SEEDS,
        "erin",
        "grace",
    ]
    assert homes.workspace(user_principal("grace")) == grace
    assert os.listdir(homes.workspace(user_principal("heidi"))) == []  # a fresh one
    wide = tmp_path / "wide.json"  # a policy letting grace's kernel write the other homes
    wide.write_text(json.dumps({"filesystem": {"allowWrite": ["..", "."]}}))
    with pytest.raises(Exception, match="holds the homes of other users"):
        async with CodeExecutor(sandbox=True, working_dir=grace, sandbox_config=wide, spare_kernel=False):
            pass


#: Spellings of the local principal's name that a token file or an identity provider may use.
_LOCAL_NAMES = ["local", "LOCAL", "Local", "ｌｏｃａｌ", "local\u200b", "local\x00", "users", ""]


async def test_no_user_name_is_the_local_principal(tmp_path: Path) -> None:
    """Through the verifiers (a token file, a signed JWT), every spelling gets its own home."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    homes = Homes(workspace)
    tokens = tmp_path / "tokens"
    tokens.write_text("local local-token-0123456789\nLOCAL upper-token-0123456789\n")
    (tmp_path / "jwks.json").write_text(_jwks())
    verifiers = TokenFile(tokens), JwtVerifier(ISSUER, AUDIENCE, str(tmp_path / "jwks.json"))
    names = [
        (await verifiers[0].verify_token(t)) for t in ("local-token-0123456789", "upper-token-0123456789")
    ]
    names += [await verifiers[1].verify_token(token(sub=sub)) for sub in _LOCAL_NAMES]
    principals = [user_principal(access.client_id) for access in names if access is not None]
    assert len(principals) == 2 + len(_LOCAL_NAMES) and LOCAL not in principals
    dirs = {homes.workspace(p) for p in principals}
    assert len(dirs) == len(set(principals)) and all(d.parent == workspace / "users" for d in dirs)
    assert homes.workspace(LOCAL) == workspace


async def test_no_user_name_reads_as_another_principal_in_the_audit_log(tmp_path: Path) -> None:
    """The audit log's `by` (shared with `--audit-log` or `--shared-workspace`) names whoever
    decided: no token-file name or JWT subject reads as the local principal or as another user."""
    tokens = tmp_path / "tokens"
    tokens.write_text("local local-token-0123456789\nalice alice-token-0123456789\n")
    (tmp_path / "jwks.json").write_text(_jwks())
    verifiers = TokenFile(tokens), JwtVerifier(ISSUER, AUDIENCE, str(tmp_path / "jwks.json"))
    found = [await verifiers[0].verify_token(t) for t in ("local-token-0123456789", "alice-token-0123456789")]
    lookalikes = ["alice) through the client; (bob", "\u0430lice", "alice\u200b", "alice ", "alice\n"]
    found += [await verifiers[1].verify_token(token(sub=sub)) for sub in [*_LOCAL_NAMES, *lookalikes]]
    principals = [LOCAL, *(user_principal(access.client_id) for access in found if access is not None)]
    assert len(principals) == 3 + len(_LOCAL_NAMES) + len(lookalikes)
    by = [f"user ({shown(p)}) through the client" for p in principals]
    assert len(set(by)) == len(set(principals)), by  # the token user and the subject `local` are one
    assert by[:3] == [f"user ({n}) through the client" for n in ("local", '"local"', "alice")]
    assert all(s.isprintable() and s.isascii() for s in by), by


async def test_token_user_named_local_works_in_its_own_home_without_the_local_env(tmp_path: Path) -> None:
    """The whole route: a token-file user called `local` runs code in WORKSPACE/users/local, with
    the `.env` of that home; the workspace's own `.env` (the local principal's secrets) reaches
    neither the user's kernel (KERNEL_ENV_*) nor the user's `${VAR}`s (also through --allow-env)."""
    from .test_clients import connect, output

    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    (workspace / "local-only.txt").write_text("the local principal's\n")
    (workspace / ".env").write_text("KERNEL_ENV_OWNER_SECRET=owner-s3cret\nOWNER_TOKEN=owner-token\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("local local-token-0123456789\n")
    args = ["--auth-tokens", str(tokens), "--allow-env", "OWNER_TOKEN", "--spare-kernels", "0"]
    with running_http_ipybox(workspace, state, tmp_path / "log", args=args) as (_, url):
        async with connect(url, "local-token-0123456789", "auto") as client:
            made = await client.call_tool("install_package", {"package_name": "-r x"})  # makes the home
            assert made.is_error and "--shared-trust" in text_of(made)
            (workspace / "users" / "local" / ".env").write_text("KERNEL_ENV_OWN=mine\nOWN_TOKEN=t\n")
            code = "import os; print(os.getcwd(), os.path.exists('local-only.txt'), "
            seen = await output(client, code + "os.environ.get('OWNER_SECRET'), os.environ.get('OWN'))")
            for variable in ("OWNER_TOKEN", "OWN_TOKEN"):
                params = {"url": "http://127.0.0.1:9/mcp", "headers": {"X": f"${{{variable}}}"}}
                said = text_of(
                    await client.call_tool(
                        "register_mcp_server", {"server_name": "s", "server_params": params}
                    )
                )
                assert ("cannot be filled" in said) == (variable == "OWNER_TOKEN"), said
    assert seen == f"{workspace / 'users' / 'local'} False None mine"


async def test_env_file_values_reach_the_kernel_alone_and_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`${VAR}` in `.env` copies no variable of ipybox's environment into a kernel (homes and the
    CLI), and `KERNEL_ENV_NODE_OPTIONS`, `_PATH`, `_LD_PRELOAD`, … there run nothing on the host
    (through the whole server, sandboxed where a sandbox can run)."""
    env_text = (
        "KERNEL_ENV_A=${SECRET}\nKERNEL_ENV_B=${HOME}/x\nKERNEL_ENV_C=$SECRET\nKERNEL_ENV_D=${SECRET:-d}\n"
    )
    literal = {"A": "${SECRET}", "B": "${HOME}/x", "C": "$SECRET", "D": "${SECRET:-d}"}
    monkeypatch.setenv("SECRET", "host-secret")
    (tmp_path / "ws").mkdir()
    homes = Homes(tmp_path / "ws")
    (homes.workspace(user_principal("bob")) / ".env").write_text(env_text)
    assert {k: v for k, v in homes.kernel_env(user_principal("bob")).items() if k in literal} == literal
    workspace, marker = tmp_path / "stdio-ws", tmp_path / "host-ran"
    workspace.mkdir()
    hostile = hostile_env(workspace, marker)
    (workspace / ".env").write_text(env_text + "".join(f"KERNEL_ENV_{k}={v}\n" for k, v in hostile.items()))
    args = [] if sandbox_unavailable() else ["--sandbox"]
    async with open_ipybox(workspace, tmp_path / "state", args=args, env={"SECRET": "host-secret"}) as ipybox:
        names = [*literal, *hostile]
        seen = json.loads(
            await ipybox.output(f"import json, os; print(json.dumps({{k: os.environ[k] for k in {names}}}))")
        )
    assert seen.pop("PATH").endswith(hostile.pop("PATH")) and seen == literal | hostile
    assert not marker.exists() or not args, marker.read_text()


def test_each_principal_has_its_own_notebooks(tmp_path: Path) -> None:
    """Notebooks lie in the principal's own home; in a shared workspace, users' apart by name."""
    bob, odd = user_principal("bob"), user_principal("Bob@example.com")
    homes = Homes(tmp_path)
    assert homes.notebook(LOCAL, "default") == tmp_path / ".ipybox" / "notebooks" / "default.ipynb"
    assert homes.notebook(bob, "k") == tmp_path / "users" / "bob" / ".ipybox" / "notebooks" / "k.ipynb"
    shared = Homes(tmp_path, shared=True)
    paths = [shared.notebook(p, "default") for p in (LOCAL, bob, odd)]
    assert len(set(paths)) == 3 and all(p.is_relative_to(tmp_path / ".ipybox" / "notebooks") for p in paths)
    assert paths[1] == tmp_path / ".ipybox" / "notebooks" / "users" / "bob" / "default.ipynb"

"""The `ipybox` command: help, and failing fast with a clear message on bad options."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

IPYBOX = Path(sys.executable).parent / "ipybox"
OPTIONS = [
    *("--workspace", "--sandbox", "--sandbox-config", "--sandbox-gpus", "--transport", "--host", "--port"),
    "--log-level",
    *("--approval", "--approve-shell-cmds", "--kernel-idle-timeout", "--max-kernels", "--auth-tokens"),
    *("--jwt-issuer", "--jwt-audience", "--jwks", "--shared-workspace", "--public-url"),
    *("--no-auth", "--shared-trust", "--spare-kernels", "--resume"),
]

pytestmark = pytest.mark.timeout(60)

HTTP = ["--transport", "streamable-http"]


def ipybox(*args: str, cwd: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run the command with stdin open (a server would wait on it) and a clean environment."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ["HOME"]}
    if cwd is not None:
        env["IPYBOX_STATE_DIR"] = str(cwd / "state")
    return subprocess.run(
        [str(IPYBOX), *args],
        input="",  # EOF: a server that starts by mistake exits instead of hanging
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def test_console_script_is_installed() -> None:
    assert IPYBOX.is_file()


def test_help_mentions_every_option() -> None:
    result = ipybox("--help")

    assert result.returncode == 0, result.stderr
    for option in OPTIONS:
        assert option in result.stdout, option
    for word in ["register_mcp_server", "execute_ipython_cell", "KERNEL_ENV_", ".env", "streamable-http"]:
        assert word in result.stdout, word


def test_module_entry_point_has_the_same_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ipybox.mcp_server", "--help"], capture_output=True, text=True, timeout=30
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == ipybox("--help").stdout


def test_missing_sandbox_config_fails_before_serving(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.json"
    result = ipybox(
        "--workspace", str(tmp_path / "ws"), "--sandbox", "--sandbox-config", str(missing), cwd=tmp_path
    )

    assert result.returncode != 0
    assert str(missing) in result.stderr
    assert "not found" in result.stderr.lower()
    assert result.stdout == ""  # nothing was served
    assert "Traceback" not in result.stderr


def test_invalid_sandbox_config_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text("{not json")
    result = ipybox(
        "--workspace", str(tmp_path / "ws"), "--sandbox", "--sandbox-config", str(config), cwd=tmp_path
    )

    assert result.returncode != 0
    assert str(config) in result.stderr and "JSON" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["read-only directory", "kernel filesystem"])
def test_workspace_this_user_cannot_write_is_refused(kind: str, tmp_path: Path) -> None:
    """Else ipybox would start and only its tools would fail, with "Error executing tool"."""
    if kind == "read-only directory":
        if os.geteuid() == 0:
            pytest.skip("root writes a read-only directory")
        workspace = tmp_path / "ws"
        workspace.mkdir(mode=0o555)
    else:
        workspace = Path("/sys")  # no user may create files there, root included
    result = ipybox("--workspace", str(workspace), cwd=tmp_path)

    assert result.returncode != 0
    assert f"cannot use {workspace} as the workspace" in result.stderr
    assert "a directory you can write" in result.stderr and "Traceback" not in result.stderr
    assert not [p.name for p in workspace.iterdir() if p.name.startswith(".ipybox")]


def test_workspace_that_is_a_file_is_refused(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    result = ipybox("--workspace", str(not_a_dir), cwd=tmp_path)

    assert result.returncode != 0
    assert str(not_a_dir) in result.stderr and "not a directory" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--transport", "sse2"], "--transport"),
        (["--port", "eighty"], "--port"),
        (["--port", "70000"], "not a port"),
        (["--log-level", "LOUD"], "--log-level"),
        (["--no-such-option"], "--no-such-option"),
    ],
)
def test_bad_option_values_are_usage_errors(tmp_path: Path, args: list[str], word: str) -> None:
    result = ipybox(*args, cwd=tmp_path)

    assert result.returncode == 2
    assert word in result.stderr and "usage: ipybox" in result.stderr


def test_port_in_use_fails_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = ipybox(
            "--workspace",
            str(tmp_path / "ws"),
            "--transport",
            "streamable-http",
            "--port",
            str(port),
            cwd=tmp_path,
        )

    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ipybox: cannot listen on 127.0.0.1:{port}: "), lines
    assert "address already in use" in lines[0].lower() and "--port" in lines[0]


def _first_lines(args: list[str], count: int) -> list[str]:
    """The first `count` lines a started `ipybox ARGS` writes on stderr; it is stopped after."""
    with subprocess.Popen(
        [str(IPYBOX), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stderr is not None
        try:
            return [process.stderr.readline() for _ in range(count)]
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_http_server_says_where_it_listens(tmp_path: Path) -> None:
    port = _free_port()
    [first] = _first_lines(
        ["--workspace", str(tmp_path), "--transport", "streamable-http", "--port", str(port)], 1
    )
    assert first.startswith(f"ipybox: serving MCP at http://127.0.0.1:{port}/mcp for the workspace "), first


def test_stdio_server_started_in_a_terminal_says_what_it_waits_for(tmp_path: Path) -> None:
    """By hand in a terminal a stdio server would wait silently; clients (no terminal) get no line."""
    controller, terminal = os.openpty()
    with subprocess.Popen(
        [str(IPYBOX), "--workspace", str(tmp_path)], stdin=terminal, stderr=subprocess.PIPE, text=True
    ) as process:
        os.close(terminal)
        assert process.stderr is not None
        try:
            first = process.stderr.readline()
        finally:
            process.terminate()
            process.wait(timeout=30)
            os.close(controller)
    assert first.startswith("ipybox: MCP server on stdio for the workspace "), first
    assert "Ctrl-C" in first
    assert ipybox("--workspace", str(tmp_path), cwd=tmp_path).stderr == ""  # stdin no terminal: silent


def test_stdio_server_creates_the_workspace_and_exits_on_eof(tmp_path: Path) -> None:
    workspace = tmp_path / "new" / "workspace"
    result = ipybox("--workspace", str(workspace), cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert workspace.is_dir()
    assert result.stdout == ""


def test_version_is_the_package_version() -> None:
    import importlib.metadata

    result = ipybox("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ipybox {importlib.metadata.version('ipybox')}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--sandbox-config", "policy.json"], ["--sandbox-config", "--sandbox"]),
        (["--approval", "missing-rules.toml"], ["missing-rules.toml", "cannot read"]),
        (["--approval", "rules.toml"], ["rules.toml", "rule 1", "action"]),
        (["--max-kernels", "0"], ["--max-kernels"]),
        (["--kernel-gateway", "http://127.0.0.1:PORT"], ["--kernel-gateway", "cannot reach"]),
        (["--kernel-gateway", "not a url"], ["--kernel-gateway"]),
        (["--transport", "streamable-http", "--host", "0.0.0.0"], ["0.0.0.0", "--auth-tokens"]),
        (["--transport", "streamable-http", "--auth-tokens", "tokens"], ["tokens", "line 1"]),
        (["--transport", "streamable-http", "--auth-tokens", "none.txt"], ["none.txt", "cannot read"]),
        (["--transport", "streamable-http", "--jwt-issuer", "https://idp"], ["--jwt-audience", "--jwks"]),
        (["--auth-tokens", "tokens"], ["streamable-http"]),
        (["--no-auth"], ["streamable-http"]),
        ([*HTTP, "--no-auth", "--host", "0.0.0.0"], ["--no-auth", "0.0.0.0"]),
        ([*HTTP, "--no-auth", "--host", "::"], ["--no-auth on ::", "127.0.0.1"]),
        ([*HTTP, "--no-auth", "--auth-tokens", "team"], ["--no-auth", "choose"]),
        ([*HTTP, "--auth-tokens", "team"], ["several users", "--sandbox", "--shared-trust", "/proc"]),
        (["--spare-kernels", "-1"], ["--spare-kernels"]),
    ],
)
def test_bad_configuration_fails_at_start_with_the_cause(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    (tmp_path / "policy.json").write_text("{}")
    (tmp_path / "rules.toml").write_text('[[rule]]\nserver = "github"\naction = "maybe"\n')
    (tmp_path / "tokens").write_text("alice\n")
    (tmp_path / "team").write_text("alice alice-token-0123456789\nbob bob-token-0123456789\n")
    args = [a.replace("PORT", str(_free_port())) for a in args]
    result = ipybox("--workspace", str(tmp_path / "ws"), *args, cwd=tmp_path)

    assert result.returncode != 0, result.stderr
    assert result.stderr.startswith("ipybox: "), result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("name", "option", "content"),
    [
        ("approval.toml", ["--approval"], '[[rule]]\nserver = "*"\naction = "allow"\n'),
        (".ipybox/rules.toml", ["--approval"], '[[rule]]\nserver = "*"\naction = "allow"\n'),
        ("tokens", ["--transport", "streamable-http", "--auth-tokens"], "alice secret\n"),
    ],
)
def test_sandboxed_workspace_may_not_hold_files_that_grant_rights(
    tmp_path: Path, name: str, option: list[str], content: str
) -> None:
    """A kernel writes its workspace: rules or tokens kept there would let it widen its rights."""
    workspace = tmp_path / "ws"
    (workspace / name).parent.mkdir(parents=True)
    (workspace / name).write_text(content)
    result = ipybox("--workspace", str(workspace), "--sandbox", *option, str(workspace / name), cwd=tmp_path)

    assert result.returncode != 0, result.stderr
    assert result.stderr.startswith("ipybox: ") and "Traceback" not in result.stderr, result.stderr
    assert str(workspace / name) in result.stderr and "outside the workspace" in result.stderr


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("readable by others", ["not a file only this user can read (mode 644", "remove it"]),
        ("symlink", ["cannot keep the HTTP token in", "state/http-token"]),
        ("directory", ["cannot keep the HTTP token in"]),
        ("short", ["holds no usable token", "remove it"]),
    ],
)
def test_http_token_file_that_others_could_read_or_set_stops_ipybox(
    tmp_path: Path, kind: str, words: list[str]
) -> None:
    """The server's own token is only trusted from a private regular file; anything else is refused."""
    state = tmp_path / "state"
    state.mkdir()
    path = state / "http-token"
    if kind == "readable by others":
        path.write_text("a" * 43 + "\n")
        path.chmod(0o644)
    elif kind == "symlink":
        (tmp_path / "planted").write_text("b" * 43 + "\n")
        path.symlink_to(tmp_path / "planted")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text("short\n")
        path.chmod(0o600)
    result = ipybox("--workspace", str(tmp_path / "ws"), *HTTP, "--port", str(_free_port()), cwd=tmp_path)

    assert result.returncode != 0, result.stderr
    assert result.stderr.startswith("ipybox: ") and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA GPU")
def test_sandbox_gpus_fail_before_serving_where_there_is_none_or_no_sandbox(tmp_path: Path) -> None:
    workspace = str(tmp_path / "ws")
    for args, said in [
        (["--sandbox-gpus", "all"], "--sandbox-gpus applies only with --sandbox"),
        (["--sandbox", "--sandbox-gpus", "all"], "no NVIDIA GPU"),
        (["--sandbox", "--sandbox-gpus", "2"], "'2' is ambiguous"),
    ]:
        result = ipybox("--workspace", workspace, *args, cwd=tmp_path)
        assert result.returncode != 0 and said in result.stderr, result.stderr


def test_serving_every_address_without_public_url_says_to_set_it(tmp_path: Path) -> None:
    """On 0.0.0.0 the 401 challenge would name an address no client can reach: ipybox says so."""
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("alice " + "a" * 40 + "\n")
    port = _free_port()
    args = [
        "--transport",
        "streamable-http",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--auth-tokens",
        str(tokens),
    ]
    lines = _first_lines(["--workspace", str(tmp_path / "ws"), *args], 2)
    assert lines[0].startswith(f"ipybox: serving MCP at http://0.0.0.0:{port}/mcp"), lines
    assert "warning" in lines[1] and "--public-url" in lines[1], lines

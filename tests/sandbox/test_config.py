"""Sandbox configuration: the default and custom policies, and clear errors before anything starts."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ipybox import CodeExecutor
from ipybox.sandbox import DEFAULT_CONFIG, SandboxError, load_config
from ipybox.sandbox.config import kernel_policy

from .conftest import SANDBOX_PATH, ProcessWatch, probe, run, sandbox_config, write_config

# --- the policy -----------------------------------------------------------------------------------


def test_load_config_without_path_is_a_copy_of_the_default() -> None:
    config = load_config(None)
    assert config == DEFAULT_CONFIG
    config["filesystem"]["allowWrite"].append("/")
    assert "/" not in DEFAULT_CONFIG["filesystem"]["allowWrite"]


def test_kernel_policy_adds_what_ipybox_needs_and_forbids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPYBOX_STATE_DIR", "relative-state")
    config: dict[str, Any] = {"network": {"allowAllUnixSockets": False}}

    policy = kernel_policy(config, tmp_path / "kernels")

    assert config == {"network": {"allowAllUnixSockets": False}}, "the user's config was changed"
    assert str(tmp_path / "kernels") in policy["filesystem"]["allowWrite"]
    # srt resolves relative paths against the kernel's directory, not ours: the deny must be absolute.
    assert str(tmp_path / "relative-state") in policy["filesystem"]["denyWrite"]
    assert "~/.ssh" in policy["filesystem"]["denyRead"]
    assert "~/.aws" not in policy["filesystem"]["denyRead"]  # only what exists is listed
    # reads by allow-list: everything hidden but the system and the Python environment
    assert policy["filesystem"]["denyRead"][0] == "/"
    assert {"/usr", "/etc", sys.prefix, sys.base_prefix} <= set(policy["filesystem"]["allowRead"])
    assert str(home) not in policy["filesystem"]["allowRead"]
    assert policy["network"]["allowAllUnixSockets"] is True
    # srt refuses a config without both lists; absent means "none".
    assert policy["network"]["allowedDomains"] == []
    assert policy["network"]["deniedDomains"] == []


@pytest.mark.timeout(60)
async def test_default_policy_is_used_without_a_config(
    srt_available: None, workspace: Path, state_dir: Path
) -> None:
    async with CodeExecutor(sandbox=True, working_dir=workspace, spare_kernel=False) as executor:
        runtime = Path(
            await run(executor, "import os\nprint(os.path.dirname(os.environ['IPYBOX_TOOL_SERVER']))")
        )
        [policy_file] = runtime.glob("sandbox-*.json")  # the one kernel's, hidden from the kernel itself
        policy = json.loads(policy_file.read_text())
        # the default's behaviour: the working directory is writable, its .env is not readable
        assert await run(executor, "open('written.txt', 'w').write('x')") == "1"
        with pytest.raises(Exception, match="PermissionError"):
            await run(executor, "open('.env').read()")
    for section, values in DEFAULT_CONFIG.items():
        if isinstance(values, dict):
            for key, value in values.items():
                if isinstance(value, list):
                    # relative paths are made absolute (srt runs outside the workspace); what
                    # ipybox never lets a kernel write (~/.ipython) is not opened by allowWrite
                    wanted = {str(workspace / p).removesuffix("/.") for p in value if not p.startswith("~")}
                    assert wanted <= set(policy[section][key]), (section, key)
                else:
                    assert policy[section][key] == value, (section, key)
        else:
            assert policy[section] == values
    assert str(state_dir) in policy["filesystem"]["denyWrite"]
    assert policy["filesystem"]["denyRead"][0] == "/"  # reads by allow-list
    assert not [p for p in policy["filesystem"]["allowWrite"] if p.startswith("~")]
    assert policy["network"]["allowAllUnixSockets"] is True
    assert (workspace / "written.txt").read_text() == "x"


@pytest.mark.timeout(60)
async def test_custom_config_replaces_the_default(
    srt_available: None, workspace: Path, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    # `extra` is writable, the working directory (which the default allows) is not.
    config = write_config(tmp_path / "custom.json", sandbox_config(filesystem={"allowWrite": [str(extra)]}))
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            f"print(_json.dumps([attempt(lambda: open({str(extra / 'a.txt')!r}, 'w').write('x')),"
            " attempt(lambda: open('b.txt', 'w').write('x'))]))",
        )
    assert result[0] == "ok: 1"
    assert result[1].startswith("OSError: [Errno 30] Read-only file system")
    assert (extra / "a.txt").read_text() == "x"
    assert not (workspace / "b.txt").exists()


@pytest.mark.timeout(60)
async def test_config_with_omitted_sections_gets_safe_defaults(
    srt_available: None, workspace: Path, tmp_path: Path
) -> None:
    # No network section at all: srt itself would refuse this file; ipybox fills in "no domains".
    config = write_config(tmp_path / "minimal.json", {"filesystem": {"allowWrite": ["."]}})
    async with CodeExecutor(
        sandbox=True, sandbox_config=config, working_dir=workspace, spare_kernel=False
    ) as executor:
        result = await probe(
            executor,
            "import urllib.request\n"
            "print(_json.dumps([attempt(lambda: open('a.txt', 'w').write('x')),"
            " attempt(lambda: urllib.request.urlopen('http://example.org', timeout=5).status)]))",
        )
    assert result[0] == "ok: 1"
    assert not result[1].startswith("ok"), result[1]


# --- errors before anything starts ----------------------------------------------------------------


def _no_trace(watch: ProcessWatch, tmp: Path) -> None:
    """Nothing was started and nothing was left behind."""
    assert watch.snapshot() == []
    assert watch.seen == {}, "a process was started"
    assert list(tmp.iterdir()) == [], "runtime files were left behind"


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the executor creates its runtime dir, so a test can see that none is left."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ("[]", "must be a JSON object"),
        ('"filesystem"', "must be a JSON object"),
        ({"filesystem": []}, "'filesystem' must be an object"),
        ({"network": "none"}, "'network' must be an object"),
        ({"filesystem": {"denyRead": ".env"}}, "filesystem.denyRead must be a list of strings"),
        ({"filesystem": {"allowWrite": ["."], "denyWrite": [1]}}, "filesystem.denyWrite must be a list"),
        ({"filesystem": {"allowRead": [None]}}, "filesystem.allowRead must be a list"),
        ({"network": {"allowedDomains": "example.org"}}, "network.allowedDomains must be a list"),
        ({"network": {"allowLocalBinding": "yes"}}, "network.allowLocalBinding must be true or false"),
        ({"enableWeakerNestedSandbox": 1}, "enableWeakerNestedSandbox must be true or false"),
        # srt ignores every filesystem rule (ipybox's own included) when this is set
        ({"filesystem": {"disabled": True}}, "filesystem.disabled is not supported"),
    ],
)
@pytest.mark.timeout(30)
async def test_malformed_config_fails_before_anything_starts(
    content: Any, message: str, workspace: Path, tmp_path: Path, private_tmp: Path
) -> None:
    path = write_config(tmp_path / "bad.json", content)
    watch = ProcessWatch()
    with pytest.raises(SandboxError, match=message) as info:
        async with CodeExecutor(spare_kernel=False, sandbox=True, sandbox_config=path, working_dir=workspace):
            pytest.fail("the executor started")
    assert str(path) in str(info.value)
    _no_trace(watch, private_tmp)


@pytest.mark.timeout(30)
async def test_missing_config_file_fails_before_anything_starts(
    workspace: Path, tmp_path: Path, private_tmp: Path
) -> None:
    watch = ProcessWatch()
    with pytest.raises(SandboxError, match="Sandbox config file not found: .*nowhere.json"):
        async with CodeExecutor(
            spare_kernel=False, sandbox=True, sandbox_config=tmp_path / "nowhere.json", working_dir=workspace
        ):
            pytest.fail("the executor started")
    _no_trace(watch, private_tmp)


@pytest.mark.timeout(60)
async def test_config_that_srt_rejects_is_reported_clearly(
    srt_available: None, workspace: Path, tmp_path: Path, private_tmp: Path
) -> None:
    # Domain patterns are srt's to judge ("*" would allow everything); it refuses to start.
    path = write_config(tmp_path / "broad.json", sandbox_config(network={"allowedDomains": ["*"]}))
    watch = ProcessWatch()
    with pytest.raises(RuntimeError, match=r"(?s)kernel failed to start.*allowedDomains"):
        async with CodeExecutor(sandbox=True, sandbox_config=path, working_dir=workspace, spare_kernel=False):
            pytest.fail("the executor started")
    await watch.assert_all_gone()
    # only the (empty) directory that holds all runtime dirs stays
    assert [str(p.relative_to(private_tmp)) for p in private_tmp.rglob("*")] == [
        f"ipybox-runtime-{os.getuid()}"
    ]


def _toolbox(tmp_path: Path, tools: list[str]) -> str:
    """A PATH of one directory holding symlinks to just `tools` (plus this Python)."""
    box = tmp_path / "bin"
    box.mkdir()
    (box / "python").symlink_to(sys.executable)
    for tool in tools:
        if found := shutil.which(tool, path=SANDBOX_PATH):
            (box / tool).symlink_to(found)
    return str(box)


@pytest.mark.timeout(30)
async def test_missing_srt_is_named_before_anything_starts(
    workspace: Path, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", _toolbox(tmp_path, ["node", "bwrap", "socat", "rg"]))
    monkeypatch.delenv("IPYBOX_SRT", raising=False)
    watch = ProcessWatch()
    with pytest.raises(SandboxError) as info:
        async with CodeExecutor(spare_kernel=False, sandbox=True, working_dir=workspace):
            pytest.fail("the executor started")
    missing = str(info.value).split(". On Debian")[0]
    assert "srt (npm install -g @anthropic-ai/sandbox-runtime" in missing
    assert "bwrap" not in missing and "socat" not in missing
    _no_trace(watch, private_tmp)


@pytest.mark.skipif(platform.system() != "Linux", reason="bubblewrap is the Linux sandbox")
@pytest.mark.timeout(30)
async def test_missing_bwrap_is_named_before_anything_starts(
    workspace: Path, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srt = shutil.which("srt", path=SANDBOX_PATH) or str(tmp_path / "srt")
    monkeypatch.setenv("IPYBOX_SRT", srt)  # srt itself is found, only bwrap is not
    monkeypatch.setenv("PATH", _toolbox(tmp_path, ["node", "socat", "rg"]))
    assert shutil.which("bwrap") is None
    watch = ProcessWatch()
    with pytest.raises(SandboxError) as info:
        async with CodeExecutor(spare_kernel=False, sandbox=True, working_dir=workspace):
            pytest.fail("the executor started")
    missing = str(info.value).split(". On Debian")[0]
    assert "bwrap (package bubblewrap)" in missing
    assert "socat" not in missing and "rg" not in missing and "srt" not in missing
    assert "apt-get install bubblewrap" in str(info.value)
    _no_trace(watch, private_tmp)


def test_placeholders_are_shared_and_removed_by_their_last_holder(tmp_path: Path) -> None:
    from ipybox.sandbox.placeholders import Placeholders, sweep

    locks, workspace = tmp_path / "locks", tmp_path / "ws"
    workspace.mkdir()
    first, second = Placeholders(locks), Placeholders(locks)
    first.ensure(workspace / ".git", "dir")
    second.ensure(workspace / ".git", "dir")
    second.ensure(workspace / ".mcp.json", "file")
    assert (workspace / ".git").is_dir() and (workspace / ".mcp.json").is_file()
    first.release()
    assert (workspace / ".git").is_dir()  # the second executor still relies on it
    (workspace / ".mcp.json").write_text("{}")  # the user wrote it meanwhile: it stays
    second.release()
    assert sorted(p.name for p in workspace.iterdir()) == [".mcp.json"]
    assert not locks.exists()
    # an executor killed outright: the next sweep removes what it left
    killed = Placeholders(locks)
    killed.ensure(workspace / ".claude", "dir")
    for fd, _ in killed._held.values():
        os.close(fd)
    sweep(locks)
    assert not (workspace / ".claude").exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["/nonexistent/srt", "srt", "{dir}", "{file}"])
async def test_wrong_ipybox_srt_is_named_before_anything_starts(
    workspace: Path, tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A missing, relative, directory or non-executable IPYBOX_SRT stops the start with its value."""
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    value = value.format(dir=tmp_path, file=tmp_path / "not-executable")
    monkeypatch.setenv("IPYBOX_SRT", value)
    watch = ProcessWatch()
    with pytest.raises(SandboxError, match="IPYBOX_SRT=") as info:
        async with CodeExecutor(spare_kernel=False, sandbox=True, working_dir=workspace):
            pytest.fail("the executor started")
    assert repr(value) in str(info.value) and "unset it" in str(info.value)
    _no_trace(watch, private_tmp)

"""`scripts/demo` (and the `scripts/setup` it and `scripts/test` run first) on a stock Debian:
its Python refuses `pip install` (PEP 668), uv is not installed, HOME is fresh."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from servers.launch import network_env

REPO = Path(__file__).resolve().parent.parent
DEBIAN_PYTHON = Path("/usr/bin/python3")
#: What `scripts/setup` needs of a clone (`uv sync` builds the project itself).
CLONE = [
    "scripts",
    "examples",
    "ipybox",
    "gentools_template",
    "pyproject.toml",
    "uv.lock",
    "README.md",
    "package.json",
]


def externally_managed() -> bool:
    if not DEBIAN_PYTHON.exists():
        return False
    stdlib = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (Path(stdlib) / "EXTERNALLY-MANAGED").exists()


@pytest.mark.timeout(300)
@pytest.mark.skipif(not externally_managed(), reason="needs a system python3 that refuses pip (PEP 668)")
@pytest.mark.skipif(not (REPO / "node_modules" / ".bin").is_dir(), reason="node MCP servers not installed")
def test_demo_script_on_a_fresh_home(tmp_path: Path) -> None:
    clone, home, bin_dir = tmp_path / "ipybox", tmp_path / "home", tmp_path / "bin"
    for name in CLONE:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, clone / name)
    # node packages already installed (links to ours, so nothing here can ever delete the originals)
    shutil.copy2(REPO / "package-lock.json", clone / "package-lock.json")
    (clone / "node_modules").mkdir()
    for entry in (REPO / "node_modules").iterdir():
        if entry.name != ".package-lock.json":
            (clone / "node_modules" / entry.name).symlink_to(entry)
    shutil.copy(REPO / "node_modules" / ".package-lock.json", clone / "node_modules" / ".package-lock.json")
    home.mkdir()
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(DEBIAN_PYTHON)  # Debian's python3 first; no uv anywhere on PATH
    path = [str(bin_dir), *(d for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin") if Path(d).is_dir())]
    assert not any((Path(d) / "uv").exists() for d in path)
    cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    env = network_env() | {"HOME": str(home), "PATH": os.pathsep.join(path), "UV_CACHE_DIR": cache}

    refused = subprocess.run(
        ["python3", "-m", "pip", "install", "uv"], env=env, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr  # the old advice

    workspace = tmp_path / "demo"
    env["IPYBOX_STATE_DIR"] = str(tmp_path / "state")
    demo = ["scripts/demo", "--workspace", str(workspace)]  # the README's command (in a temp workspace)
    done = subprocess.run(
        demo, cwd=clone, env=env, input="Y\n" * 4, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("approve everything.") == 4
    assert "3. Result returned to the agent:" in done.stdout and "Echo: warmest city:" in done.stdout
    uv = home / ".local" / "share" / "ipybox" / "uv-venv" / "bin" / "uv"
    assert uv.is_file()
    # the user gets `uv` (the README's Install uses it) where uv's installer puts it, and is told
    # how to put that folder on PATH (their PATH here lacks it; a Debian login shell adds it)
    user_bin = home / ".local" / "bin"
    assert (user_bin / "uv").resolve() == uv.resolve() and (user_bin / "uvx").exists()
    assert f'export PATH="{user_bin}:$PATH"' in done.stderr, done.stderr
    told = env | {"PATH": os.pathsep.join([str(user_bin), env["PATH"]])}
    version = subprocess.run(["uv", "--version"], cwd=tmp_path, env=told, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("uv "), version.stderr
    imported = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", "import ipybox, mcp; print(ipybox.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert imported.stdout.strip() == str(clone / "ipybox" / "__init__.py"), imported.stderr

    again = subprocess.run(["scripts/uv", "--version"], cwd=clone, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.startswith("uv ") and "installing" not in again.stderr


@pytest.mark.timeout(120)
def test_scripts_uv_reaches_the_index_with_only_the_systems_certificates(tmp_path: Path) -> None:
    """A user whose company's TLS-intercepting proxy CA is in the system's store (as pip, curl and
    git read it), with no SSL_CERT_FILE set: `scripts/uv`, which every README command runs first,
    still downloads. (Where no proxy intercepts TLS, this passes either way.)"""
    ca_vars = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "UV_")
    env = {k: v for k, v in network_env().items() if not k.startswith(ca_vars)}
    env |= {
        "HOME": str(tmp_path / "home"),
        "PATH": os.environ["PATH"],
        "UV_CACHE_DIR": str(tmp_path / "cache"),
    }
    venv = tmp_path / "venv"
    made = subprocess.run(
        ["scripts/uv", "venv", "-q", str(venv)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    install = ["scripts/uv", "pip", "install", "--python", str(venv / "bin" / "python"), "six"]
    done = subprocess.run(install, cwd=REPO, env=env, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr

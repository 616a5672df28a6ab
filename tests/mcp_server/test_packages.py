"""Attacks on `install_package`: kernel-written files and variables must never steer the installer.

Each attack plants, in the directory ipybox runs in (the workspace), something that makes an
installer run kernel-chosen code on the host. A control run of the plain installer in that
directory shows the plant works; ipybox's install must leave the marker file unwritten.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipybox.mcp_server import packages
from ipybox.mcp_server.packages import RequirementError, check_requirement

PROBE = "ipybox-attack-probe"
UV = shutil.which("uv")
requires_uv = pytest.mark.skipif(UV is None, reason="uv is not installed")


def evil_wheel(directory: Path, marker: Path, name: str = PROBE, version: str = "99.0") -> Path:
    """A wheel whose `.pth` file writes `marker` whenever the environment's Python starts."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "attack_probe.pth": f"import os; open({str(marker)!r}, 'w').close()\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    wheel = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def new_venv(path: Path, *, pip: bool = False) -> Path:
    if pip:
        subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(path)], check=True)
    else:
        assert UV is not None
        subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(path)], check=True)
    return path / "bin" / "python"


run = subprocess.run  # the control runs, blocking on purpose: nothing else runs meanwhile


def start_python(python: Path) -> None:
    """Start the environment's interpreter once, as any later use would (runs `.pth` files)."""
    subprocess.run([str(python), "-c", "pass"], check=True, cwd="/")


@pytest.fixture
def attack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(workspace, marker): ipybox runs in the workspace, as the `ipybox` command does."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    yield workspace, tmp_path / "pwned"


def offline() -> dict[str, str]:
    return dict(os.environ) | {"UV_OFFLINE": "1", "PIP_NO_INDEX": "1"}


async def refused_or_failed(python: Path, environ: dict[str, str] | None = None) -> None:
    with pytest.raises(RuntimeError) as e:
        await packages.install(PROBE, python=str(python), environ=environ or offline())
    assert PROBE in str(e.value)


@requires_uv
@pytest.mark.parametrize(
    "config",
    [
        ("uv.toml", '[pip]\nfind-links = ["{wheels}"]\n'),
        (
            "pyproject.toml",
            '[project]\nname = "x"\nversion = "0"\n[tool.uv.pip]\nfind-links = ["{wheels}"]\n',
        ),
        ("uv.toml", '[[index]]\nurl = "file://{wheels}"\nformat = "flat"\ndefault = true\n'),
    ],
    ids=["uv.toml find-links", "pyproject tool.uv.pip", "uv.toml flat index"],
)
async def test_uv_config_in_the_workspace_is_ignored(
    attack: tuple[Path, Path], tmp_path: Path, config: tuple[str, str]
) -> None:
    workspace, marker = attack
    evil_wheel(workspace / "wheels", marker)
    name, text = config
    (workspace / name).write_text(text.format(wheels=workspace / "wheels"))
    control = new_venv(tmp_path / "control")
    assert UV is not None
    run([UV, "pip", "install", "--python", str(control), PROBE], env=offline(), check=True)
    start_python(control)
    assert marker.exists(), "control: the planted configuration should steer a plain uv run here"
    marker.unlink()

    target = new_venv(tmp_path / "target")
    await refused_or_failed(target)
    start_python(target)
    assert not marker.exists()
    assert sorted(p.name for p in workspace.iterdir()) == sorted(["wheels", name])


@requires_uv
@pytest.mark.parametrize("variable", ["UV_FIND_LINKS", "PIP_FIND_LINKS", "UV_CONFIG_FILE"])
async def test_installer_variables_naming_files_are_dropped(
    attack: tuple[Path, Path], tmp_path: Path, variable: str
) -> None:
    """Variables a workspace `.env` could have put into ipybox's environment."""
    workspace, marker = attack
    wheels = workspace / "wheels"
    evil_wheel(wheels, marker)
    (workspace / "evil.toml").write_text(f'[pip]\nfind-links = ["{wheels}"]\n')
    value = str(workspace / "evil.toml") if variable == "UV_CONFIG_FILE" else str(wheels)
    target = new_venv(tmp_path / "target")
    await refused_or_failed(target, offline() | {variable: value})
    start_python(target)
    assert not marker.exists()


@pytest.fixture(scope="module")
def pip_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An environment with pip (the installer ipybox falls back to where uv is missing)."""
    return new_venv(tmp_path_factory.mktemp("pip") / "venv", pip=True)


@pytest.mark.parametrize(
    "plant",
    [
        {"pip/__init__.py": "", "pip/__main__.py": "open({marker!r}, 'w').close()\n"},
        {"sitecustomize.py": "open({marker!r}, 'w').close()\n"},
        {"usercustomize.py": "open({marker!r}, 'w').close()\n", "pip.py": "open({marker!r}, 'w').close()\n"},
    ],
    ids=["pip package", "sitecustomize", "usercustomize and pip.py"],
)
async def test_pip_fallback_imports_nothing_from_the_workspace(
    attack: tuple[Path, Path], pip_venv: Path, plant: dict[str, str]
) -> None:
    workspace, marker = attack
    for path, text in plant.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text.format(marker=str(marker)))
    environ = offline() | {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(workspace)}  # no uv: pip runs
    with pytest.raises(RuntimeError):
        await packages.install(PROBE, python=str(pip_venv), environ=environ)
    assert not marker.exists()
    run([str(pip_venv), "-m", "pip", "--version"], env=environ, capture_output=True)
    assert marker.exists(), "control: the plant should run in a plain `python -m pip` here"


@pytest.mark.parametrize(
    "spec",
    [
        # local archives and paths
        "x.tar.gz",
        "probe-1.0-py3-none-any.whl",
        "pkg.zip",
        "./pkg",
        "/abs/pkg",
        "~/pkg",
        "../pkg",
        # file: and other local or non-https URLs, in every spelling
        "NAME@file:/abs/x.tar.gz",
        "NAME @ file:///abs/x.tar.gz",
        "NAME @ FILE:///abs/x.tar.gz",
        "NAME @ /abs/x.tar.gz",
        "NAME @ ./x",
        "NAME @ git+file:///tmp/repo",
        "git+file:///tmp/repo",
        "git+ssh://git@example.com/r",
        "NAME @ http://example.com/x.whl",
        "NAME @ https:///x.whl",
        "file:///abs/x.tar.gz",
        # options, several requirements, shell syntax
        "-r requirements.txt",
        "--index-url=http://x",
        "-e .",
        "requests --index-url https://evil",
        "requests\n--pre",
        "requests -c constraints.txt",
        "a b",
        "pkg; rm -rf /",
        "",
        "   ",
    ],
)
def test_requirements_that_are_refused(spec: str) -> None:
    with pytest.raises(RequirementError) as e:
        check_requirement(spec)
    assert repr(spec) in str(e.value)
    assert "Not a package requirement" in str(e.value)


@pytest.mark.parametrize(
    ("spec", "normal"),
    [
        ("requests", "requests"),
        (" numpy>=1.26 ", "numpy>=1.26"),
        ("pkg[extra,other]~=2.0", "pkg[extra,other]~=2.0"),
        ('tomli; python_version < "3.11"', 'tomli; python_version < "3.11"'),
        ("zope.interface", "zope.interface"),
        ("x @ https://example.com/x-1.0-py3-none-any.whl", "x @ https://example.com/x-1.0-py3-none-any.whl"),
        ("git+https://github.com/psf/requests", "git+https://github.com/psf/requests"),
        ("r @ git+https://github.com/psf/requests@main", "r @ git+https://github.com/psf/requests@main"),
    ],
)
def test_requirements_that_are_accepted(spec: str, normal: str) -> None:
    assert check_requirement(spec) == normal


def test_installer_environment_keeps_index_settings_only() -> None:
    env = packages.installer_env(
        {
            "PATH": f"relative/bin{os.pathsep}/usr/bin",
            "HOME": "/home/u",
            "HTTPS_PROXY": "http://proxy:3128",
            "UV_INDEX_URL": "https://mirror/simple",
            "UV_FIND_LINKS": "/ws/wheels",
            "PIP_CONSTRAINT": "/ws/c.txt",
            "PYTHONPATH": "/ws",
            "PYTHONSTARTUP": "/ws/s.py",
            "VIRTUAL_ENV": "/ws/venv",
        }
    )
    assert env["PATH"] == "/usr/bin"
    assert env["UV_INDEX_URL"] == "https://mirror/simple" and env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["UV_NO_CONFIG"] == "1" and env["PIP_CONFIG_FILE"] == os.devnull
    for dropped in ["UV_FIND_LINKS", "PIP_CONSTRAINT", "PYTHONPATH", "PYTHONSTARTUP", "VIRTUAL_ENV"]:
        assert dropped not in env

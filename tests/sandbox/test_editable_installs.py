"""Editable installs: a project installed in development mode puts its folder on the import
path, but a sandboxed kernel may import its packages only, not read the project's other files.

Each test builds a real venv (`uv venv`) with editable installs (`uv pip install -e`) of tiny
projects that keep secrets beside their packages, and runs a sandboxed executor from it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_kernel_pip import app_environment

pytestmark = [pytest.mark.usefixtures("srt_available"), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]

#: Project layouts: a `src` folder added by a `.pth` path entry (hatchling), a flat project
#: whose root is the path entry (hatchling), and setuptools' import hook (`__editable__` finder).
PROJECTS = {
    "srcpkg": (
        "hatchling.build",
        "hatchling",
        "src/srcpkg",
        '[tool.hatch.build.targets.wheel]\npackages = ["src/srcpkg"]\n',
    ),
    "flatpkg": (
        "hatchling.build",
        "hatchling",
        "flatpkg",
        '[tool.hatch.build.targets.wheel]\npackages = ["flatpkg"]\n',
    ),
    "hookpkg": (
        "setuptools.build_meta",
        "setuptools",
        "hookpkg",
        '[tool.setuptools]\npackages = ["hookpkg"]\n',
    ),
}

SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from ipybox import CodeExecutor
async def main():
    async with CodeExecutor(sandbox=True, working_dir=Path(sys.argv[1]), spare_kernel=False) as executor:
        result = await executor.execute(sys.argv[2], timeout=60)
    print(result.text)
asyncio.run(main())
"""

PROBE = """
import json, os, importlib
def attempt(fn):
    try:
        return f"ok: {fn()!r}"
    except BaseException as e:
        return f"{type(e).__name__}: {e}"
targets = %s
out = {t: attempt(lambda t=t: open(t).read()) for t in targets}
out['imports'] = [attempt(lambda m=m: importlib.import_module(m).VALUE) for m in %s]
out['listing'] = {p: attempt(lambda p=p: sorted(os.listdir(p))) for p in %s}
print(json.dumps(out))
"""


def _project(base: Path, name: str) -> Path:
    backend, requirement, package, extra = PROJECTS[name]
    root = base / f"{name}-project"
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text(f"VALUE = {name!r}\n")
    (root / package / ".env").write_text(f"IN_PACKAGE=package-secret-{name}\n")
    (root / package / ".env.local").write_text(f"IN_PACKAGE=package-local-secret-{name}\n")
    (root / ".env").write_text(f"TOKEN=project-secret-{name}\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(f"[remote]\n\turl = https://user:git-secret-{name}@example.org\n")
    (root / "notes").mkdir()
    (root / "notes" / "keys.txt").write_text(f"notes-secret-{name}\n")
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1"\n'
        f'[build-system]\nrequires = ["{requirement}"]\nbuild-backend = "{backend}"\n{extra}'
    )
    return root


@pytest.fixture(scope="module")
def editable_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """A venv with the three projects installed editable."""
    base = tmp_path_factory.mktemp("editable")
    python = app_environment(base / "venv", seed_pip=False)  # sees ipybox and its dependencies
    projects = {name: _project(base, name) for name in PROJECTS}
    for root in projects.values():
        install = ["uv", "pip", "install", "-q", "--python", str(python), "-e", str(root)]
        # the build backends from uv's cache if there, else from the index
        if subprocess.run([*install, "--offline"], capture_output=True).returncode != 0:
            subprocess.run(install, check=True)
    return python, projects


def _run(python: Path, workspace: Path, code: str) -> dict[str, object]:
    done = subprocess.run(
        [str(python), "-c", SCRIPT, str(workspace), code],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_editable_projects_are_importable_but_their_files_hidden(
    editable_venv: tuple[Path, dict[str, Path]], workspace: Path
) -> None:
    """`.env` at the project root and inside the package, `.env.*`, `.git/config`, other
    folders: hidden for the `src` layout, the flat layout (project root on the import path)
    and setuptools' import hook; the packages import."""
    python, projects = editable_venv
    secrets = {}
    for name, root in projects.items():
        package = root / PROJECTS[name][2]
        for path in (
            root / ".env",
            root / ".git/config",
            root / "notes/keys.txt",
            package / ".env",
            package / ".env.local",
        ):
            assert path.read_text()  # there, and readable on the host
            secrets[str(path)] = path.read_text().strip()
    listed = [str(root) for root in projects.values()]
    result = _run(python, workspace, PROBE % (sorted(secrets), sorted(PROJECTS), listed))
    for path in secrets:
        outcome = result[path]
        assert isinstance(outcome, str) and not outcome.startswith("ok"), (path, outcome)
    text = json.dumps(result)
    assert not [s for s in secrets.values() if s in text]
    for root, listing in result["listing"].items():  # type: ignore[union-attr]
        assert ".env" not in listing and ".git" not in listing and "notes" not in listing, (root, listing)
    assert result["imports"] == [f"ok: {name!r}" for name in sorted(PROJECTS)]

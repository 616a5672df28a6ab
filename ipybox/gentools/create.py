"""Instantiates the gentools template into a new package in the workspace."""

from __future__ import annotations

import keyword
from pathlib import Path
from string import Template

_PACKAGED = Path(__file__).resolve().parent / "template"  # where the wheel puts gentools_template/
_SOURCE = Path(__file__).resolve().parents[2] / "gentools_template"  # a source checkout


def template_dir() -> Path:
    """The template's folder, in an installed wheel or a source checkout."""
    for candidate in (_PACKAGED, _SOURCE):
        if (candidate / "api.py.tmpl").is_file():
            return candidate
    raise FileNotFoundError("the gentools template is missing from this ipybox installation")


def _check_identifier(kind: str, value: str) -> None:
    if not value.isidentifier() or keyword.iskeyword(value) or not value.islower():
        raise ValueError(f"{kind} must be a lowercase Python identifier like 'github', got {value!r}.")


def _docstring_text(description: str) -> str:
    """`description` on one line and safe inside a triple-quoted docstring.

    Double quotes become single quotes (a trailing `"` would end the docstring early),
    backslashes become slashes, and control characters are dropped.
    """
    text = "".join(c for c in " ".join(description.split()) if c.isprintable())
    return text.replace("\\", "/").replace('"', "'").strip()


def create_gentool(category: str, name: str, description: str, root: Path | str = "gentools") -> Path:
    """Create `root/<category>/<name>/` (`__init__.py`, `api.py`, `impl.py`) from the template.

    `root` is relative to the current directory (the workspace, in a kernel). Refuses to
    overwrite an existing tool. Returns the package directory.
    """
    _check_identifier("category", category)
    _check_identifier("name", name)
    description = _docstring_text(description) or name
    root = Path(root)
    target = root / category / name
    if target.exists():
        raise FileExistsError(f"{target} already exists; pick another name or edit its files.")
    values = {"category": category, "name": name, "description": description}
    files = {
        tmpl.name.removesuffix(".tmpl"): Template(tmpl.read_text(encoding="utf-8")).substitute(values)
        for tmpl in sorted(template_dir().glob("*.py.tmpl"))
    }
    target.mkdir(parents=True)
    for package in (root, root / category):
        (package / "__init__.py").touch(exist_ok=True)
    for filename, text in files.items():
        (target / filename).write_text(text, encoding="utf-8")
    return target

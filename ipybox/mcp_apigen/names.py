"""Turns arbitrary MCP tool, property and enum names into safe, unique Python identifiers."""

from __future__ import annotations

import keyword
import re
import unicodedata

from pydantic import BaseModel

_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]+")
_MAX_LEN = 100

#: The builtins of Python (3.10 to 3.13) and of an IPython kernel a module name could take: a tool
#: module imported under such a name (`from mcptools.calc import sum`) would hide the builtin.
#: Fixed, not `dir(builtins)`, so the names do not depend on where the API is generated.
BUILTIN_NAMES = frozenset(
    "abs aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr classmethod "
    "compile complex copyright credits delattr dict dir display divmod enumerate eval exec exit "
    "filter float format frozenset get_ipython getattr globals hasattr hash help hex id input int "
    "isinstance issubclass iter len license list locals map max memoryview min next object oct "
    "open ord pow print property quit range repr reversed round set setattr slice sorted "
    "staticmethod str sum super tuple type vars zip".split()
)

#: Attributes of pydantic models (and names pydantic reserves) that a field must not shadow.
MODEL_RESERVED = frozenset(dir(BaseModel)) | {"model_config", "model_fields", "model_computed_fields"}


def _ascii(name: str) -> str:
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()


def identifier(name: str, fallback: str = "value") -> str:
    """A valid, non-keyword Python identifier that resembles `name`."""
    ident = _NOT_IDENT.sub("_", _ascii(name)).strip("_")[:_MAX_LEN] or fallback
    if ident[0].isdigit():
        ident = f"{fallback}_{ident}"
    if keyword.iskeyword(ident) or keyword.issoftkeyword(ident):
        ident += "_"
    return ident


def module_name(tool_name: str) -> str:
    """A lowercase module name for a tool; a builtin's name gets a trailing `_` (`sum_`), so
    `from mcptools.<server> import <module>` never hides a builtin."""
    name = identifier(tool_name, fallback="tool").lower()
    return f"{name}_" if name in BUILTIN_NAMES else name


def class_name(name: str) -> str:
    """A PascalCase class name."""
    parts = [p for p in _NOT_IDENT.split(_ascii(name)) if p]
    # no leading underscores: a `__name` in a class body would be name-mangled
    ident = "".join(p[:1].upper() + p[1:] for p in parts).lstrip("_")
    ident = (ident[:1].upper() + ident[1:])[:_MAX_LEN] or "Model"
    return f"Model{ident}" if ident[0].isdigit() else ident


class UniqueNames:
    """Hands out names that differ from every name handed out before.

    Case-insensitive by default, since module files must not collide on macOS or Windows.
    """

    def __init__(self, taken: set[str] | frozenset[str] = frozenset(), ignore_case: bool = True) -> None:
        self._fold = str.lower if ignore_case else str
        self._taken = {self._fold(t) for t in taken}

    def available(self, name: str) -> bool:
        return self._fold(name) not in self._taken

    def claim(self, name: str) -> str:
        candidate, n = name, 1
        while not self.available(candidate):
            n += 1
            candidate = f"{name}_{n}"
        self._taken.add(self._fold(candidate))
        return candidate

"""The shared machinery of generated tool modules, in the kernel: model bases, the call, validators.

A generated module holds only what is specific to its tool (its models and a one-line `run`);
everything they share lives here. Loaded by every generated module, so it imports only
pydantic and the standard library (never the MCP SDK). Invalid arguments raise
`ToolArgumentError` with one line per bad field (where, what rule, what value) as soon as
`Params` is built, so nothing is sent to the tool.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Generic, Literal, TypeVar, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError
from pydantic._internal._model_construction import ModelMetaclass
from pydantic.root_model import _RootModelMetaclass
from pydantic_core import PydanticCustomError, core_schema

from ipybox.errors import IpyboxError
from ipybox.mcp_apigen.discover import with_parsers
from ipybox.tool_exec.client import ToolRunner

__all__ = [
    "Annotated",
    "Any",
    "Closed",
    "Email",
    "Enum",
    "Field",
    "Literal",
    "OneOf",
    "Open",
    "PythonPattern",
    "ToolArgumentError",
    "ToolMap",
    "ToolModel",
    "ToolResultError",
    "ToolValue",
    "UniqueItems",
    "call",
    "describe_errors",
    "package_attributes",
    "parse_result",
]

#: The JSON Schema rule behind each pydantic error type (prefixes end in "_").
_RULES = {
    "missing": "required",
    "extra_forbidden": "additionalProperties",
    "less_than_equal": "maximum",
    "less_than": "exclusiveMaximum",
    "greater_than_equal": "minimum",
    "greater_than": "exclusiveMinimum",
    "multiple_of": "multipleOf",
    "string_too_short": "minLength",
    "string_too_long": "maxLength",
    "string_pattern_mismatch": "pattern",
    "unique_items": "uniqueItems",
    "literal_error": "enum",
    "enum": "enum",
    "const": "const",
    "format": "format",
    "timezone_aware": "format",
    "datetime_": "format",
    "date_": "format",
    "time_": "format",
    "uuid_": "format",
    "ip_": "format",
    "url_": "format",
}
_MAX_VALUE = 80
_E = TypeVar("_E", bound="_ReadableError")


class _ReadableError(IpyboxError, ValidationError):
    """A pydantic `ValidationError` (so `errors()` lists the details) with a message for people."""

    message: str

    def __str__(self) -> str:
        return self.message


class ToolArgumentError(_ReadableError):
    """Values that break the tool's input schema; raised before anything is sent.

    The message has one line per bad field: where, the schema rule and the value.
    """


class ToolResultError(_ReadableError):
    """The tool was called, but its structured result breaks its output schema; `result` holds it."""

    result: Any


_KNOWN_TYPES = frozenset(get_args(core_schema.ErrorType))


def _rebuild(kind: type[_E], error: ValidationError, message: str) -> _E:
    """`error` as a `kind` (same details) whose `str()` is `message`."""
    details: list[Any] = []
    for item in error.errors(include_url=False):
        known = item["type"] in _KNOWN_TYPES
        detail = {
            "type": item["type"] if known else PydanticCustomError(item["type"], item["msg"]),
            "loc": item["loc"],
            "input": item["input"],
        }
        if known and "ctx" in item:
            detail["ctx"] = item["ctx"]
        details.append(detail)
    rebuilt = kind.from_exception_data(error.title, details)
    rebuilt.message = message
    return rebuilt


def _rule(error_type: str, ctx: Mapping[str, Any]) -> str:
    if error_type in ("too_short", "too_long"):
        kinds = {"Dictionary": "Properties", "List": "Items", "Tuple": "Items"}
        bound = "min" if error_type == "too_short" else "max"
        return bound + kinds.get(ctx.get("field_type", ""), "Length")
    if error_type == "literal_error":  # a Literal of one value is a `const`
        expected = str(ctx.get("expected", ""))
        return "enum" if " or " in expected else "const"
    if error_type in _RULES:
        return _RULES[error_type]
    prefix = next((p for p in _RULES if p.endswith("_") and error_type.startswith(p)), None)
    return _RULES[prefix] if prefix else "type"


def _path(loc: tuple[int | str, ...], data: Any, aliases: Mapping[str, str]) -> str:
    """`loc` as `a.b[0]`, without the tags pydantic adds for union members (not keys of `data`)."""
    parts: list[str] = []
    for depth, key in enumerate(loc):
        if isinstance(data, Mapping) and key in data:
            data = data[key]
        elif isinstance(data, (list, tuple)) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        elif isinstance(data, BaseModel) and isinstance(key, str) and hasattr(data, key):
            data = getattr(data, key)
        elif data is not None and not (depth == len(loc) - 1 and isinstance(data, Mapping)):
            continue  # a union member's tag, or a key inside a value of another type
        else:
            data = None  # a missing or unexpected key: the last part of the path
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:
            name = aliases.get(key, key) if depth == 0 else key
            parts.append(f".{name}" if parts else name)
    return "".join(parts) or "(arguments)"


def _value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 3] + "..."


def describe_errors(error: ValidationError, data: Any, aliases: Mapping[str, str]) -> list[dict[str, Any]]:
    """One entry per bad field: the path (Python names at the top), the rule, messages, the value.

    Errors for the members of a union at one path are merged into one entry.
    """
    merged: dict[str, dict[str, Any]] = {}
    for item in error.errors(include_url=False):
        path = _path(tuple(item["loc"]), data, aliases)
        rule = _rule(item["type"], item.get("ctx") or {})
        entry = merged.setdefault(path, {"field": path, "rules": [], "messages": [], "value": item["input"]})
        if rule not in entry["rules"]:
            entry["rules"].append(rule)
        if item["msg"] not in entry["messages"]:
            entry["messages"].append(item["msg"])
    return [
        {"field": e["field"], "rule": " or ".join(e["rules"]), "message": " or ".join(e["messages"])}
        | ({} if e["rules"] == ["required"] else {"value": e["value"]})
        for e in merged.values()
    ]


def _lines(errors: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"- {e['field']}: {e['message']} (rule: {e['rule']}"
        + (f"; got {_value(e['value'])})" if "value" in e else ")")
        for e in errors
    )


def _tool_name(cls: type) -> str:
    module = sys.modules.get(cls.__module__)
    return str(getattr(module, "TOOL_NAME", cls.__module__))


def _aliases(cls: type[BaseModel]) -> dict[str, str]:
    return {f.alias: name for name, f in cls.model_fields.items() if f.alias and f.alias != name}


def _argument_error(cls: type[BaseModel], error: ValidationError, data: Any) -> ToolArgumentError:
    errors = describe_errors(error, data, _aliases(cls))
    what = "arguments" if cls.__name__ == "Params" else f"{cls.__name__} values"
    count = f"{len(errors)} invalid {what}" if len(errors) != 1 else f"1 invalid {what[:-1]}"
    message = f"{count} for tool {_tool_name(cls)!r}; nothing was sent:\n{_lines(errors)}"
    return _rebuild(ToolArgumentError, error, message)


class _RaisesArgumentErrors(type):
    """Turns validation errors of `Model(...)` into `ToolArgumentError`.

    Hooked at the class call, not `__init__`: pydantic calls a custom `__init__` when it
    validates nested models too, and those errors must stay pydantic's.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as e:
            raise _argument_error(cls, e, kwargs) from None  # type: ignore[arg-type]


class _ToolModelMeta(_RaisesArgumentErrors, ModelMetaclass):
    """The metaclass of generated object models."""


class _ToolRootMeta(_RaisesArgumentErrors, _RootModelMetaclass):
    """The metaclass of generated models of other values (`ToolValue`, `ToolMap`)."""


#: Fields accept their Python names and the tool's own (aliased) names; the wire uses the latter.
#: Invalid values, also when assigned later, raise `ToolArgumentError` before anything is sent.
#: `from_attributes`: a model of another tool with the same fields passes where this one is expected.
_CONFIG = ConfigDict(
    validate_by_name=True,
    validate_by_alias=True,
    serialize_by_alias=True,
    protected_namespaces=(),
    validate_assignment=True,
    from_attributes=True,
    extra="allow",
)


class ToolModel(BaseModel, metaclass=_ToolModelMeta):
    """Base of generated models: invalid values raise `ToolArgumentError`, one line per field.

    Fields the schema does not declare are kept (JSON Schema allows them unless it says not).
    """

    model_config = _CONFIG

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as e:
            raise _argument_error(cls, e, obj) from None

    def __setattr__(self, name: str, value: Any) -> None:
        __tracebackhide__ = True
        try:
            super().__setattr__(name, value)
        except ValidationError as e:
            raise _argument_error(type(self), e, {name: value}) from None


class Open(ToolModel):
    """An object whose schema allows properties it does not declare: they are kept as extra fields."""


class Closed(ToolModel):
    """An object whose schema declares every property it takes: any other raises before a call."""

    model_config = ConfigDict(extra="forbid")


_V = TypeVar("_V")


class ToolValue(RootModel[_V], Generic[_V], metaclass=_ToolRootMeta):
    """A checked result that is not an object (a list, a string, a number): the value is `.root`.

    Lists and strings can be indexed, iterated and measured (`len`) directly.
    """

    model_config = ConfigDict(from_attributes=True)

    def __str__(self) -> str:
        return str(self.root)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(cast("Any", self.root))

    def __len__(self) -> int:
        return len(cast("Any", self.root))

    def __getitem__(self, key: Any) -> Any:
        return cast("Any", self.root)[key]


class ToolMap(RootModel[dict[str, _V]], Mapping[str, _V], Generic[_V], metaclass=_ToolRootMeta):
    """A checked object whose keys are data (`additionalProperties` only): a read-only mapping.

    Every value is checked against the schema; it passes wherever a `dict` of the same values
    is expected, e.g. into a parameter of another tool with the same schema.
    """

    model_config = ConfigDict(from_attributes=True)

    def __getitem__(self, key: str) -> _V:
        return self.root[key]

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.root)

    def __len__(self) -> int:
        return len(self.root)


def parse_result(model: type[BaseModel], data: Any, tool_name: str) -> Any:
    """`data` validated as `model`, or `ToolResultError` naming each field that breaks the schema."""
    __tracebackhide__ = True
    try:
        return model.__pydantic_validator__.validate_python(data)
    except ValidationError as e:
        lines = _lines(describe_errors(e, data, {}))
        message = f"The result of tool {tool_name!r} does not match its output schema:\n{lines}"
        error = _rebuild(ToolResultError, e, message)
        error.result = data
        raise error from None


# --- validators the generated annotations use -------------------------------------------------


def _after(check: Callable[[Any], Any]) -> Callable[..., core_schema.CoreSchema]:
    def schema(source: Any, handler: Callable[[Any], core_schema.CoreSchema]) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(check, handler(source))

    return schema


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema defines it: `1 == 1.0`, but `true != 1`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


class UniqueItems:
    """`uniqueItems`: no two items of the list are equal."""

    def _check(self, items: list[Any]) -> list[Any]:
        for i, item in enumerate(items):
            if any(_json_equal(item, earlier) for earlier in items[:i]):
                message = "List items should be unique; item {index} repeats an earlier one"
                raise PydanticCustomError("unique_items", message, {"index": i})
        return items

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return _after(self._check)(source, handler)


class OneOf:
    """`enum` or `const` with values a `Literal` cannot hold (floats, objects, arrays)."""

    def __init__(self, *values: Any) -> None:
        self.values = values

    def _check(self, value: Any) -> Any:
        if any(_json_equal(value, allowed) for allowed in self.values):
            return value
        if len(self.values) == 1:
            expected = repr(self.values[0])
            raise PydanticCustomError("const", "Input should be {expected}", {"expected": expected})
        expected = ", ".join(repr(v) for v in self.values)
        raise PydanticCustomError("enum", "Input should be one of {expected}", {"expected": expected})

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return _after(self._check)(source, handler)


class PythonPattern:
    """`pattern` that pydantic's regex engine cannot compile but Python's `re` can."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._regex = re.compile(pattern)

    def _check(self, value: str) -> str:
        if self._regex.search(value) is None:
            message = "String should match pattern '{pattern}'"
            raise PydanticCustomError("string_pattern_mismatch", message, {"pattern": self.pattern})
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return _after(self._check)(source, handler)


class _EmailCheck:
    """`format: email`, checked as far as the standard library can: text, `@`, a domain."""

    def _check(self, value: str) -> str:
        local, at, domain = value.rpartition("@")
        if not (local and at and domain) or any(c.isspace() for c in domain):
            raise PydanticCustomError("format", "Input should be an email address (name@domain)")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return _after(self._check)(source, handler)


#: A `str` that must look like an email address (no extra package needed in the kernel).
Email = Annotated[str, _EmailCheck()]


# --- calling a tool ---------------------------------------------------------------------------

_P = TypeVar("_P", bound=BaseModel)
_R = TypeVar("_R")


@dataclass(frozen=True)
class _Binding:
    """What a tool module's `run` needs, looked up once per module."""

    tool_name: str
    runner: ToolRunner


_BINDINGS: dict[type[BaseModel], _Binding] = {}


def _bind(params_type: type[BaseModel]) -> _Binding:
    module = sys.modules[params_type.__module__]
    package = sys.modules[module.__name__.rpartition(".")[0]]
    binding = _Binding(module.TOOL_NAME, ToolRunner(package.SERVER_NAME, package.SERVER_PARAMS))
    _BINDINGS[params_type] = binding
    return binding


def call(params_type: type[_P], params: _P | Mapping[str, Any], result_type: type[_R]) -> _R:
    """Validate `params`, call the tool of `params_type`'s module and return its result as `result_type`.

    `result_type` is a generated model (the result is checked against the output schema) or
    `str` (a tool without an output schema: its text).
    """
    __tracebackhide__ = True
    binding = _BINDINGS.get(params_type) or _bind(params_type)
    if type(params) is not params_type:
        params = params_type.model_validate(params)
    args = _whole_numbers(cast("BaseModel", params).model_dump(mode="json", exclude_unset=True))
    result = binding.runner.run_sync(binding.tool_name, args)
    if result_type is str:
        return cast("_R", result if isinstance(result, str) else str(result))
    model = cast("type[BaseModel]", result_type)
    if isinstance(result, str) and issubclass(model, RootModel):
        # A non-object result reaches the kernel as text (its JSON, or a string as it is) on
        # protocol versions before 2026-07-28, which allow only objects as structured content.
        try:
            return cast("_R", model.__pydantic_validator__.validate_python(json.loads(result)))
        except ValueError:
            pass
    return cast("_R", parse_result(model, result, binding.tool_name))


def _whole_numbers(value: Any) -> Any:
    """`value` with whole floats as ints: a `number` field turns `2` into `2.0`, which JSON, the
    person approving the call and the audit log should see as the `2` the code passed."""
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


# --- the package of a server ------------------------------------------------------------------


class _ServerPackage(types.ModuleType):
    """A server's package, whose docstring shows the output parsers added to its modules since it
    was generated: also those added after it was imported, without a reload."""

    @property
    def __doc__(self) -> str | None:
        doc: str | None = vars(self).get("__doc__")
        file = vars(self).get("__file__")
        if not doc or not file:
            return doc
        init = Path(file)
        try:
            return with_parsers(doc, init.parent, init.stat().st_mtime)
        except OSError:
            return doc

    @__doc__.setter
    def __doc__(self, doc: str | None) -> None:
        vars(self)["__doc__"] = doc


def package_attributes(
    package: str, tools: list[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for a server's package: its tool modules, imported on first use.

    A tool named like a Python builtin has a module with a trailing `_` (`sum_`); its plain name
    still imports it, for code written before. Output parsers added to the package's modules
    since it was generated are shown in its docstring (`; run_parsed() -> ...`).
    """
    module = sys.modules.get(package)
    if module is not None and type(module) is types.ModuleType and getattr(module, "__file__", None):
        module.__class__ = _ServerPackage  # its docstring is read afresh each time

    def getattr_(name: str) -> Any:
        if name in tools:
            return importlib.import_module(f"{package}.{name}")
        if f"{name}_" in tools:  # a builtin's name: `sum` for the module `sum_`
            return importlib.import_module(f"{package}.{name}_")
        raise AttributeError(f"module {package!r} has no attribute {name!r} (its tools: {', '.join(tools)})")

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(tools))

    return getattr_, dir_

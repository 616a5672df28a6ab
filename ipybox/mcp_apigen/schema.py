"""Writes pydantic model source code from JSON Schema, as found in MCP tool definitions.

Every constraint pydantic can check becomes part of the field's type (`Annotated[int,
Field(ge=1)]`), formats become types where the type needs nothing beyond pydantic and the
standard library, and what no model can check is stated in the field's description.
"""

from __future__ import annotations

import builtins
import functools
import io
import json
import keyword
import math
import re
import sys
import tokenize
import warnings
from typing import Any, TypeGuard

from pydantic_core import SchemaError, SchemaValidator, core_schema

from ipybox.mcp_apigen.names import MODEL_RESERVED, UniqueNames, class_name, identifier

_MAX_FLOAT = int(sys.float_info.max)
_MAX_COUNT = 2**32  # larger lengths and item counts are no constraint in practice (and overflow)
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}

_RUNTIME = "ipybox.mcp_apigen.runtime"
#: Where each name that generated code may use comes from (only those used are imported).
IMPORTS = {
    "Annotated": "typing",
    "Any": "typing",
    "Closed": _RUNTIME,
    "Email": _RUNTIME,
    "Enum": "enum",
    "Field": "pydantic",
    "Literal": "typing",
    "OneOf": _RUNTIME,
    "Open": _RUNTIME,
    "PythonPattern": _RUNTIME,
    "ToolMap": _RUNTIME,
    "ToolValue": _RUNTIME,
    "UniqueItems": _RUNTIME,
    "call": _RUNTIME,
    "AnyUrl": "pydantic",
    "AwareDatetime": "pydantic",
    "DateTime": "datetime:datetime",
    "Date": "datetime:date",
    "Time": "datetime:time",
    "UUID": "uuid",
    "IPv4Address": "ipaddress",
    "IPv6Address": "ipaddress",
}

#: Types for string formats; `date-time` in results accepts values without a UTC offset.
_FORMAT_TYPES = {
    "date-time": "AwareDatetime",
    "date": "Date",
    "time": "Time",
    "uuid": "UUID",
    "ipv4": "IPv4Address",
    "ipv6": "IPv6Address",
    "uri": "AnyUrl",
    "url": "AnyUrl",
    "email": "Email",
    "idn-email": "Email",
}
_LENIENT_FORMAT_TYPES = _FORMAT_TYPES | {"date-time": "DateTime"}
#: Format types that also take length constraints (others are kept `str` when a schema has any).
_SIZED_FORMAT_TYPES = {"AnyUrl", "Email"}

#: Keywords no generated model checks, by the kind of value they constrain.
_UNCHECKED_ANY = ("not", "if", "then", "else")
_UNCHECKED_STRING = ("contentMediaType", "contentEncoding", "contentSchema")
_UNCHECKED_ARRAY = ("contains", "minContains", "maxContains", "unevaluatedItems")
_UNCHECKED_OBJECT = (
    "propertyNames",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
)
#: Constraint keywords that mean nothing without a type to apply them to.
_TYPED_KEYWORDS = (
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
)

#: Names the generated code uses in class bodies; a field must not shadow them there.
_ANNOTATION_NAMES = {
    "BaseModel",
    "RootModel",
    "ToolModel",
    "ConfigDict",
    "None",
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tuple",
} | set(IMPORTS)
#: Module-level names a generated class must not take.
_MODULE_RESERVED = _ANNOTATION_NAMES | set(dir(builtins))


#: String literals as generated code writes them (`repr()` and `docstring()`), and names.
_STRING = re.compile(r"""(\"\"\"|'''|"|')(?:\\.|(?!\1).)*?\1""", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*")


def import_lines(source: str) -> str:
    """`from ... import ...` lines for the `IMPORTS` names `source` uses."""
    by_module: dict[str, list[str]] = {}
    used = set(_NAME.findall(_STRING.sub("", source)))  # tokenize would be 10x slower
    for name in sorted(used & set(IMPORTS), key=lambda n: (n[0].islower(), n)):
        module, _, original = IMPORTS[name].partition(":")
        by_module.setdefault(module, []).append(f"{original} as {name}" if original else name)
    order = {"pydantic": 1, _RUNTIME: 2}  # the standard library first, as isort would
    modules = sorted(by_module.items(), key=lambda item: (order.get(item[0], 0), item[0]))
    lines = [f"from {module} import {', '.join(items)}" for module, items in modules]
    return "\n".join(lines)


@functools.lru_cache(maxsize=4096)
def pattern_engine(pattern: str) -> str | None:
    """Which engine can check `pattern`: pydantic's ("pydantic"), only Python's `re` ("re"), or none.

    Python's `re` is tried only for what pydantic's engine rejects (lookarounds, backreferences);
    a pattern `re` warns about is not used either, since the warning would show in the kernel.
    """
    try:
        SchemaValidator(core_schema.str_schema(pattern=pattern))
        return "pydantic"
    except SchemaError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            re.compile(pattern)
        return "re"
    except (re.error, Warning, RecursionError, OverflowError, ValueError):
        return None


def _number(value: Any) -> TypeGuard[int | float]:
    """A JSON number that is also a finite float (no bools, no integers beyond floats)."""
    if type(value) is int:
        return abs(value) <= _MAX_FLOAT
    return type(value) is float and math.isfinite(value)


def _count(value: Any) -> int | None:
    """A non-negative integer keyword value (`5` or `5.0`) pydantic can take, else None."""
    if _number(value) and 0 <= value < _MAX_COUNT and float(value).is_integer():
        return int(value)
    return None


def _keyword(key: str, value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{key} {text if len(text) <= 80 else text[:77] + '...'}"


def _names_in(annotation: str) -> set[str]:
    """The names an annotation refers to (not text inside its string literals)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(annotation).readline)
        return {t.string for t in tokens if t.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError):
        return set(re.findall(r"\w+", annotation))


def _replace_name(annotation: str, name: str, replacement: str) -> str:
    """`annotation` with each reference to `name` (outside string literals) replaced."""
    if name not in annotation:
        return annotation
    tokens = list(tokenize.generate_tokens(io.StringIO(annotation).readline))
    out, last = [], 0
    for token in tokens:
        if token.type == tokenize.NAME and token.string == name and token.start[0] == 1:
            out += [annotation[last : token.start[1]], replacement]
            last = token.end[1]
    return "".join(out) + annotation[last:]


def py_literal(value: Any) -> str:
    """Python source for a JSON value (repr is exact for JSON's types, except for non-finite floats,
    which Python's JSON parser accepts as `NaN` and `Infinity` and which have no literal)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return f"[{', '.join(py_literal(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def docstring(text: str, indent: str = "") -> str:
    """A triple-quoted docstring whose content can never end the literal early or inject code."""
    safe = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r\n", "\n")
    safe = "".join(c if c in "\n\t" or c.isprintable() else _escape(c) for c in safe)
    lines = safe.strip().splitlines() or [""]
    if len(lines) == 1:
        return f'{indent}"""{lines[0]}"""'
    body = "\n".join(f"{indent}{line}".rstrip() for line in lines)
    return f'{indent}"""\n{body}\n{indent}"""'


def _escape(char: str) -> str:
    """A string-literal escape for one character (\\x only reaches U+00FF)."""
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


class ModelWriter:
    """Accumulates class definitions for the schemas of one module.

    `annotation()` returns a type annotation for a schema and defines whatever classes
    (nested models, enums, `$ref` targets) it needs along the way. What the annotation
    cannot check is collected as notes for the description of the field being written.
    `lenient` (for results) accepts `date-time` values without a UTC offset.
    """

    def __init__(self, root: dict[str, Any], reserved: set[str], lenient: bool = False) -> None:
        self._root = root
        self._formats = _LENIENT_FORMAT_TYPES if lenient else _FORMAT_TYPES
        self._classes: list[str] = []
        self._class_names = UniqueNames(reserved | _MODULE_RESERVED, ignore_case=False)
        self._ref_class: str | None = None  # the name a `$ref` claimed for its object model
        self._refs: dict[str, str] = {}
        self._ref_notes: dict[str, list[str]] = {}
        self._pending: set[str] = set()  # $ref classes whose definition is not yet complete
        self._models: list[str] = []
        self._notes: list[str] = []  # what the annotations being written cannot check
        self.recursive = False
        self.names: set[str] = set()  # every class or alias this writer defined
        self._defined: set[str] = set()  # names defined as classes (models and enums)

    @property
    def source(self) -> str:
        """All definitions, dependencies first; forward references are rebuilt at the end."""
        source = "\n\n\n".join(self._classes)
        if self.recursive:
            source += "\n\n\n" + "\n".join(f"{m}.model_rebuild()" for m in self._models)
        return source

    def claim(self, name: str) -> str:
        name = self._class_names.claim(name)
        self.names.add(name)
        return name

    def take_notes(self, mark: int = 0) -> list[str]:
        """The notes collected since `mark` (a length of the notes), removed."""
        notes = list(dict.fromkeys(self._notes[mark:]))
        del self._notes[mark:]
        return notes

    # -- annotations -------------------------------------------------------------------------

    def annotation(self, schema: Any, hint: str) -> str:
        if schema is True or not isinstance(schema, dict) or not schema:
            return "Any"
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        self._note_keywords(schema, _UNCHECKED_ANY)
        if "const" in schema:
            return self._literal([schema["const"]])
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
            return self._enum(schema["enum"], hint)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                base = {
                    k: v
                    for k, v in schema.items()
                    if k not in (key, "description", "default", "title", *_UNCHECKED_ANY)
                }
                members = [self.annotation(base | m if isinstance(m, dict) else m, hint) for m in schema[key]]
                return _union(members)
        if isinstance(schema.get("allOf"), list):
            return self.annotation(self._merge_all_of(schema), hint)
        kind = schema.get("type")
        if isinstance(kind, list):
            return _union([self.annotation(schema | {"type": k}, hint) for k in kind])
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, hint)
        if kind == "array":
            return self._array(schema, hint)
        if kind == "string":
            return self._string(schema)
        if kind in ("integer", "number"):
            return self._constrained(_SCALARS[kind], _bounds(schema, kind == "integer", self._notes))
        if isinstance(kind, str) and kind in _SCALARS:
            return _SCALARS[kind]
        if kind is None:  # constraints without a type apply to values of any type: not checked
            self._note_keywords(schema, _TYPED_KEYWORDS + _UNCHECKED_STRING + _UNCHECKED_ARRAY)
        return "Any"

    def _note_keywords(self, schema: dict[str, Any], keys: tuple[str, ...]) -> None:
        self._notes += [_keyword(k, schema[k]) for k in keys if k in schema]

    def _constrained(self, base: str, args: list[str], metadata: tuple[str, ...] = ()) -> str:
        if not args and not metadata:
            return base
        parts = [base, *([f"Field({', '.join(args)})"] if args else []), *metadata]
        return f"Annotated[{', '.join(parts)}]"

    def _string(self, schema: dict[str, Any]) -> str:
        args = _lengths(schema, "minLength", "maxLength")
        metadata: tuple[str, ...] = ()
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            engine = pattern_engine(pattern)
            if engine == "pydantic":
                args.append(f"pattern={py_literal(pattern)}")
            elif engine == "re":
                metadata = (f"PythonPattern({py_literal(pattern)})",)
            else:
                unusable = "(not a regular expression Python can use)"
                self._notes.append(f"{_keyword('pattern', pattern)} {unusable}")
        base = "str"
        fmt = schema.get("format")
        if isinstance(fmt, str):
            typed = self._formats.get(fmt)
            sized = typed in _SIZED_FORMAT_TYPES and not metadata
            if typed is not None and (not (args or metadata) or sized):
                base = typed
                args = [a for a in args if not a.startswith("pattern=")]
            else:
                self._notes.append(_keyword("format", fmt))
        self._note_keywords(schema, _UNCHECKED_STRING)
        return self._constrained(base, args, metadata)

    def _array(self, schema: dict[str, Any], hint: str) -> str:
        mark = len(self._notes)
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(prefix, list) and prefix:
            annotation = f"tuple[{', '.join(self.annotation(s, f'{hint}Item') for s in prefix)}]"
        elif isinstance(items, list):  # draft-04 tuple form
            members = [self.annotation(s, f"{hint}Item") for s in items]
            annotation = f"tuple[{', '.join(members)}]" if items else "list[Any]"
        else:
            annotation = f"list[{self.annotation(items, f'{hint}Item')}]"
        self._notes[mark:] = [f"each item: {note}" for note in self._notes[mark:]]
        self._note_keywords(schema, _UNCHECKED_ARRAY)
        sized = annotation.startswith("list[")
        args = _lengths(schema, "minItems", "maxItems") if sized else []
        unique = ("UniqueItems()",) if schema.get("uniqueItems") is True else ()
        return self._constrained(annotation, args, unique)

    def _ref(self, ref: Any) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return "Any"
        if ref in self._refs:
            name = self._refs[ref]
            if name in self._pending and name not in self._defined:
                # a cycle of references with no model in between (`A = B`, `B = A | None`) has
                # no Python spelling: the inner reference accepts any value
                return "Any"
            self.recursive = self.recursive or name in self._pending
            self._notes += self._ref_notes.get(ref, [])
            return name
        target: Any = self._root
        for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return "Any"
            target = target[part]
        if not isinstance(target, dict):
            return "Any"
        name = self.claim(class_name(ref.rsplit("/", 1)[-1] if ref != "#" else "Root"))
        self._refs[ref] = name
        self._pending.add(name)
        mark = len(self._notes)
        if _plain_object(target):
            self._ref_class = name
        annotation = self.annotation(target, name)
        self._ref_notes[ref] = self._notes[mark:]
        self._pending.discard(name)
        if name not in self._defined:  # the target is not a model or enum: alias it
            # A type that refers to itself without a model in between cannot be spelled as an
            # alias; the self-reference becomes Any.
            annotation = _replace_name(annotation, name, "Any")
            self._refs[ref] = annotation
            self._classes.append(f"{name} = {annotation}")
        return annotation

    def _merge_all_of(self, schema: dict[str, Any], seen: tuple[int, ...] = ()) -> dict[str, Any]:
        """One schema for an `allOf`; a part that (through `$ref`s) contains itself is merged once."""
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        properties: dict[str, Any] = dict(_mapping(merged.get("properties")))
        required: list[str] = _names_list(merged.get("required"))
        seen += (id(schema),)
        for part in schema["allOf"]:
            part = self._resolve(part)
            if not isinstance(part, dict) or id(part) in seen:
                continue
            if isinstance(part.get("allOf"), list):
                part = self._merge_all_of(part, seen)
            properties.update(_mapping(part.get("properties")))
            required += [r for r in _names_list(part.get("required")) if r not in required]
            for key, value in part.items():
                if key not in ("properties", "required"):
                    merged.setdefault(key, value)
        if properties:
            merged |= {"type": "object", "properties": properties, "required": required}
        return merged

    def _resolve(self, schema: Any) -> Any:
        seen = 0
        while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 32:
            target: Any = self._root
            for part in schema["$ref"].lstrip("#").strip("/").split("/"):
                target = target.get(part) if isinstance(target, dict) else None
            schema, seen = target, seen + 1
        return schema

    def _literal(self, values: list[Any]) -> str:
        scalars = [
            v
            for v in values
            if v is None or isinstance(v, (int, bool)) or isinstance(v, str) and not _has_surrogates(v)
        ]
        # floats, objects, arrays and text pydantic cannot hold (lone surrogates, which JSON's
        # `\ud800` escapes allow) cannot be Literal members
        if len(scalars) != len(values):
            return f"Annotated[Any, OneOf({', '.join(py_literal(v) for v in values)})]"
        members = [py_literal(v) for v in values if v is not None]
        literal = f"Literal[{', '.join(dict.fromkeys(members))}]" if members else "None"
        return f"{literal} | None" if members and None in values else literal

    def _enum(self, values: list[Any], hint: str) -> str:
        if not all(isinstance(v, str) and not _has_surrogates(v) for v in values):
            return self._literal(values)
        name = self.claim(class_name(hint))
        members = UniqueNames()
        self._defined.add(name)
        lines = [f"class {name}(str, Enum):"]
        for value in dict.fromkeys(values):
            member = members.claim(identifier(value, fallback="value") if value else "empty")
            if member.startswith("_") or member in ("name", "value", "mro"):
                member = members.claim(f"{member.strip('_')}_value")
            lines.append(f"    {member} = {py_literal(value)}")
        self._classes.append("\n".join(lines))
        return name

    def _object(self, schema: dict[str, Any], hint: str) -> str:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties", True)
        if not isinstance(properties, dict) or not properties:
            self._note_keywords(schema, _UNCHECKED_OBJECT)
            annotation = "dict[str, Any]"
            if isinstance(extra, dict) and extra:
                mark = len(self._notes)
                annotation = f"dict[str, {self.annotation(extra, f'{hint}Value')}]"
                self._notes[mark:] = [f"each value: {note}" for note in self._notes[mark:]]
            return self._constrained(annotation, _lengths(schema, "minProperties", "maxProperties"))
        doc: str | None = None
        if self._ref_class == hint:
            name, self._ref_class = hint, None
        else:  # a property's own object: its description is the field's, not repeated on the class
            name, doc = self.claim(class_name(hint)), ""
        self.model(name, schema, extra="forbid" if extra is False else "allow", doc=doc)
        return name

    # -- models ------------------------------------------------------------------------------

    def model(self, name: str, schema: dict[str, Any], extra: str, doc: str | None = None) -> None:
        """Define a model class `name` for an object schema (`Closed` if `extra` is "forbid")."""
        properties = dict(_mapping(schema.get("properties")))
        required = set(_names_list(schema.get("required")))
        # A required name the schema does not declare is still a property the tool needs.
        properties |= {str(r): {} for r in sorted(required, key=str) if r not in properties}
        placeholder = len(self._classes)
        self._classes.append("")  # keep definition order: dependencies are appended after this slot
        self._defined.add(name)
        lines = [f"class {name}({'Closed' if extra == 'forbid' else 'Open'}):"]
        mark = len(self._notes)
        self._note_keywords(schema, _UNCHECKED_ANY + _UNCHECKED_OBJECT + ("minProperties", "maxProperties"))
        extra_schema = schema.get("additionalProperties")
        if isinstance(extra_schema, dict) and extra_schema:
            self._notes.append(_keyword("additionalProperties", extra_schema))
        description = doc if doc is not None else schema.get("description")
        own = description if isinstance(description, str) else None
        description = with_notes(own, self.take_notes(mark))
        if description and description.strip():
            lines.append(docstring(description, "    "))
        # A name pydantic cannot hold (a lone surrogate) is sent as the nearest one it can.
        properties = {_holdable(str(prop)): value for prop, value in properties.items()}
        required = {_holdable(r) for r in required}
        # A property whose name is a valid field name keeps it; the others get names that are no
        # property's name, since a field's name must not match another field's (wire) alias.
        wire_names = {str(prop) for prop in properties}
        fields = UniqueNames(MODEL_RESERVED | _ANNOTATION_NAMES | {name} | wire_names, ignore_case=False)
        specs = []
        for prop, prop_schema in properties.items():
            keeps = field_name(str(prop)) == prop and prop != name
            field = str(prop) if keeps else fields.claim(field_name(str(prop)))
            hint = class_name(field)
            if not self._class_names.available(hint):
                hint = f"{name}{hint}"
            mark = len(self._notes)
            annotation = self.annotation(prop_schema, hint)
            notes = self.take_notes(mark)
            forward = bool(self._pending) and not self._pending.isdisjoint(_names_in(annotation))
            specs.append((field, str(prop), annotation, prop_schema, prop in required, forward, notes))
        for field, wire, annotation, prop_schema, is_required, forward, notes in specs:
            if field in self.names:  # a field named like a class would hide it from later annotations
                field = fields.claim(f"{field}_")
            lines.append(self._field(field, wire, annotation, prop_schema, is_required, forward, notes))
        if len(lines) == 1:
            lines.append("    pass")
        self._models.append(name)
        self._classes[placeholder] = "\n".join(lines)
        # nested classes were appended after the placeholder; move this class after them
        self._classes.append(self._classes.pop(placeholder))

    def _field(
        self,
        field: str,
        wire: str,
        annotation: str,
        schema: Any,
        required: bool,
        forward: bool,
        notes: list[str],
    ) -> str:
        default: str | None = None
        if isinstance(schema, dict) and "default" in schema:
            default = py_literal(schema["default"])
        elif not required:
            annotation = _union([annotation, "None"])
            default = "None"
        if forward:  # refers to a class defined further down: let pydantic resolve it later
            annotation = repr(annotation)
        args = [default] if default is not None else []
        if field != wire:
            args.append(f"alias={py_literal(wire)}")
        description = schema.get("description") if isinstance(schema, dict) else None
        description = with_notes(description if isinstance(description, str) else None, notes)
        if description:
            args.append(f"description={py_literal(description)}")
        if args == [default]:
            return f"    {field}: {annotation} = {default}"
        if not args:
            return f"    {field}: {annotation}"
        return f"    {field}: {annotation} = Field({', '.join(args)})"


def _plain_object(schema: dict[str, Any]) -> bool:
    """An object schema with properties and nothing that makes it a union or an alias."""
    kind = schema.get("type", "object" if "properties" in schema else None)
    combined = {"$ref", "anyOf", "oneOf", "allOf", "enum", "const"}
    return kind == "object" and bool(schema.get("properties")) and combined.isdisjoint(schema)


def _divides_one(step: float) -> bool:
    """Whether every integer is a multiple of `step` (0.5, 0.25, ...)."""
    try:
        return (1 / step).is_integer()
    except (OverflowError, ZeroDivisionError):
        return False


def with_notes(description: str | None, notes: list[str]) -> str | None:
    """The description, followed by what the model does not check (so a reader of `Params` sees it)."""
    if not notes:
        return description
    text = f"Not checked before the call: {'; '.join(notes)}."
    return f"{description.rstrip()}\n\n{text}" if description and description.strip() else text


def _lengths(schema: dict[str, Any], low: str, high: str) -> list[str]:
    """`min_length`/`max_length` arguments for a pair of count keywords."""
    args = []
    if (least := _count(schema.get(low))) is not None:
        args.append(f"min_length={least}")
    if (most := _count(schema.get(high))) is not None:
        args.append(f"max_length={most}")
    return args


def _bounds(schema: dict[str, Any], integer: bool, notes: list[str]) -> list[str]:
    """`ge`/`gt`/`le`/`lt`/`multiple_of` arguments, for draft-04 (boolean) and later (numeric) forms.

    For integers the bounds are rounded inwards to integers, as pydantic requires; a fractional
    `multipleOf` that every integer meets is dropped, any other one is noted as not checked.
    """
    bounds: list[tuple[str, float | int]] = []
    low, high = schema.get("minimum"), schema.get("maximum")
    if _number(low):
        bounds.append(("gt" if schema.get("exclusiveMinimum") is True else "ge", low))
    if _number(high):
        bounds.append(("lt" if schema.get("exclusiveMaximum") is True else "le", high))
    for key, op in (("exclusiveMinimum", "gt"), ("exclusiveMaximum", "lt")):
        if _number(schema.get(key)):
            bounds.append((op, schema[key]))
    args = []
    for op, value in bounds:
        if integer and not float(value).is_integer():
            op, value = ("ge", math.ceil(value)) if op in ("ge", "gt") else ("le", math.floor(value))
        elif integer:
            value = int(value)
        args.append(f"{op}={value!r}")
    step = schema.get("multipleOf")
    if _number(step) and step > 0:
        if not integer or float(step).is_integer():
            args.append(f"multiple_of={int(step) if integer else step!r}")
        elif not _divides_one(step):
            notes.append(_keyword("multipleOf", step))
    return args


def field_name(prop: str) -> str:
    name = identifier(prop, fallback="field")
    if name in MODEL_RESERVED or name in _ANNOTATION_NAMES or keyword.iskeyword(name):
        name += "_"
    return name


def _has_surrogates(text: str) -> bool:
    """Whether `text` holds a lone surrogate (valid in JSON's escapes, not in pydantic's strings)."""
    return not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text)


def _holdable(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text) if _has_surrogates(text) else text


def _mapping(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (a malformed keyword constrains nothing)."""
    return value if isinstance(value, dict) else {}


def _names_list(value: Any) -> list[str]:
    """The property names of a `required` keyword (other items name no property)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _union(members: list[str]) -> str:
    """`A | B` without repeats; an empty union (`anyOf: []`, `type: []`) constrains nothing."""
    unique = list(dict.fromkeys(m for part in members for m in _split_union(part) if m))
    if "Any" in unique or not unique:
        return "Any"
    none_last = [m for m in unique if m != "None"] + (["None"] if "None" in unique else [])
    return " | ".join(none_last)


def _split_union(annotation: str) -> list[str]:
    """Top-level members of a `A | B` annotation (brackets respected)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(annotation):
        depth += char in "[("
        depth -= char in "])"
        if char == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    parts.append(annotation[start:].strip())
    return parts

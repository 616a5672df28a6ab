"""Writes pydantic model source code from JSON Schema, as found in MCP tool definitions."""

from __future__ import annotations

import builtins
import keyword
import re
from typing import Any

from ipybox.mcp_apigen.names import MODEL_RESERVED, UniqueNames, class_name, identifier

_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
#: Names the generated code uses in class bodies; a field must not shadow them there.
_ANNOTATION_NAMES = {"Any", "Literal", "Enum", "Field", "BaseModel", "RootModel", "ConfigDict", "None"} | {
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tuple",
}
#: Module-level names a generated class must not take.
_MODULE_RESERVED = _ANNOTATION_NAMES | set(dir(builtins))


def py_literal(value: Any) -> str:
    """Python source for a JSON value (repr is exact for JSON's types)."""
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
    (nested models, enums, `$ref` targets) it needs along the way.
    """

    def __init__(self, root: dict[str, Any], reserved: set[str]) -> None:
        self._root = root
        self._classes: list[str] = []
        self._class_names = UniqueNames(reserved | _MODULE_RESERVED)
        self._refs: dict[str, str] = {}
        self._pending: set[str] = set()  # $ref classes whose definition is not yet complete
        self._models: list[str] = []
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

    # -- annotations -------------------------------------------------------------------------

    def annotation(self, schema: Any, hint: str) -> str:
        if schema is True or not isinstance(schema, dict) or not schema:
            return "Any"
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if "const" in schema:
            return self._literal([schema["const"]])
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
            return self._enum(schema["enum"], hint)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                base = {k: v for k, v in schema.items() if k not in (key, "description", "default", "title")}
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
            if isinstance(schema.get("prefixItems"), list) and schema["prefixItems"]:
                members = [self.annotation(s, f"{hint}Item") for s in schema["prefixItems"]]
                return f"tuple[{', '.join(members)}]"
            items = schema.get("items")
            if isinstance(items, list):  # draft-04 tuple form
                return (
                    f"tuple[{', '.join(self.annotation(s, f'{hint}Item') for s in items)}]"
                    if items
                    else "list[Any]"
                )
            return f"list[{self.annotation(items, f'{hint}Item')}]"
        if isinstance(kind, str) and kind in _SCALARS:
            return _SCALARS[kind]
        return "Any"

    def _ref(self, ref: Any) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return "Any"
        if ref in self._refs:
            self.recursive = True
            return self._refs[ref]
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
        annotation = self.annotation(target, name)
        self._pending.discard(name)
        if name not in self._defined:  # the target is not a model or enum: alias it
            # A type that refers to itself without a model in between cannot be spelled as an
            # alias; the self-reference becomes Any.
            annotation = re.sub(rf"\b{re.escape(name)}\b", "Any", annotation)
            self._refs[ref] = annotation
            self._classes.append(f"{name} = {annotation}")
        return annotation

    def _merge_all_of(self, schema: dict[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        properties: dict[str, Any] = dict(merged.get("properties", {}))
        required: list[str] = list(merged.get("required") or [])
        for part in schema["allOf"]:
            part = self._resolve(part)
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("allOf"), list):
                part = self._merge_all_of(part)
            properties.update(part.get("properties", {}))
            required += [r for r in part.get("required") or [] if r not in required]
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
            v for v in values if v is None or isinstance(v, (str, int, bool)) and not isinstance(v, float)
        ]
        if len(scalars) != len(values):
            return "Any"  # floats, objects and arrays cannot be Literal members
        members = [py_literal(v) for v in values if v is not None]
        literal = f"Literal[{', '.join(dict.fromkeys(members))}]" if members else "None"
        return f"{literal} | None" if members and None in values else literal

    def _enum(self, values: list[Any], hint: str) -> str:
        if not all(isinstance(v, str) for v in values):
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
            if isinstance(extra, dict) and extra:
                return f"dict[str, {self.annotation(extra, f'{hint}Value')}]"
            return "dict[str, Any]"
        name = self.claim(class_name(hint))
        self.model(name, schema, extra="forbid" if extra is False else "allow")
        return name

    # -- models ------------------------------------------------------------------------------

    def model(self, name: str, schema: dict[str, Any], extra: str, doc: str | None = None) -> None:
        """Define a `BaseModel` subclass `name` for an object schema."""
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        placeholder = len(self._classes)
        self._classes.append("")  # keep definition order: dependencies are appended after this slot
        self._defined.add(name)
        lines = [f"class {name}(BaseModel):"]
        description = doc if doc is not None else schema.get("description")
        if isinstance(description, str) and description.strip():
            lines.append(docstring(description, "    "))
            lines.append("")
        lines.append(f"    model_config = {'_CLOSED' if extra == 'forbid' else '_OPEN'}")
        # A property whose name is a valid field name keeps it; the others get names that are no
        # property's name, since a field's name must not match another field's (wire) alias.
        wire_names = {str(prop) for prop in properties or {}}
        fields = UniqueNames(MODEL_RESERVED | _ANNOTATION_NAMES | {name} | wire_names, ignore_case=False)
        specs = []
        for prop, prop_schema in (properties or {}).items():
            own = _field_name(str(prop)) == prop and prop != name
            field = str(prop) if own else fields.claim(_field_name(str(prop)))
            hint = class_name(field)
            if not self._class_names.available(hint):
                hint = f"{name}{hint}"
            annotation = self.annotation(prop_schema, hint)
            forward = any(re.search(rf"\b{p}\b", annotation) for p in self._pending)
            specs.append((field, str(prop), annotation, prop_schema, prop in required, forward))
        for field, wire, annotation, prop_schema, is_required, forward in specs:
            if field in self.names:  # a field named like a class would hide it from later annotations
                field = fields.claim(f"{field}_")
            lines.append(self._field(field, wire, annotation, prop_schema, is_required, forward))
        self._models.append(name)
        self._classes[placeholder] = "\n".join(lines)
        # nested classes were appended after the placeholder; move this class after them
        self._classes.append(self._classes.pop(placeholder))

    def _field(
        self, field: str, wire: str, annotation: str, schema: Any, required: bool, forward: bool
    ) -> str:
        args: list[str] = []
        has_default = isinstance(schema, dict) and "default" in schema
        if has_default:
            args.append(f"default={py_literal(schema['default'])}")
        elif not required:
            annotation = _union([annotation, "None"])
            args.append("default=None")
        if forward:  # refers to a class defined further down: let pydantic resolve it later
            annotation = repr(annotation)
        if field != wire:
            args.append(f"alias={py_literal(wire)}")
        description = schema.get("description") if isinstance(schema, dict) else None
        if isinstance(description, str) and description:
            args.append(f"description={py_literal(description)}")
        if not args:
            return f"    {field}: {annotation}"
        return f"    {field}: {annotation} = Field({', '.join(args)})"


def _field_name(prop: str) -> str:
    name = identifier(prop, fallback="field")
    if name in MODEL_RESERVED or name in _ANNOTATION_NAMES or keyword.iskeyword(name):
        name += "_"
    return name


def _union(members: list[str]) -> str:
    unique = list(dict.fromkeys(m for part in members for m in _split_union(part)))
    if "Any" in unique:
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

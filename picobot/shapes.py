"""What every wire shape's pydantic model shares: text rules, schema style, error reading.

PicoBot defines each shape that crosses a boundary (an admin API body or answer, a
WebSocket frame, a tool's arguments) once, as a pydantic model: the model validates
what comes in, serializes what goes out, and generates the JSON schema that documents
it, so the three cannot drift apart. Each boundary keeps its own error codes; they
are derived here from pydantic's errors by :func:`problem`, in one order everywhere:
unknown fields first (a typo must never be read as something else), then missing
ones, then the first wrong value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import ErrorDetails, PydanticCustomError

from picobot.messages import storable


def _storable(value: str) -> str:
    if not storable(value):
        raise PydanticCustomError("not_unicode", "is not valid Unicode")
    return value


STORABLE = AfterValidator(_storable)
"""Refuses a string that SQLite or a channel cannot store or send (a lone surrogate).

Put it after any ``StringConstraints``, so that they stay in the generated schema."""

Text = Annotated[str, STORABLE]
"""A string that SQLite and every channel can store and send back."""


class DocumentSchema(GenerateJsonSchema):
    """JSON schema as PicoBot publishes it: no per-field titles, only descriptions.

    Field titles would just repeat the property names in every served document.
    """

    def field_title_should_be_set(self, schema: object) -> bool:
        """Never: a property's name is its title."""
        return False


def optional_as_absent(schema: dict[str, Any]) -> dict[str, Any]:
    """A property schema without the ``null`` branch an optional field's type adds.

    Where null is read as "absent" (a query parameter, a tool argument), the published
    schema offers only the real type, with no ``default: null``.
    """
    prop = dict(schema)
    branches = [b for b in prop.pop("anyOf", []) if b != {"type": "null"}]
    if len(branches) == 1:
        prop = {**branches[0], **prop}
    elif branches:
        prop["anyOf"] = branches
    if "default" in prop and prop["default"] is None:
        del prop["default"]
    return prop


ProblemKind = Literal["unknown", "missing", "invalid"]


@dataclass(frozen=True, slots=True)
class Problem:
    """The one thing a boundary reports about input its model refused.

    ``fields`` names every unknown or missing field, or the one invalid field;
    ``detail`` says what is wrong with an invalid value ("must be a string"), and
    ``error`` is pydantic's own report of it, for a boundary that words it its way.
    """

    kind: ProblemKind
    fields: tuple[str, ...]
    detail: str = ""
    error: ErrorDetails | None = None

    @property
    def names(self) -> str:
        """The fields, comma-separated, for a message."""
        return ", ".join(self.fields)


def problem(exc: ValidationError) -> Problem:
    """The problem to report for ``exc``: unknown fields, else missing ones, else the first."""
    errors = exc.errors(include_url=False)
    unknown = sorted({_field(e) for e in errors if e["type"] == "extra_forbidden"})
    if unknown:
        return Problem("unknown", tuple(unknown))
    missing = sorted({_field(e) for e in errors if e["type"] in _MISSING})
    if missing:
        return Problem("missing", tuple(missing))
    first = errors[0]
    return Problem("invalid", (_field(first),), _detail(first), first)


_MISSING = frozenset({"missing", "union_tag_not_found"})


def _field(error: ErrorDetails) -> str:
    if error["type"].startswith("union_tag"):
        # A discriminated union reports its tag field in the context, not the location.
        return str(error.get("ctx", {}).get("discriminator", "type")).strip("'")
    # The location leads with the union tag or list indexes; the field is its last name.
    names = [part for part in error["loc"] if isinstance(part, str)]
    return names[-1] if names else "body"


_DETAILS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "string_too_long": "is too long",
    "string_too_short": "must not be empty",
    "string_pattern_mismatch": "holds characters that are not allowed",
    "not_unicode": "is not valid Unicode",
}


def _detail(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "literal_error":
        return f"must be {ctx['expected']}"
    if kind == "union_tag_invalid":
        return f"must be one of {ctx['expected_tags']}"
    return _DETAILS.get(kind, "is not valid")

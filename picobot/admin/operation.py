"""How one admin route is documented: its answers and the models of its inputs.

:mod:`picobot.admin.openapi` builds the served document from these; route groups that
keep their shapes in a module of their own (such as :mod:`picobot.admin.fact_models`)
list their operations there with the same types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from picobot.admin import models as m

REF_TEMPLATE = "#/components/schemas/{model}"
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Reply:
    """One documented answer: a model (served as JSON) or another media type, or nothing."""

    description: str
    model: type[BaseModel] | None = None
    media_type: str | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """One route: its answers, and the models of its query string and body."""

    method: str
    path: str
    summary: str
    replies: dict[int, Reply]
    query: type[m.Query] = m.NoQuery
    body: type[BaseModel] | None = None
    path_params: dict[str, str] = field(default_factory=dict)
    public: bool = False


def error_reply(description: str) -> Reply:
    """An error answer (the :class:`~picobot.admin.models.Error` shape)."""
    return Reply(description, m.Error)


TOO_LARGE = error_reply("Body over 64 KiB.")

"""The OpenAPI 3.1 document of the admin API, generated from its models.

Served at ``GET /api/v1/openapi.json``. The schemas are the JSON schemas of the
pydantic models in :mod:`picobot.admin.models`, the same models that validate requests
and serialize answers, and the query parameters come from the query models; only the
list of operations below is written by hand. Tests check the document with an OpenAPI
validator, that its paths are exactly the registered routes, and every answer against
it. Prose lives in ``docs/api.md``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from picobot.admin import event_models as em
from picobot.admin import models as m
from picobot.admin import purge_models as pm
from picobot.admin.fact_models import FACT_OPERATIONS
from picobot.admin.operation import JSON, REF_TEMPLATE, TOO_LARGE, Operation, Reply
from picobot.admin.operation import error_reply as _error
from picobot.shapes import DocumentSchema, optional_as_absent

Schema = dict[str, Any]


USER = {"user_id": "A user id, e.g. telegram:42 (URL-encoded)."}
MEMORY = {**USER, "key": "A memory key: ^[a-z][a-z0-9_]*$, at most 64 characters."}

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "get",
        "/healthz",
        "Liveness and database check (no key needed)",
        {200: Reply("The database answers.", m.Health), 503: Reply("It does not.", m.Health)},
        public=True,
    ),
    Operation(
        "get",
        "/readyz",
        "Readiness: the store takes writes on this version's schema (no key needed)",
        {
            200: Reply(
                "A write commits, the schema is this version's and the disk has room.",
                m.Readiness,
            ),
            503: Reply(
                "Writes fail (locked, read-only), the schema is older or newer than this"
                " version's, or the disk is low.",
                m.Readiness,
            ),
        },
        public=True,
    ),
    Operation(
        "get",
        "/metrics",
        "Prometheus metrics (text format 0.0.4, or OpenMetrics when the Accept header asks for it)",
        {200: Reply("Metrics.", media_type="text/plain; version=0.0.4")},
    ),
    Operation(
        "get",
        "/api/v1/openapi.json",
        "This document",
        {200: Reply("OpenAPI 3.1", media_type=JSON)},
    ),
    Operation(
        "get",
        "/api/v1/sessions",
        "List sessions, most recently active first",
        {200: Reply("A page of sessions.", m.SessionList)},
        query=m.SessionsQuery,
    ),
    Operation(
        "get",
        "/api/v1/sessions/{id}",
        "One session and a page of its messages (oldest first within the page)",
        {200: Reply("The session.", m.SessionDetail), 404: _error("No such session.")},
        query=m.SessionQuery,
        path_params={"id": "Session id."},
    ),
    Operation(
        "get",
        "/api/v1/users/{user_id}/memories",
        "A user's memories, most recently updated first",
        {200: Reply("The memories.", m.MemoryList)},
        path_params=USER,
    ),
    Operation(
        "post",
        "/api/v1/users/{user_id}/memories",
        "Create a memory (same key and content rules as /remember)",
        {
            201: Reply("Created.", m.Memory),
            409: _error("The key exists, the user is at the cap, or memories are off."),
            413: TOO_LARGE,
        },
        body=m.MemoryCreate,
        path_params=USER,
    ),
    Operation(
        "put",
        "/api/v1/users/{user_id}/memories/{key}",
        "Replace the content of an existing memory",
        {
            200: Reply("Updated.", m.Memory),
            404: _error("No such memory."),
            409: _error("The user is at the cap, or memories are off."),
            413: TOO_LARGE,
        },
        body=m.MemoryUpdate,
        path_params=MEMORY,
    ),
    Operation(
        "delete",
        "/api/v1/users/{user_id}/memories/{key}",
        "Delete a memory",
        {204: Reply("Deleted."), 404: _error("No such memory.")},
        path_params=MEMORY,
    ),
    Operation(
        "get",
        "/api/v1/users/{user_id}/export",
        "Everything stored about a user, streamed as JSON Lines",
        {
            200: Reply(
                "One JSON record per line (see docs/export-import.md).",
                media_type="application/x-ndjson",
            ),
            404: _error("Nothing is stored about this user."),
        },
        path_params=USER,
    ),
    Operation(
        "get",
        "/api/v1/search",
        "Keyword search over one user's messages, notes, learned facts and reflections",
        {200: Reply("Hits, best first.", m.SearchResult)},
        query=m.SearchQuery,
    ),
    Operation(
        "get",
        "/api/v1/retention",
        "Retention config, the last recorded run, and what has expired now",
        {200: Reply("Retention status.", pm.Retention)},
    ),
    Operation(
        "post",
        "/api/v1/purge",
        "Plan a purge: exact counts and a confirmation token for this key",
        {
            200: Reply("The plan (no token when nothing matches).", pm.PurgePlan),
            404: _error("No such session or message."),
            413: TOO_LARGE,
        },
        body=pm.PurgeRequest,
    ),
    Operation(
        "post",
        "/api/v1/purge/{token}/confirm",
        "Answer a planned purge: y/yes deletes, anything else cancels",
        {
            200: Reply("Deleted counts, or cancelled.", pm.ConfirmResult),
            404: _error("Unknown or used token, or one issued to another key."),
            410: _error("The confirmation expired; nothing was deleted."),
            413: TOO_LARGE,
        },
        body=pm.ConfirmRequest,
        path_params={"token": "The confirm_token of the plan."},
    ),
    Operation(
        "delete",
        "/api/v1/messages/{id}",
        "Plan deleting one message and what was derived from it (confirm like a purge)",
        {
            200: Reply("The plan and its confirmation token.", pm.PurgePlan),
            404: _error("No such message."),
        },
        path_params={"id": "Message id."},
    ),
    *FACT_OPERATIONS,
    Operation(
        "get",
        "/api/v1/events",
        "What happened (ids and counts, no content), oldest first, filtered and paged",
        {200: Reply("A page of events and the cursor of the next.", em.EventList)},
        query=em.EventsQuery,
    ),
    Operation(
        "get",
        "/api/v1/events/stream",
        "New events as Server-Sent Events (id, event type, JSON data); resumes after Last-Event-ID",
        {
            200: Reply(
                "An endless text/event-stream; each data line is an Event (see docs/api.md).",
                media_type="text/event-stream",
            ),
            429: _error(
                "Too many failed authentications from this address (too_many_failures), or"
                " this key already has its most streams open (too_many_key_streams)."
            ),
            503: _error("Too many streams are open, or the server is shutting down."),
        },
        query=em.EventsStreamQuery,
    ),
)

PROTECTED_REPLIES = {
    400: _error("Malformed JSON, unknown field or parameter, or a broken validation rule."),
    401: _error("Missing or invalid API key."),
    429: _error("Too many failed authentications from this address; see Retry-After."),
    503: _error("The database is unavailable."),
}
"""Answers every route with a key can give (400: any route refuses an unknown parameter)."""


def _components() -> dict[str, Schema]:
    """The JSON schema of every model an operation names, by model name."""
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {}
    for op in OPERATIONS:
        if op.body is not None:
            wanted[(op.body, "validation")] = None
        for reply in [*op.replies.values(), *PROTECTED_REPLIES.values()]:
            if reply.model is not None:
                wanted[(reply.model, "serialization")] = None
    _, document = models_json_schema(
        list(wanted), ref_template=REF_TEMPLATE, schema_generator=DocumentSchema
    )
    schemas: dict[str, Schema] = document["$defs"]
    return dict(sorted(schemas.items()))


def _parameters(op: Operation) -> list[Schema]:
    params = [
        {"name": name, "in": "path", "required": True, "description": text}
        | {"schema": {"type": "string"}}
        for name, text in op.path_params.items()
    ]
    schema = op.query.model_json_schema(schema_generator=DocumentSchema)
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        # An optional parameter is absent, never null.
        prop = optional_as_absent(prop)
        description = prop.pop("description", "")
        params.append(
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": description,
                "schema": prop,
            }
        )
    return params


def _content(reply: Reply) -> Schema:
    answer: Schema = {"description": reply.description}
    if reply.model is not None:
        schema = {"$ref": REF_TEMPLATE.format(model=reply.model.__name__)}
        answer["content"] = {JSON: {"schema": schema}}
    elif reply.media_type == JSON:
        answer["content"] = {JSON: {}}  # this document: its schema is OpenAPI's own
    elif reply.media_type is not None:
        answer["content"] = {reply.media_type: {"schema": {"type": "string"}}}
    return answer


def _operation(op: Operation) -> Schema:
    # An operation's own words for a status win (the event stream's 503).
    replies = op.replies if op.public else {**PROTECTED_REPLIES, **op.replies}
    spec: Schema = {
        "summary": op.summary,
        "responses": {str(status): _content(r) for status, r in sorted(replies.items())},
    }
    if op.public:
        spec["security"] = []
    parameters = _parameters(op)
    if parameters:
        spec["parameters"] = parameters
    if op.body is not None:
        ref = {"$ref": REF_TEMPLATE.format(model=op.body.__name__)}
        spec["requestBody"] = {"required": True, "content": {JSON: {"schema": ref}}}
    return spec


def build_document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document."""
    paths: dict[str, Schema] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "PicoBot admin API",
            "version": "1",
            "description": "Operator access to sessions, memories, learned facts, search, "
            "export, retention and two-step purges. Errors are {error: {code, message}}. "
            "See docs/api.md.",
        },
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
            "schemas": _components(),
        },
    }


OPENAPI: dict[str, Any] = build_document()
"""The document served at ``/api/v1/openapi.json``."""

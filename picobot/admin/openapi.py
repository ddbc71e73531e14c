"""The OpenAPI 3.1 document of the admin API, kept as data.

Served at ``GET /api/v1/openapi.json``. A test checks that the routes registered by
:class:`picobot.admin.api.AdminAPI` and the paths here are the same set and
validates live responses against the schemas below, so this document cannot drift
from the code unnoticed. Prose lives in ``docs/api.md``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from picobot.privacy.controller import MAX_PURGE_DAYS
from picobot.store.purge import PurgeCounts

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _array(item: str) -> Schema:
    return {"type": "array", "items": _ref(item)}


def _err(description: str) -> Schema:
    return _json(description, "Error")


def _body(schema: str) -> Schema:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


def _query(name: str, description: str, schema: Schema, required: bool = False) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


def _path(name: str, description: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _obj(properties: dict[str, Schema], optional: tuple[str, ...] = ()) -> Schema:
    """A closed object; every property is required unless named in ``optional``."""
    return {
        "type": "object",
        "required": [name for name in properties if name not in optional],
        "properties": properties,
        "additionalProperties": False,
    }


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NSTR: Schema = {"type": ["string", "null"]}
NINT: Schema = {"type": ["integer", "null"]}
TIME: Schema = {"type": "string", "format": "date-time"}
_RETENTION_CONFIG = ("max_age_days", "cleanup_interval_secs", "erase_interval_secs", "batch_size")
_ERASURE = ("last_erased_at", "residue_waiting_since", "erase_due", "purge_residue_since")
NTIME: Schema = {"type": ["string", "null"], "format": "date-time"}

UNAUTHORIZED = _err("Missing or invalid API key.")
BAD_REQUEST = _err("Malformed JSON, unknown field or parameter, or a broken validation rule.")
UNAVAILABLE = _err("The database is unavailable.")
TOO_MANY = _err("Too many failed authentications from this address (see Retry-After).")
USER_ID = _path("user_id", "A user id, e.g. telegram:42 (URL-encoded).")
MEMORY_KEY = _path("key", "A memory key: ^[a-z][a-z0-9_]*$, at most 64 characters.")


def _op(summary: str, responses: dict[str, Schema], **extra: Any) -> Schema:
    """An operation; every protected one can also answer 401, 429 and 503."""
    return {
        "summary": summary,
        "responses": {**responses, "401": UNAUTHORIZED, "429": TOO_MANY, "503": UNAVAILABLE},
        **extra,
    }


# Derived from the dataclass, so a new kind of purged row is documented as it appears.
COUNT_KINDS = tuple(f.name for f in fields(PurgeCounts))
SCOPES: Schema = {"enum": ["session", "user", "older_than"]}

SCHEMAS: dict[str, Schema] = {
    "Error": _obj({"error": _obj({"code": STR, "message": STR})}),
    "Health": _obj(
        {"status": {"enum": ["ok", "unavailable"]}, "database": {"enum": ["ok", "unavailable"]}}
    ),
    "Readiness": _obj(
        {
            "status": {"enum": ["ready", "unavailable"]},
            "database": {"enum": ["ok", "unavailable"]},
            "disk": {"enum": ["ok", "low"]},
        }
    ),
    "Session": _obj(
        {
            "id": STR,
            "user_id": STR,
            "channel": STR,
            "chat_id": STR,
            "parent_session_id": NSTR,
            "created_at": TIME,
            "last_active": TIME,
            "message_count": INT,
        }
    ),
    "SessionList": _obj(
        {"sessions": _array("Session"), "limit": INT, "offset": INT, "next_offset": NINT}
    ),
    "Message": _obj(
        {"seq_order": INT, "role": STR, "content": STR, "token_estimate": INT, "created_at": TIME}
    ),
    "SessionDetail": _obj(
        {"session": _ref("Session"), "messages": _array("Message"), "next_before_seq": NINT}
    ),
    "Memory": _obj({"key": STR, "content": STR, "created_at": TIME, "updated_at": TIME}),
    "MemoryList": _obj({"user_id": STR, "memories": _array("Memory")}),
    "MemoryCreate": _obj({"key": STR, "content": STR}),
    "MemoryUpdate": _obj({"content": STR}),
    "SearchHit": _obj(
        {
            "kind": {"enum": ["message", "memory"]},
            "session_id": NSTR,
            "seq_order": NINT,
            "text": STR,
            "created_at": TIME,
            "score": {"type": "number"},
        }
    ),
    "SearchResult": _obj(
        {"user_id": STR, "terms": {"type": "array", "items": STR}, "hits": _array("SearchHit")}
    ),
    "PurgeCounts": _obj({**dict.fromkeys(COUNT_KINDS, INT), "total": INT}),
    "RetentionRun": _obj(
        {
            "started_at": NTIME,
            "finished_at": NTIME,
            "ok": {"type": ["boolean", "null"]},
            "unfinished": {"type": "boolean"},
            "result": NSTR,
            "error": NSTR,
        }
    ),
    "Retention": _obj(
        {
            "config": _obj(dict.fromkeys(_RETENTION_CONFIG, INT)),
            "last_run": {"oneOf": [{"type": "null"}, _ref("RetentionRun")]},
            "erasure": {
                **_obj(dict.fromkeys(_ERASURE, NTIME)),
                "description": "Rows deleted by retention are gone at once; the rewrite"
                " that erases their leftover bytes runs at most every erase_interval_secs."
                " purge_residue_since: the start of a purge that failed or was cut short"
                " before its erasure; the next retention run erases what it left.",
            },
            "scheduled": {"type": "boolean"},
            "cutoff": TIME,
            "expired_now": _ref("PurgeCounts"),
        }
    ),
    "PurgeRequest": {
        **_obj(
            {
                "scope": SCOPES,
                "session_id": STR,
                "user_id": STR,
                "days": {"type": "integer", "minimum": 1, "maximum": MAX_PURGE_DAYS},
            },
            optional=("session_id", "user_id", "days"),
        ),
        "description": "scope=session needs session_id, user needs user_id, older_than"
        " needs days; no other field is allowed.",
    },
    "PurgePlan": _obj(
        {
            "confirm_token": {
                "type": ["string", "null"],
                "description": "null when nothing matches",
            },
            "plan": _obj(
                {
                    "scope": SCOPES,
                    "session_id": STR,
                    "user_id": STR,
                    "days": INT,
                    "counts": _ref("PurgeCounts"),
                    "prompt": STR,
                },
                optional=("session_id", "user_id", "days"),
            ),
            "expires_at": NTIME,
        }
    ),
    "ConfirmRequest": _obj({"answer": {"type": "string", "description": "y or yes deletes"}}),
    "ConfirmResult": {
        "oneOf": [
            _obj(
                {
                    "deleted": _ref("PurgeCounts"),
                    "duration_secs": {"type": "number"},
                    "summary": STR,
                }
            ),
            _obj({"cancelled": {"const": True}}),
        ]
    },
}

LIMIT_PAGE = {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}

PATHS: dict[str, Schema] = {
    "/healthz": {
        "get": {
            "summary": "Liveness and database check (no key needed)",
            "security": [],
            "responses": {
                "200": _json("The database answers.", "Health"),
                "503": _json("The database does not answer.", "Health"),
            },
        }
    },
    "/readyz": {
        "get": {
            "summary": "Readiness: the store takes writes (no key needed)",
            "security": [],
            "responses": {
                "200": _json("A write commits and the disk has room.", "Readiness"),
                "503": _json("Writes fail (locked, read-only, disk low).", "Readiness"),
            },
        }
    },
    "/metrics": {
        "get": _op(
            "Prometheus metrics (text exposition format 0.0.4)",
            {
                "200": {
                    "description": "Metrics.",
                    "content": {"text/plain; version=0.0.4": {"schema": STR}},
                }
            },
        )
    },
    "/api/v1/openapi.json": {
        "get": _op(
            "This document",
            {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}},
        )
    },
    "/api/v1/sessions": {
        "get": _op(
            "List sessions, most recently active first",
            {"200": _json("A page of sessions.", "SessionList"), "400": BAD_REQUEST},
            parameters=[
                _query("user", "Only this user's sessions.", STR),
                _query("limit", "Page size.", LIMIT_PAGE),
                _query("offset", "Sessions to skip.", {"type": "integer", "minimum": 0}),
            ],
        )
    },
    "/api/v1/sessions/{id}": {
        "get": _op(
            "One session and a page of its messages (oldest first within the page)",
            {
                "200": _json("The session.", "SessionDetail"),
                "400": BAD_REQUEST,
                "404": _err("No such session."),
            },
            parameters=[
                _path("id", "Session id."),
                _query("limit", "Messages per page.", LIMIT_PAGE),
                _query(
                    "before_seq",
                    "Only messages with seq_order below this (next_before_seq pages back).",
                    {"type": "integer", "minimum": 1},
                ),
            ],
        )
    },
    "/api/v1/users/{user_id}/memories": {
        "get": _op(
            "A user's memories, most recently updated first",
            {"200": _json("The memories.", "MemoryList"), "400": BAD_REQUEST},
            parameters=[USER_ID],
        ),
        "post": _op(
            "Create a memory (same key and content rules as /remember)",
            {
                "201": _json("Created.", "Memory"),
                "400": BAD_REQUEST,
                "409": _err("The key exists, the user is at the cap, or memories are off."),
                "413": _err("Body over 64 KiB."),
            },
            parameters=[USER_ID],
            requestBody=_body("MemoryCreate"),
        ),
    },
    "/api/v1/users/{user_id}/memories/{key}": {
        "put": _op(
            "Replace the content of an existing memory",
            {
                "200": _json("Updated.", "Memory"),
                "400": BAD_REQUEST,
                "404": _err("No such memory."),
                "409": _err("Memories are off."),
                "413": _err("Body over 64 KiB."),
            },
            parameters=[USER_ID, MEMORY_KEY],
            requestBody=_body("MemoryUpdate"),
        ),
        "delete": _op(
            "Delete a memory",
            {
                "204": {"description": "Deleted."},
                "400": BAD_REQUEST,
                "404": _err("No such memory."),
            },
            parameters=[USER_ID, MEMORY_KEY],
        ),
    },
    "/api/v1/users/{user_id}/export": {
        "get": _op(
            "Everything stored about a user, streamed as JSON Lines",
            {
                "200": {
                    "description": "One JSON record per line (see docs/export-import.md).",
                    "content": {"application/x-ndjson": {"schema": STR}},
                },
                "400": BAD_REQUEST,
                "404": _err("Nothing is stored about this user."),
            },
            parameters=[USER_ID],
        )
    },
    "/api/v1/search": {
        "get": _op(
            "Keyword search over one user's messages and memories",
            {"200": _json("Hits, best first.", "SearchResult"), "400": BAD_REQUEST},
            parameters=[
                _query("user", "Whose records to search.", STR, required=True),
                _query("q", "Search text; keywords are extracted from it.", STR, required=True),
                _query(
                    "limit",
                    "Most hits.",
                    {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                ),
            ],
        )
    },
    "/api/v1/retention": {
        "get": _op(
            "Retention config, the last recorded run, and what has expired now",
            {"200": _json("Retention status.", "Retention"), "400": BAD_REQUEST},
        )
    },
    "/api/v1/purge": {
        "post": _op(
            "Plan a purge: exact counts and a confirmation token for this key",
            {
                "200": _json("The plan (no token when nothing matches).", "PurgePlan"),
                "400": BAD_REQUEST,
                "404": _err("No such session."),
                "413": _err("Body over 64 KiB."),
            },
            requestBody=_body("PurgeRequest"),
        )
    },
    "/api/v1/purge/{token}/confirm": {
        "post": _op(
            "Answer a planned purge: y/yes deletes, anything else cancels",
            {
                "200": _json("Deleted counts, or cancelled.", "ConfirmResult"),
                "400": BAD_REQUEST,
                "404": _err("Unknown or used token, or one issued to another key."),
                "410": _err("The confirmation expired; nothing was deleted."),
                "413": _err("Body over 64 KiB."),
            },
            parameters=[_path("token", "The confirm_token of the plan.")],
            requestBody=_body("ConfirmRequest"),
        )
    },
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "PicoBot admin API",
        "version": "1",
        "description": "Operator access to sessions, memories, search, export, retention "
        "and two-step purges. Errors are {error: {code, message}}. See docs/api.md.",
    },
    "security": [{"bearer": []}, {"apiKey": []}],
    "paths": PATHS,
    "components": {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"},
            "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        },
        "schemas": SCHEMAS,
    },
}
"""The document served at ``/api/v1/openapi.json``."""

"""The served OpenAPI document: valid OpenAPI 3.1, exactly the registered routes, and the
same rules as the server for every request body and query string it describes."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError
from openapi_spec_validator import OpenAPIV31SpecValidator

from tests.admin.helpers import ALICE, BOB, Api, users


async def test_the_served_document_is_valid_openapi_3_1(api: Api) -> None:
    served = await api.call("GET", "/api/v1/openapi.json")
    assert served["openapi"].startswith("3.1")
    # The real validator: the OpenAPI 3.1 meta-schema, every $ref resolved.
    OpenAPIV31SpecValidator(served).validate()
    assert served == api.contract.document


async def test_openapi_document_matches_the_routes(api: Api) -> None:
    served = api.contract.document
    registered = {
        (route.method.lower(), route.resource.canonical)
        for route in api.client.app.router.routes()
        if route.resource is not None
    }
    documented = {
        (method, path)
        for path, item in served["paths"].items()
        for method in item
        if method in ("get", "post", "put", "delete", "patch")
    }
    assert registered == documented
    # Path parameters are declared for every templated segment.
    for path, item in served["paths"].items():
        names = {p.strip("{}") for p in path.split("/") if p.startswith("{")}
        for op in item.values():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, path


def test_the_checker_checks_times() -> None:
    # date-time is only an annotation unless a format checker for it is installed.
    assert "date-time" in Draft202012Validator.FORMAT_CHECKER.checkers


async def test_the_contract_refuses_an_undocumented_answer(api: Api) -> None:
    with pytest.raises(AssertionError, match="not documented"):
        api.contract.check("GET", "/api/v1/retention", 418, "application/json", {})
    memory = {"key": "a", "content": "b", "created_at": "yesterday", "updated_at": "yesterday"}
    with pytest.raises(ValidationError):
        api.contract.schema("Memory").validate(memory)
    with pytest.raises(ValidationError):
        api.contract.schema("Memory").validate({**memory, "owner": "x"})


def _body_schema(api: Api, method: str, path: str) -> Draft202012Validator:
    schema = api.contract.operation(method, path)["requestBody"]["content"]["application/json"]
    return api.contract.validator(schema["schema"])


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        ({"scope": "user", "user_id": ALICE}, True),
        ({"scope": "session", "session_id": "abc"}, True),
        ({"scope": "older_than", "days": 5}, True),
        ({"scope": "everything"}, False),
        ({"scope": "user"}, False),
        ({"scope": "user", "user_id": ALICE, "days": 3}, False),
        ({"scope": "user", "user_id": "bad\nid"}, False),
        ({"scope": "older_than", "days": 0}, False),
        ({"scope": "older_than", "days": 36_501}, False),
        ({"scope": "older_than", "days": "5"}, False),
        ({}, False),
    ],
)
async def test_the_documented_purge_body_is_the_servers_rule(
    chatted: Api, body: dict[str, Any], accepted: bool
) -> None:
    assert _body_schema(chatted, "POST", "/api/v1/purge").is_valid(body) == accepted
    # Planning deletes nothing; the session "abc" does not exist (a 404, not a 400).
    expect = 400 if not accepted else 404 if body["scope"] == "session" else 200
    await chatted.call("POST", "/api/v1/purge", body=body, expect=expect)


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        ({"key": "city", "content": "Lisbon"}, True),
        ({"key": "city"}, False),
        ({"key": 5, "content": "x"}, False),
        ({"key": "city", "content": "x", "owner": BOB}, False),
    ],
)
async def test_the_documented_memory_body_is_the_servers_rule(
    chatted: Api, body: dict[str, Any], accepted: bool
) -> None:
    assert _body_schema(chatted, "POST", users(BOB) + "/memories").is_valid(body) == accepted
    await chatted.call("POST", users(BOB) + "/memories", body=body, expect=201 if accepted else 400)


@pytest.mark.parametrize(
    ("query", "accepted"),
    [("limit=200", True), ("limit=0", False), ("limit=201", False), ("offset=-1", False)],
)
async def test_the_documented_parameters_are_the_servers_rule(
    chatted: Api, query: str, accepted: bool
) -> None:
    name, _, value = query.partition("=")
    params = {
        p["name"]: p for p in chatted.contract.operation("GET", "/api/v1/sessions")["parameters"]
    }
    documented = Draft202012Validator(params[name]["schema"]).is_valid(int(value))
    assert documented == accepted
    await chatted.call("GET", f"/api/v1/sessions?{query}", expect=200 if accepted else 400)

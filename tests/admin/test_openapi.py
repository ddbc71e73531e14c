"""The served OpenAPI document matches the registered routes."""

from __future__ import annotations

import json
from typing import Any

from picobot.admin.openapi import OPENAPI
from tests.admin.helpers import (
    Api,
)


async def test_openapi_document_matches_the_routes(api: Api) -> None:
    served = await api.call("GET", "/api/v1/openapi.json")
    assert served == json.loads(json.dumps(OPENAPI))
    assert served["openapi"].startswith("3.1")
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
    # Every $ref resolves.
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            refs.extend(v for k, v in node.items() if k == "$ref")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(served)
    schemas = served["components"]["schemas"]
    assert refs and all(r.rsplit("/", 1)[1] in schemas for r in refs)
    # Path parameters are declared for every templated segment.
    for path, item in served["paths"].items():
        names = {p.strip("{}") for p in path.split("/") if p.startswith("{")}
        for op in item.values():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, path
